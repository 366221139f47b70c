"""Stored screenshots show the app only: every screenshot the purchase flow stores
(gates, results, confirmations) comes from ``PhoneAdapter.app_screenshot_png``, which blacks out
everything outside the app's own windows — the status bar (a notification naming a person and a mobile
number), a navigation bar where a phone has one — and any other window drawn over the app, while what
the app's window shows (the order sheet's address row, which the device API allows on gate screenshots) stays
as it is.

On the real MIUI captures (tests/agent/fixtures/real_structures) the app's window spans the whole
screen, the 95 px status bar and the launcher's gesture strip (``com.miui.home``, [0,2328][1080,2400])
are drawn over it, and there is no navigation bar. Both are blacked out: the status bar because it
shows notifications, the strip because it is another package's window — what it shows is not the
app's, so the bottom 26 px of the submit button under it are black too.

Pixel tests on the phone simulator's screenshots (the captures' windows) through the real
uiautomator2/adbutils, on the real captures' dumps, and on hand-built dumps for a window drawn over the
app (the simulator has no heads-up notifications) and a phone with a navigation bar."""

from __future__ import annotations

import ast
import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from cmbuyer.agent.phone.adapter import PhoneAdapter
from cmbuyer.agent.screens import safety
from cmbuyer.agent.screens.dump import parse_dump
from cmbuyer.agent.screens.masking import foreign_windows, outside_app, outside_app_of_all
from cmbuyer.phonesim.server import PhoneSim
from cmbuyer.phonesim.testing import running_sim
from tests.agent.authoring.test_capture import DEMO, _black, _to_submit_screen

AGENT = Path(__file__).resolve().parents[3] / "agent"
FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(scope="module")
def sim() -> Iterator[PhoneSim]:
    with running_sim(DEMO, serials=("sim-1", "sim-2")) as running:
        yield running


def _has_colour(img: Image.Image, box: list[int]) -> bool:
    return not _black(img, box)


@pytest.mark.parametrize("serial", ["sim-1", "sim-2"])
def test_a_stored_screenshot_is_black_outside_the_app_window(sim: PhoneSim, serial: str) -> None:
    phone: PhoneAdapter = _to_submit_screen(serial)
    full = Image.open(io.BytesIO(phone.screenshot_png())).convert("RGB")
    dump = parse_dump(phone.dump_raw())
    assert not any("navigation_bar" in n.resource_id for n in dump.nodes)  # MIUI, gesture navigation
    status = next(n for n in dump.nodes if n.resource_id.endswith("status_bar"))
    strip = next(n for n in dump.nodes if n.parent is None and n.package == "com.miui.home")
    app = next(n for n in dump.nodes if n.parent is None and n.package == "com.xunmeng.pinduoduo")
    boxes = {
        name: [n.bounds.left, n.bounds.top, n.bounds.right, n.bounds.bottom]
        for name, n in (("status", status), ("strip", strip), ("app", app))
    }
    assert boxes["status"] == [0, 0, 1080, 95] and boxes["strip"] == [0, 2328, 1080, 2400]
    assert boxes["app"] == [0, 0, 1080, 2400]
    assert _has_colour(full, boxes["status"]) and _has_colour(full, boxes["strip"])  # the phone shows them
    png = phone.app_screenshot_png()
    assert png is not None
    for taken in (png, phone.gate_screenshot()()):  # results/confirmations, and the gates' lazy encoder
        stored = Image.open(io.BytesIO(taken)).convert("RGB")
        assert stored.size == full.size
        assert _black(stored, boxes["status"]) and _black(stored, boxes["strip"])
        # the app's window is exactly as the phone showed it, the address row included (docs/api.md),
        # except where other windows are drawn over it (the window spans the screen)
        shown = full.copy()
        for bar in (boxes["status"], boxes["strip"]):
            shown.paste((0, 0, 0), (bar[0], bar[1], bar[2], bar[3]))
        assert stored.crop(tuple(boxes["app"])).tobytes() == shown.crop(tuple(boxes["app"])).tobytes()
        row = next(n for n in dump.app_nodes() if "****" in n.text)
        assert _has_colour(stored, [row.bounds.left, row.bounds.top, row.bounds.right, row.bounds.bottom])


def _png(size: tuple[int, int], colour: tuple[int, int, int] = (200, 120, 40)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="PNG")
    return buf.getvalue()


def test_a_window_drawn_over_the_app_is_black_too() -> None:
    sys_ui, app, chat = (
        'package="com.android.systemui"',
        'package="com.xunmeng.pinduoduo"',
        'package="com.example.chathead"',
    )
    xml = (
        '<hierarchy rotation="0">'
        f'<node {sys_ui} resource-id="com.android.systemui:id/status_bar" bounds="[0,0][1080,96]"/>'
        f'<node {app} bounds="[0,96][1080,2280]"><node {app} text="提交订单" bounds="[600,2166][996,2238]"/></node>'
        f'<node {sys_ui} text="王小明 13812345678" bounds="[24,120][1056,360]"/>'  # a heads-up notification
        f'<node {chat} bounds="[900,1200][1060,1360]"/>'  # a floating chat head
        f'<node {sys_ui} resource-id="com.android.systemui:id/navigation_bar_frame" bounds="[0,2280][1080,2400]"/>'
        "</hierarchy>"
    )
    # a half-size screenshot: rectangles scale with the width
    out = outside_app(_png((540, 1200)), parse_dump(xml), "com.xunmeng.pinduoduo")
    assert out is not None
    img = Image.open(io.BytesIO(out)).convert("RGB")
    for box in ([0, 0, 540, 48], [12, 60, 528, 180], [450, 600, 530, 680], [0, 1140, 540, 1200]):
        assert _black(img, box), box
    assert img.getpixel((100, 400)) == (200, 120, 40) and img.getpixel((300, 1100)) == (200, 120, 40)
    # no window of the app in the dump: nothing of the app to keep, all black
    gone = outside_app(_png((540, 1200)), parse_dump(xml.replace(app, chat)), "com.xunmeng.pinduoduo")
    assert _black(Image.open(io.BytesIO(gone)).convert("RGB"), [0, 0, 540, 1200])


