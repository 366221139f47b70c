"""Scripted purchase walks by plain uiautomator2 calls; the journal shows exactly what happened."""

from __future__ import annotations

import re

import adbutils
import pytest
import uiautomator2 as u2

from cmbuyer.phonesim import PhoneSim, load_scenario

from .helpers import PDD, assert_bounds_consistent, center, find, submit_node, tap_text, walk_to_confirm

GOODS = "937122477375"
BLACK, SIZE_M = "黑色CHA(纯棉)", "M(建议100-115)"


def test_whole_flow_creates_exactly_one_order(u2dev, phonesim: PhoneSim):
    xml = walk_to_confirm(u2dev, GOODS, [BLACK, SIZE_M], quantity=2)
    assert_bounds_consistent(xml)
    # confirm page as on the real app: no title text, price+stock node, 已选 label with ASCII brackets
    assert not find(xml, text="确认订单")
    assert find(xml, content_desc="商品主图")
    assert find(xml, text="最后5件 ¥12.88")
    (label,) = find(xml, **{"resource_id": f"{PDD}:id/tv_select_sku"})
    assert label.get("text") == f"已选: {BLACK} {SIZE_M}"
    (qty,) = find(xml, **{"class": "android.widget.EditText"})
    assert qty.get("text") == "2"
    assert find(xml, content_desc="使用#微信支付，更换支付方式")
    assert [n.get("text") for n in find(xml) if "用多多支付减" in (n.get("text") or "")] == ["用多多支付减0.53元"]
    submit_text = submit_node(xml)
    assert submit_text.get("text") == "提交订单 ¥25.76"
    assert submit_text.get("clickable") == "false"
    parent = submit_text.getparent()
    assert parent.get("class") == "android.widget.FrameLayout" and parent.get("clickable") == "true"

    # the submit tap: a single `input tap` through adbutils (no RPC retry)
    u2dev.adb_device.shell("input tap {} {}".format(*center(parent)))
    after = u2dev.dump_hierarchy()
    assert find(after, text="待付款")
    assert_bounds_consistent(after)

    phone = phonesim.phone()
    journal = phone.journal
    tap = journal.assert_single_submit_tap(goods_id=GOODS)
    assert tap["via"] == "input_tap" and tap["effect"] == "submit:ORDER_CREATED"
    journal.assert_no_payment_taps()
    assert journal.order_counts() == {GOODS: 1}
    (order,) = phone.orders
    assert order["total"] == "25.76" and order["quantity"] == 2 and order["options"] == {"颜色": BLACK, "尺码": SIZE_M}
    assert phone.counters["taps"] == 6 and phone.counters["dumps"] >= 6


def test_sheet_price_follows_selection_and_tiles_use_full_width_brackets(u2dev, phonesim: PhoneSim):
    u2dev.open_url(f"pinduoduo://com.xunmeng.pinduoduo/goods.html?goods_id={GOODS}")
    tap_text(u2dev, "单独购买")
    xml = u2dev.dump_hierarchy()
    assert find(xml, text="¥12.88-15.9")  # no complete selection yet: a range, not a unit price
    assert find(xml, text="颜色") and find(xml, text="尺码")
    (name,) = find(xml, text="【流砂限定】灰色")
    tile = name.getparent()  # texts sit in non-clickable children of clickable tiles
    assert name.get("clickable") == "false" and tile.get("clickable") == "true" and tile.get("selected") == "false"
    u2dev.click(*center(tile))
    tap_text(u2dev, SIZE_M)
    xml = u2dev.dump_hierarchy()
    assert find(xml, text="¥15.9")
    assert find(xml, text="【流砂限定】灰色", selected="true")
    # XL has no stock for this colour: disabled tile
    assert find(xml, text="XL(建议130-145)", enabled="false")
    tap_text(u2dev, "确定")
    xml = u2dev.dump_hierarchy()
    assert find(xml, text=f"已选: [流砂限定]灰色 {SIZE_M}")  # ASCII brackets in the label
    assert find(xml, text="【流砂限定】灰色", selected="true")  # the tile keeps 【】
    assert find(xml, text="最后2件 ¥15.9") and submit_node(xml).get("text") == "提交订单 ¥15.9"


def test_quantity_stepper_is_capped_by_stock(u2dev, phonesim: PhoneSim):
    xml = walk_to_confirm(u2dev, "600123456789", ["【流砂限定】蓝"], buy="免拼购买")
    assert find(xml, text="最后3件 ¥269") and submit_node(xml).get("text") == "提交订单 ¥269"
    for _ in range(4):
        (inc,) = find(u2dev.dump_hierarchy(), content_desc="增加数量")
        u2dev.click(*center(inc))
    xml = u2dev.dump_hierarchy()
    assert find(xml, **{"class": "android.widget.EditText"})[0].get("text") == "3"
    assert submit_node(xml).get("text") == "提交订单 ¥807"
    for _ in range(5):
        (dec,) = find(u2dev.dump_hierarchy(), content_desc="减少数量")
        u2dev.click(*center(dec))
    assert find(u2dev.dump_hierarchy(), **{"class": "android.widget.EditText"})[0].get("text") == "1"
    assert [t["effect"] for t in phonesim.phone().journal.taps(role="qty_inc")] == [
        "qty",
        "qty",
        "qty_capped",
        "qty_capped",
    ]


