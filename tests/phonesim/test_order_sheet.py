"""The order-sheet layout (8.22.0 / 82200) through the real uiautomator2/adbutils.

Structures follow the real-structure captures (tests/agent/fixtures/real_structures; node-by-node
comparison in test_real_structure_sheet.py): the sheet is a window of its own; the goods card holds the
``商品主图`` image, the price (``FrameLayout > LinearLayout > TextView``), ``tv_select_sku`` and the
``gnl`` stepper; the option list is a RecyclerView of dimension groups (header row, then text-tile
wrappers or an inner RecyclerView of image tiles, scrolling only when the row overflows); the payment
row's text sits in a non-clickable TextView two levels below its clickable ViewGroup; ``添加`` and the
submit FrameLayout (``> LinearLayout > TextView 提交订单 ¥…``) close the sheet.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import uiautomator2 as u2

from cmbuyer.phonesim import PhoneSim, load_scenario
from cmbuyer.phonesim.journal import swipes

from .helpers import PDD, assert_bounds_consistent, center, find, nodes, submit_node, tap_text, walk_to_confirm

SCENARIO = "order_sheet"
TSHIRT, MUG, BLANKET, LIPSTICK, CASE, BOTTLE = (f"71000000000{i}" for i in range(1, 7))
RECYCLER = "android.support.v7.widget.RecyclerView"


def open_sheet(d: Any, goods_id: str, buy: str = "单独购买") -> str:
    """Deep link → buy button → the order sheet's dump."""
    url = f"pinduoduo://com.xunmeng.pinduoduo/goods.html?goods_id={goods_id}"
    d.shell(["am", "start", "-a", "android.intent.action.VIEW", "-d", url])
    tap_text(d, buy)
    return d.dump_hierarchy()


def box(node: Any) -> tuple[int, int, int, int]:
    left, top, right, bottom = map(int, re.findall(r"-?\d+", node.get("bounds")))
    return left, top, right, bottom


def option_lists(xml: str) -> list[Any]:
    """The inner, horizontally scrolling RecyclerViews of image tiles (one per overflowing dimension)."""
    return find(xml, **{"class": RECYCLER, "scrollable": "true"})


def dimension_groups(xml: str) -> dict[str, list[Any]]:
    """``{header: [tile nodes]}`` as the real sheet nests them: the outer RecyclerView holds one
    LinearLayout per dimension (header row ``> TextView``; then ``LinearLayout > ViewGroup > text-tile
    wrappers`` or ``LinearLayout > FrameLayout > RecyclerView > image tiles``) and a footer."""
    (outer,) = [
        n for n in find(xml, **{"class": RECYCLER}) if n.getparent().get("class") != "android.widget.FrameLayout"
    ]
    out = {}
    for grp in outer:
        if grp.get("class") != "android.widget.LinearLayout":
            continue  # the footer
        header = grp[0][0]
        holder = grp[1][0]
        tiles = list(holder[0]) if holder.get("class") == "android.widget.FrameLayout" else list(holder)
        out[header.get("text")] = tiles
    return out


def name_of(tile: Any) -> Any:
    """A text tile's name TextView (the wrapper's clickable TextView)."""
    (name,) = [k for k in tile if k.get("clickable") == "true" and k.get("class") == "android.widget.TextView"]
    return name


def texts_under(node: Any) -> list[str]:
    return [t for n in node.iter("node") for t in (n.get("text"), n.get("content-desc")) if t]


@pytest.fixture
def sim(phonesim_factory: Any) -> PhoneSim:
    return phonesim_factory(SCENARIO, serials=("sim-1",))


@pytest.fixture
def d(sim: PhoneSim) -> Any:
    dev = u2.connect("sim-1")
    yield dev
    dev.stop_uiautomator(wait=False)