def test_a_shot_between_two_dumps_is_masked_by_both() -> None:
    """A screenshot taken between the two dumps of a stable read is masked with both — a
    window drawn over the app in either of them is black, and only what lies inside an app window in
    both is kept (a notification that came or went between the dumps may have been on the shot)."""
    sys_ui, app = 'package="com.android.systemui"', 'package="com.xunmeng.pinduoduo"'
    base = (
        '<hierarchy rotation="0">'
        f'<node {sys_ui} resource-id="com.android.systemui:id/status_bar" bounds="[0,0][1080,96]"/>'
        f'<node {app} bounds="[0,{{top}}][1080,2280]"><node {app} text="x" bounds="[600,2166][996,2238]"/></node>'
        "{extra}</hierarchy>"
    )
    heads_up = f'<node {sys_ui} text="王小明 13812345678" bounds="[24,120][1056,360]"/>'
    plain = parse_dump(base.format(top=96, extra=""))
    noted = parse_dump(base.format(top=96, extra=heads_up))
    for dumps in ((plain, noted), (noted, plain)):
        img = Image.open(io.BytesIO(outside_app_of_all(_png((540, 1200)), dumps, "com.xunmeng.pinduoduo")))
        assert _black(img.convert("RGB"), [12, 60, 528, 180])
        assert img.convert("RGB").getpixel((100, 400)) == (200, 120, 40)
    # the app's window shrank between the dumps: the part it left is black
    lower = parse_dump(base.format(top=800, extra=""))
    img = Image.open(io.BytesIO(outside_app_of_all(_png((540, 1200)), (plain, lower), "com.xunmeng.pinduoduo")))
    assert _black(img.convert("RGB"), [0, 48, 540, 400])
    assert img.convert("RGB").getpixel((100, 500)) == (200, 120, 40)
    with pytest.raises(ValueError):
        outside_app_of_all(_png((540, 1200)), (), "com.xunmeng.pinduoduo")


@pytest.mark.parametrize("name", ["order_sheet_image_tiles.xml", "order_sheet_text_tile.xml"])
def test_on_the_real_captures_the_status_bar_and_the_gesture_strip_are_black(name: str) -> None:
    """The real MIUI windows: the 95 px status bar and the launcher's gesture strip are black (another
    package's windows over the app's full-screen window), the app everywhere else as shown — the submit
    button's label and all of it above the strip included."""
    dump = parse_dump((FIXTURES / "real_structures" / name).read_text("utf-8"))
    assert sorted(foreign_windows(dump, "com.xunmeng.pinduoduo")) == [(0, 0, 1080, 95), (0, 2328, 1080, 2400)]
    out = outside_app(_png((1080, 2400)), dump, "com.xunmeng.pinduoduo")
    img = Image.open(io.BytesIO(out)).convert("RGB")
    assert _black(img, [0, 0, 1080, 95]) and _black(img, [0, 2328, 1080, 2400])
    assert img.getpixel((540, 95)) == (200, 120, 40) and img.getpixel((540, 2327)) == (200, 120, 40)
    (submit,) = safety.submit_controls(dump)
    assert (submit.bounds.top, submit.bounds.bottom) == (2213, 2354)  # its last 26 px lie under the strip
    above_strip = (submit.bounds.left, submit.bounds.top, submit.bounds.right, 2328)
    assert img.crop(above_strip).getextrema() == ((200, 200), (120, 120), (40, 40))  # untouched
    assert _black(img, [submit.bounds.left, 2328, submit.bounds.right, submit.bounds.bottom])
    # a 95 px status bar that is not blacked out would be found: one row more or less is not enough
    assert img.getpixel((540, 94)) == (0, 0, 0)


def test_the_purchase_flow_stores_only_app_screenshots() -> None:
    """Every call of ``screenshot``/``screenshot_png`` (the unmasked screen) is in the capture tools,
    which scrub it themselves (agent/authoring/capture.py), and in the adapter's two masked ones: the flow's
    modules call ``app_screenshot_png`` (results, confirmations, failures) or ``gate_screenshot``."""
    callers = set()
    for path in AGENT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            if call and node.func.attr in ("screenshot_png", "screenshot"):  # type: ignore[attr-defined]
                callers.add(path.relative_to(AGENT).as_posix())
    assert callers == {"cli.py", "authoring/dryrun.py", "phone/adapter.py"}, callers
