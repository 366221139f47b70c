"""The simulator's screenshots show each label of the app whole (返回, 分享, 颜色, 尺码 … were cut to
their first character because the font was sized by the node's height only, not its width)."""

from __future__ import annotations

from phonesim.screenshot import MIN_LABEL_SIZE, label_font, node_label, render_image
from phonesim.server import PhoneSim

APP = "com.xunmeng.pinduoduo"


def _labels(sim: PhoneSim) -> list[tuple[str, int, int]]:
    """Every text label of the app's window with the width and height it is drawn into (as render_image does)."""
    out = []
    for window in sim.phone("sim-1").windows():
        if window.package != APP:
            continue
        for node in window.walk():
            l, t, r, b = node.bounds  # noqa: E741 - screen geometry names
            if node_label(node) and node.style != "icon":
                out.append((node_label(node), r - l - 12, b - t))
    return out


def test_every_app_label_fits_its_node_on_the_product_page_and_the_sku_panel() -> None:
    sim = PhoneSim(None, serials=["sim-1"])
    app = sim.phone("sim-1").app
    app.open_url("pinduoduo://com.xunmeng.pinduoduo/goods.html?goods_id=937122477375")
    labels = _labels(sim)
    app.act(("open_sheet", "单独购买"))
    labels += _labels(sim)
    render_image(sim.phone("sim-1").windows())  # renders without error at the chosen sizes
    texts = {text for text, _, _ in labels}
    assert {"返回", "分享", "颜色", "尺码"} <= texts, texts
    for text, width, height in labels:
        size, font = label_font(text, width, height)
        assert font.getlength(text) <= width, (text, width, size)  # drawn whole, nothing cut
        assert size >= MIN_LABEL_SIZE


def test_a_narrow_label_gets_a_smaller_font_not_a_cut() -> None:
    wide_size, _ = label_font("¥72", 400, 80)
    size, font = label_font("¥72", 40, 80)
    assert size < wide_size and font.getlength("¥72") <= 40