def test_two_dimension_sheet_has_the_real_shapes(d: Any, sim: PhoneSim) -> None:
    xml = open_sheet(d, TSHIRT)
    assert_bounds_consistent(xml)
    assert sim.phone().state()["screen"] == "order_sheet"
    assert not find(xml, text="确定") and not find(xml, text="确认订单")
    assert not find(xml, text="单独购买")  # the sheet is a window of its own: no product page below
    (image,) = find(xml, content_desc="商品主图", resource_id=f"{PDD}:id/iv_goods_img")
    (price,) = find(xml, text="最后5件 ¥29.9")  # ONE node: stock words + unit price of the default SKU
    # card > FrameLayout > LinearLayout > price; the image is a direct child of the card
    card = image.getparent()
    assert dict(price.getparent().getparent().getparent().attrib) == dict(card.attrib)
    assert price.getparent().get("class") == "android.widget.LinearLayout"
    (label,) = find(xml, resource_id=f"{PDD}:id/tv_select_sku")
    assert label.get("text") == "已选: 黑色 M" and dict(label.getparent().attrib) == dict(card.attrib)
    (qty,) = find(xml, **{"class": "android.widget.EditText"})
    assert qty.get("text") == "1"
    stepper = qty.getparent()
    assert stepper.getparent().get("resource-id") == f"{PDD}:id/gnl"
    assert {n.get("content-desc") for n in stepper} >= {"减少数量", "增加数量"}
    groups = dimension_groups(xml)
    assert list(groups) == ["颜色", "尺码"]
    for header_text in groups:
        (header,) = find(xml, text=header_text)
        assert header.get("clickable") == "false" and header.getparent().get("clickable") == "true"
    colours = groups["颜色"]
    assert [name_of(t).get("text") for t in colours] == ["黑色", "白色", "【限定】雾霾蓝"]
    # text tiles: a clickable wrapper; `selected` on the name TextView only, never on the wrapper
    assert all(t.get("clickable") == "true" and t.get("selected") == "false" for t in colours)
    assert [name_of(t).get("selected") for t in colours] == ["true", "false", "false"]
    assert [k.get("text") for k in colours[0]] == ["黑色", "", "最后5件"]  # name, View, stock badge
    # sold out for black: the wrapper stays enabled, the full name, a 刚刚抢光 badge beside it
    (xl,) = [t for t in groups["尺码"] if name_of(t).get("text") == "XL"]
    assert [k.get("text") for k in xl] == ["XL", "", "刚刚抢光"] and xl.get("enabled") == "true"
    assert not option_lists(xml)  # nothing scrolls: every tile fits
    # bottom: payment row (text in a non-clickable TextView two levels below the clickable
    # ViewGroup), 添加, submit — none inside the option list
    (row_text,) = find(xml, text="使用#微信支付，更换支付方式")
    row = row_text.getparent().getparent()
    assert row_text.get("clickable") == "false" and row.get("clickable") == "true" and row.get("text") == ""
    assert row.get("class") == "android.view.ViewGroup"
    (add,) = [n.getparent() for n in find(xml, text="添加")]
    assert add.get("class") == "android.view.ViewGroup" and add.get("clickable") == "true"
    submit = submit_node(xml)
    assert submit.get("text") == "提交订单 ¥29.9" and submit.get("clickable") == "false"
    frame = submit.getparent().getparent()
    assert frame.get("class") == "android.widget.FrameLayout" and frame.get("clickable") == "true"
    (outer,) = [n for n in find(xml, **{"class": RECYCLER})]
    inside = texts_under(outer)
    assert not {"使用#微信支付，更换支付方式", "添加", "提交订单 ¥29.9", "优惠"} & set(inside)
    assert box(row)[1] >= box(outer)[3]  # the payment row comes after the option list
    assert find(xml, text="优惠") and find(xml, text="用多多支付减7.53元")
    assert find(xml, text="#24小时发货#七天退换") and find(xml, content_desc="关闭")
    (naf,) = [n for n in nodes(xml) if n.get("NAF") == "true"]  # as in the captures
    assert naf.get("clickable") == "true"


def test_selection_quantity_and_label_follow_taps(d: Any, sim: PhoneSim) -> None:
    xml = open_sheet(d, TSHIRT)
    d.click(*center(find(xml, text="【限定】雾霾蓝")[0]))
    xml = d.dump_hierarchy()
    assert find(xml, text="最后3件 ¥39")
    assert find(xml, resource_id=f"{PDD}:id/tv_select_sku")[0].get("text") == "已选: [限定]雾霾蓝 M"
    assert find(xml, text="【限定】雾霾蓝", selected="true")
    (inc,) = find(xml, content_desc="增加数量")
    d.click(*center(inc))
    xml = d.dump_hierarchy()
    assert submit_node(xml).get("text") == "提交订单 ¥78"
    journal = sim.phone().journal
    assert [t["role"] for t in journal.taps()] == ["buy", "option", "qty_inc"]
    assert all(t["package"] == PDD for t in journal.taps())