def test_back_from_confirm_goes_to_product_without_order(u2dev, phonesim: PhoneSim):
    walk_to_confirm(u2dev, GOODS, [BLACK, SIZE_M])
    u2dev.press("back")
    assert phonesim.phone().state()["screen"] == "product"
    assert phonesim.phone().orders == []


def test_back_on_unpaid_order_shows_retention_dialog(u2dev, phonesim: PhoneSim):
    xml = walk_to_confirm(u2dev, "600123456789", ["经典白"], buy="免拼购买")
    u2dev.click(*center(submit_node(xml).getparent()))
    u2dev.press("back")
    xml = u2dev.dump_hierarchy()
    assert_bounds_consistent(xml)
    assert find(xml, text="确定放弃吗?") and find(xml, text="，仅¥59") and find(xml, text="先去逛逛")
    *_, pay = find(xml, text="继续支付")  # the order page has one too, under the dialog
    # a naive "dismiss popup" tap on the big red button is a payment tap: the journal flags it
    u2dev.click(*center(pay))
    phone = phonesim.phone()
    assert phone.state()["screen"] == "payment"
    (flagged,) = phone.journal.entries("tap")[-1:]
    assert flagged["payment"] is True and flagged["role"] == "payment"
    with pytest.raises(AssertionError, match="payment"):
        phone.journal.assert_no_payment_taps()
    u2dev.press("back")
    tap_text(u2dev, "先去逛逛")
    assert phone.state()["screen"] == "product"
    assert phone.orders[0]["status"] == "pending_payment"


@pytest.mark.parametrize(
    ("outcome", "screen", "marker", "orders"),
    [
        ("PAYMENT_HANDOFF", "payment", "立即支付", 1),
        ("SECURITY_CHALLENGE", "challenge", "安全验证", 0),
        ("BLANK", "blank", None, 1),
    ],
)
def test_outcomes_after_submit(phonesim_factory, outcome, screen, marker, orders):
    scen = load_scenario().data
    scen["outcome"] = outcome
    sim = phonesim_factory(scen)
    d = u2.connect("sim-1")
    xml = walk_to_confirm(d, GOODS, [BLACK, SIZE_M])
    d.adb_device.shell("input tap {} {}".format(*center(submit_node(xml).getparent())))
    xml = d.dump_hierarchy()
    assert sim.phone().state()["screen"] == screen
    if marker:
        assert find(xml, text=marker)
    else:
        texts = [n.get("text") for n in find(xml) if n.get("text")]
        assert texts == [] and find(xml)  # app nodes exist, none readable
    if outcome == "PAYMENT_HANDOFF":
        assert find(xml, text="微信支付")
    assert len(sim.phone().orders) == orders
    sim.phone().journal.assert_single_submit_tap()


def test_order_success_popup_variant(phonesim_factory):
    scen = load_scenario().data
    scen["order_success_popup"] = True
    phonesim_factory(scen)
    d = u2.connect("sim-1")
    xml = walk_to_confirm(d, GOODS, [BLACK, SIZE_M])
    d.click(*center(submit_node(xml).getparent()))
    xml = d.dump_hierarchy()
    assert any(re.search("下单成功$", n.get("text") or "") for n in find(xml))
    tap_text(d, "我知道了")
    assert find(d.dump_hierarchy(), text="待付款")


def test_two_phones_have_independent_state(phonesim_factory):
    sim = phonesim_factory(serials=("sim-1", "sim-2"))
    d1, d2 = u2.connect("sim-1"), u2.connect("sim-2")
    walk_to_confirm(d1, GOODS, [BLACK, SIZE_M])
    d2.open_url("pinduoduo://com.xunmeng.pinduoduo/goods.html?goods_id=600123456789")
    assert sim.phone("sim-1").state()["screen"] == "confirm"
    assert sim.phone("sim-2").state()["screen"] == "product"
    assert sim.phone("sim-2").state()["goods_id"] == "600123456789"
    assert f"goods_id={GOODS}" in d1.shell("dumpsys activity top").output
    assert "goods_id=600123456789" in d2.shell("dumpsys activity top").output
    sim.phone("sim-1").inject("price_change", goods_id=GOODS, price="99")
    assert str(sim.phone("sim-2").cfg.catalogue[GOODS].prices()[0]) == "12.88"
    assert str(sim.phone("sim-1").cfg.catalogue[GOODS].prices()[0]) == "99.00"
    assert sim.phone("sim-1").journal.taps() and not sim.phone("sim-2").journal.taps()
    assert {d.serial for d in adbutils.adb.device_list()} == {"sim-1", "sim-2"}