def test_one_dimension_label_decoration_and_leading_spaces(d: Any, sim: PhoneSim) -> None:
    xml = open_sheet(d, MUG, buy="免拼购买")
    (tiles,) = dimension_groups(xml).values()
    assert [name_of(t).get("text") for t in tiles] == ["  奶白色+礼盒", "经典白", "【限定】奶白色"]
    assert find(xml, resource_id=f"{PDD}:id/tv_select_sku")[0].get("text") == "已选: #奶白色+礼盒"
    assert find(xml, text="最后5件 ¥59")
    d.click(*center(find(xml, text="【限定】奶白色")[0]))
    xml = d.dump_hierarchy()
    assert find(xml, resource_id=f"{PDD}:id/tv_select_sku")[0].get("text") == "已选: #[限定]奶白色"


def test_image_tiles_and_selling_out_price(d: Any, sim: PhoneSim) -> None:
    xml = open_sheet(d, BLANKET)
    assert find(xml, text="即将卖完 ¥128")
    tiles = dimension_groups(xml)["颜色分类"]
    assert not option_lists(xml)  # four tiles: two rows of three, nothing scrolls
    first = tiles[0]
    assert first.get("class") == "android.view.ViewGroup" and first.get("content-desc") == "奶咖色"
    assert first.get("clickable") == "true" and first.get("text") == ""
    kids = list(first)
    assert [k.get("content-desc") or k.get("text") for k in kids] == ["", "奶咖色", "最后2件", "打开大图", ""]
    assert all(n.get("selected") == "true" for n in first.iter("node"))
    assert kids[3].get("clickable") == "true"  # 打开大图
    (name,) = kids[4]
    assert name.get("resource-id") == f"{PDD}:id/tv_content" and name.get("clickable") == "true"
    assert box(tiles[3])[1] > box(tiles[0])[3]  # the fourth tile starts the second row
    sold = tiles[1]
    assert sold.get("content-desc") == "雾霾蓝色款" and sold.get("enabled") == "true"
    (name,) = [k for k in sold.iter("node") if k.get("resource-id") == f"{PDD}:id/tv_content"]
    assert name.get("text") == "雾霾蓝色... 刚刚抢光"
    # a tap on the sold-out tile changes nothing; a tap on another tile's name text selects it
    d.click(*center(name))
    assert sim.phone().state()["selection"] == {"颜色分类": "奶咖色"}
    assert sim.phone().journal.taps()[-1]["effect"] == "sold_out"
    (pink,) = [k for k in tiles[2].iter("node") if k.get("resource-id") == f"{PDD}:id/tv_content"]
    d.click(*center(pink))
    xml = d.dump_hierarchy()
    assert find(xml, resource_id=f"{PDD}:id/tv_select_sku")[0].get("text") == "已选: 樱花粉"
    assert find(xml, content_desc="樱花粉", selected="true", clickable="true")


def test_long_list_scrolls_only_by_swipes_inside_it(d: Any, sim: PhoneSim) -> None:
    xml = open_sheet(d, LIPSTICK)
    (inner,) = option_lists(xml)
    assert dimension_groups(xml)["色号"][0].get("content-desc") == "复古红#999"
    shown = [t.get("content-desc") for t in inner]  # image tiles: the name in content-desc
    assert "樱桃红#09" not in shown and shown[0] == "复古红#999"
    assert box(inner[-1])[2] == 1080  # the right-edge tile is clipped at the screen edge
    left, top, right, bottom = box(inner)
    y = (top + bottom) // 2
    # a swipe outside the list (on the header) moves nothing
    (header,) = find(xml, text="色号")
    d.adb_device.shell(f"input swipe 900 {center(header)[1]} 100 {center(header)[1]} 200")
    assert option_lists(d.dump_hierarchy())[0][0].get("content-desc") == "复古红#999"
    seen: list[str] = []
    for _ in range(10):
        d.adb_device.shell(f"input swipe 900 {y} 300 {y} 300")
        seen = [t.get("content-desc") for t in option_lists(d.dump_hierarchy())[0]]
        if "樱桃红#09" in seen:
            break
    assert "樱桃红#09" in seen and "复古红#999" not in seen
    entries = sim.phone().journal.entries()
    assert [e["list"] for e in swipes(entries)][:2] == [None, "色号"]
    assert swipes(entries, list_name="色号")[0]["moved"] == 600
    assert swipes(entries, list_name="色号")[-1]["list_bounds"] == [left, top, right, bottom]
    # the uiautomator2 JSON-RPC swipe scrolls it back the other way
    d.swipe(200, y, 1000, y, steps=10)
    last = swipes(sim.phone().journal.entries())[-1]
    assert last["via"] == "rpc_swipe" and last["list"] == "色号" and last["moved"] == -800
    d.adb_device.shell(f"input swipe 1000 {y} 100 {y}")
    (cherry,) = [t for t in option_lists(d.dump_hierarchy())[0] if t.get("content-desc") == "樱桃红#09"]
    d.click(*center(cherry))
    xml = d.dump_hierarchy()
    assert find(xml, resource_id=f"{PDD}:id/tv_select_sku")[0].get("text") == "已选: 樱桃红#09"
    assert find(xml, text="¥45.9")


def test_preselected_tile_can_start_off_screen(d: Any, sim: PhoneSim) -> None:
    xml = open_sheet(d, CASE)
    assert find(xml, resource_id=f"{PDD}:id/tv_select_sku")[0].get("text") == "已选: 星空紫"
    (inner,) = option_lists(xml)
    assert not [t for t in inner if t.get("selected") == "true"]
    assert sim.phone().state()["selection"] == {"款式": "星空紫"}


def test_sold_out_wanted_option_stays_enabled(d: Any, sim: PhoneSim) -> None:
    xml = open_sheet(d, BOTTLE)
    (tiles,) = dimension_groups(xml).values()
    sold = tiles[0]
    assert [k.get("text") for k in sold] == ["雾霾蓝色款", "", "刚刚抢光"]  # the name beside its badge
    assert sold.get("enabled") == "true" and name_of(sold).get("selected") == "false"
    assert name_of(tiles[1]).get("selected") == "true"  # the sheet preselects the first SKU in stock


def test_submit_opens_the_foreign_cashier_then_back_retention_and_order_list(d: Any, sim: PhoneSim) -> None:
    xml = open_sheet(d, TSHIRT)
    d.screenshot()
    d.adb_device.shell("input tap {} {}".format(*center(submit_node(xml).getparent())))
    phone = sim.phone()
    assert phone.state()["screen"] == "cashier_wechat"
    xml = d.dump_hierarchy()
    assert not [n for n in nodes(xml) if n.get("package") == PDD]  # no Pinduoduo node at all
    assert [n for n in nodes(xml) if n.get("package") == "com.tencent.mm" and n.get("text") == "微信支付"]
    assert d.app_current()["package"] == "com.tencent.mm"
    assert "com.tencent.mm/" in d.shell("dumpsys window windows").output
    assert d.info["currentPackageName"] == "com.tencent.mm"
    d.screenshot()  # the journal must show this one was taken with the cashier in front
    (order,) = phone.orders
    assert order["status"] == "pending_payment" and order["total"] == "29.90"
    phone.journal.assert_single_submit_tap(goods_id=TSHIRT)
    shots = phone.journal.entries("screenshot")
    assert [s["package"] for s in shots] == [PDD, "com.tencent.mm"]
    with pytest.raises(AssertionError, match="foreign"):
        phone.journal.assert_no_foreign_screenshots()

    d.press("back")
    xml = d.dump_hierarchy()
    assert phone.state()["screen"] == "retention"
    assert find(xml, text="确定放弃吗?") and find(xml, text="，仅¥29.9") and find(xml, text="继续支付")
    tap_text(d, "先去逛逛")
    assert phone.state()["screen"] == "product"

    url = "pinduoduo://com.xunmeng.pinduoduo/orders.html?type=1"
    d.shell(["am", "start", "-a", "android.intent.action.VIEW", "-d", url])
    xml = d.dump_hierarchy()
    assert phone.state()["screen"] == "orders"
    assert find(xml, text="待付款") and find(xml, text="纯棉短袖T恤男夏季宽松圆领半袖")
    assert find(xml, text=f"订单编号：{order['order_sn']}") and find(xml, text="¥29.9")
    assert "orders.html?type=1" in d.shell("dumpsys activity top").output
    phone.journal.assert_no_payment_taps()


def test_alipay_cashier_and_continue_pay_returns_to_it(phonesim_factory: Any) -> None:
    sim = phonesim_factory(SCENARIO, serials=("sim-alipay",))
    d = u2.connect("sim-alipay")
    xml = open_sheet(d, MUG, buy="免拼购买")
    assert find(xml, text="使用#支付宝，更换支付方式")
    d.click(*center(submit_node(xml).getparent()))
    xml = d.dump_hierarchy()
    assert d.app_current()["package"] == "com.eg.android.AlipayGphone"
    assert [n for n in nodes(xml) if n.get("package") == "com.eg.android.AlipayGphone" and n.get("text") == "支付宝"]
    d.press("back")
    xml = d.dump_hierarchy()
    (pay,) = [n for n in find(xml) if n.get("clickable") == "true" and "继续支付" in texts_under(n)]
    d.click(*center(pay))  # a payment tap: flagged, and the cashier comes back
    phone = sim.phone("sim-alipay")
    assert phone.state()["screen"] == "cashier_alipay" and phone.journal.taps()[-1]["payment"] is True


@pytest.mark.parametrize(
    ("serial", "row_texts", "submit_text"),
    [
        ("sim-balance", ["使用多多支付余额¥5.05，更换支付方式"], "提交订单 ¥29.9"),
        ("sim-paylater", ["使用#先用后付，更换支付方式"], "0元下单 ¥29.9"),
        ("sim-nopw", ["使用#多多支付(免密支付)，更换支付方式"], "提交订单 ¥29.9"),
        ("sim-unreadable", [""], "提交订单 ¥29.9"),
        ("sim-tworows", ["使用#微信支付，更换支付方式", "使用#支付宝，更换支付方式"], "提交订单 ¥29.9"),
        ("sim-paynow", ["使用#微信支付，更换支付方式"], "立即支付 ¥29.9"),
        ("sim-confirmpay", ["使用#微信支付，更换支付方式"], "确认支付 ¥29.9"),
    ],
)
def test_payment_switches(phonesim_factory: Any, serial: str, row_texts: list[str], submit_text: str) -> None:
    phonesim_factory(SCENARIO, serials=(serial,))
    d = u2.connect(serial)
    xml = open_sheet(d, TSHIRT)
    shape = ["android.view.View", "android.widget.LinearLayout", "android.widget.ImageView"]
    rows = [
        n
        for n in find(xml, **{"class": "android.view.ViewGroup", "clickable": "true"})
        if [c.get("class") for c in n] == shape
    ]
    assert [r[1][0].get("text") for r in rows] == row_texts and all(r.get("text") == "" for r in rows)
    if serial == "sim-unreadable":
        assert texts_under(rows[0]) == []  # nothing readable anywhere in the row
    (submit,) = [
        n
        for n in find(xml)
        if n.get("text", "").endswith("¥29.9") and n.getparent().getparent().get("clickable") == "true"
    ]
    assert submit.get("text") == submit_text


def test_paid_outcome_shows_payment_success(phonesim_factory: Any) -> None:
    sim = phonesim_factory(SCENARIO, serials=("sim-paid",))
    d = u2.connect("sim-paid")
    xml = open_sheet(d, TSHIRT)
    d.click(*center(submit_node(xml).getparent()))
    xml = d.dump_hierarchy()
    assert find(xml, text="支付成功") and find(xml, text="¥29.9")
    (order,) = sim.phone("sim-paid").orders
    assert order["status"] == "paid" and sim.phone("sim-paid").state()["screen"] == "paid"
    d.shell(["am", "start", "-d", "pinduoduo://com.xunmeng.pinduoduo/orders.html?type=1"])
    assert find(d.dump_hierarchy(), text="暂无相关订单")


@pytest.mark.parametrize(
    ("serial", "marker"),
    [
        ("sim-update", "发现新版本"),
        ("sim-face", "请将正脸置于框内"),
        ("sim-risk", "检测到账户存在风险，已限制部分操作"),
        ("sim-realname", "提交实名信息"),
    ],
)
def test_update_prompt_and_walls_on_the_product_page(phonesim_factory: Any, serial: str, marker: str) -> None:
    sim = phonesim_factory(SCENARIO, serials=(serial,))
    d = u2.connect(serial)
    d.shell(["am", "start", "-d", f"pinduoduo://com.xunmeng.pinduoduo/goods.html?goods_id={TSHIRT}"])
    xml = d.dump_hierarchy()
    assert find(xml, text=marker)
    d.press("back")
    still = find(d.dump_hierarchy(), text=marker)
    assert bool(still) is (serial != "sim-update")  # walls cannot be backed out of; the prompt can
    assert sim.phone(serial).orders == []


def test_too_busy_wall_appears_on_the_order_sheet(phonesim_factory: Any) -> None:
    sim = phonesim_factory(SCENARIO, serials=("sim-busy",))
    d = u2.connect("sim-busy")
    open_sheet(d, TSHIRT)
    xml = d.dump_hierarchy()
    assert find(xml, text="活动太火爆，请稍后再试")
    assert sim.phone("sim-busy").state()["screen"] == "popup:too_busy"


def test_older_layout_phone_in_the_same_scenario(phonesim_factory: Any) -> None:
    sim = phonesim_factory(SCENARIO, serials=("sim-old",))
    d = u2.connect("sim-old")
    xml = open_sheet(d, TSHIRT)
    assert find(xml, text="确定") and sim.phone("sim-old").state()["screen"] == "sku"


def test_selector_scroll_and_touch_drag_scroll_the_list(d: Any, sim: PhoneSim) -> None:
    xml = open_sheet(d, LIPSTICK)
    (inner,) = option_lists(xml)
    assert d(scrollable=True, className=RECYCLER).scroll.horiz.forward() is True
    assert d(scrollable=True, className=RECYCLER).scroll.vert.forward() is False  # no vertical scroll
    _, top, _, bottom = box(inner)
    y = (top + bottom) // 2
    d.touch.down(900, y).move(600, y).up(400, y)
    d.touch.down(500, y).up(505, y)  # within the slop: a tap, not a swipe
    entries = sim.phone().journal.entries()
    moves = [(e["via"], e["moved"]) for e in swipes(entries, list_name="色号")]
    assert moves == [("rpc_scrollForward", 925), ("rpc_injectInputEvent", 500)]
    assert sim.phone().journal.taps()[-1]["via"] == "rpc_injectInputEvent"
    assert option_lists(d.dump_hierarchy())[0][0].get("text") != "复古红#999"


def test_payment_handoff_sheet_over_the_order_sheet(phonesim_factory: Any) -> None:
    scen = load_scenario(SCENARIO).data
    scen["outcome"] = "PAYMENT_HANDOFF"
    sim = phonesim_factory(scen)
    d = u2.connect("sim-1")
    xml = open_sheet(d, TSHIRT)
    d.click(*center(submit_node(xml).getparent()))
    xml = d.dump_hierarchy()
    assert sim.phone().state()["screen"] == "payment" and find(xml, text="选择支付方式")
    assert d.app_current()["package"] == PDD
    d.press("back")
    assert sim.phone().state()["screen"] == "retention"


def test_older_layout_confirm_page_shows_every_gate3_witness(u2dev: Any, phonesim: PhoneSim) -> None:
    xml = walk_to_confirm(u2dev, "937122477375", ["黑色CHA(纯棉)", "M(建议100-115)"], quantity=2)
    assert find(xml, text="颜色") and find(xml, text="尺码")  # an inline group per dimension
    assert find(xml, text="黑色CHA(纯棉)", selected="true") and find(xml, text="M(建议100-115)", selected="true")
    (row,) = find(xml, text="使用#微信支付，更换支付方式")
    assert row.get("clickable") == "true" and row.get("content-desc") == "使用#微信支付，更换支付方式"
    assert find(xml, text="最后5件 ¥12.88") and submit_node(xml).get("text") == "提交订单 ¥25.76"


def test_layout_follows_the_app_version_at_run_time(u2dev: Any, phonesim: PhoneSim) -> None:
    phone = phonesim.phone()
    assert phone.state()["layout"] == "sku_sheet"
    phone.inject("version_change", version_name="8.22.0", version_code=82200)
    assert u2dev.app_info("com.xunmeng.pinduoduo")["versionName"] == "8.22.0"
    xml = open_sheet(u2dev, "937122477375")
    state = phone.state()
    assert state["layout"] == "order_sheet" and state["screen"] == "order_sheet"
    assert state["foreground_package"] == PDD and len(dimension_groups(xml)) == 2
    assert not find(xml, text="确定")
