"""Each injected fault, observed through uiautomator2/adbutils as on a real phone."""

from __future__ import annotations

import time

import adbutils
import pytest
import uiautomator2 as u2
from lxml import etree

from cmbuyer.phonesim import PhoneSim, load_scenario
from cmbuyer.phonesim.testing import adbutils_leaks_ignored

from .helpers import PDD, PRODUCT_URL, center, find, submit_node, tap_text, walk_to_confirm

GOODS = "937122477375"
BLACK, SIZE_M = "黑色CHA(纯棉)", "M(建议100-115)"
EMPTY = '<hierarchy rotation="0" />'


def test_empty_dump_comes_back_as_empty_hierarchy_after_u2_retries(u2dev, phonesim: PhoneSim):
    phonesim.phone().inject("empty_dump", times=3)
    xml = u2dev.dump_hierarchy()
    assert xml.endswith(EMPTY)
    assert phonesim.phone().counters["dumps"] == 3  # uiautomator2 asked three times
    assert EMPTY not in u2dev.dump_hierarchy()


def test_single_node_partial_and_malformed_dumps(u2dev, phonesim: PhoneSim):
    walk_to_confirm(u2dev, GOODS, [BLACK, SIZE_M])
    phone = phonesim.phone()
    phone.inject("single_node_dump")
    assert len(list(etree.fromstring(u2dev.dump_hierarchy().encode()).iter("node"))) == 1
    phone.inject("partial_dump")
    xml = u2dev.dump_hierarchy()
    assert find(xml) and not any((n.get("text") or "").startswith("提交订单") for n in find(xml))
    phone.inject("malformed_dump")
    with pytest.raises(etree.XMLSyntaxError):
        etree.fromstring(u2dev.dump_hierarchy().encode())
    assert submit_node(u2dev.dump_hierarchy()) is not None  # once only
    assert [e["fault"] for e in phone.journal.entries("fault")] == [
        "single_node_dump",
        "partial_dump",
        "malformed_dump",
    ]


def test_emoji_intact_and_broken(u2dev, phonesim: PhoneSim):
    u2dev.open_url(PRODUCT_URL.format("600123456789"))
    assert "🔥爆款" in u2dev.dump_hierarchy()  # scenario text with emoji
    phonesim.phone().inject("emoji_dump", mode="broken")
    xml = u2dev.dump_hierarchy()
    with pytest.raises(UnicodeEncodeError):
        xml.encode("utf-8")  # lone surrogates: the serializer split the emoji


def test_price_change_between_gates(u2dev, phonesim: PhoneSim):
    phonesim.phone().inject("price_change", goods_id=GOODS, price="13.5", when={"on_screen": "confirm"})
    u2dev.open_url(PRODUCT_URL.format(GOODS))
    tap_text(u2dev, "发起拼单")
    tap_text(u2dev, BLACK)
    tap_text(u2dev, SIZE_M)
    assert find(u2dev.dump_hierarchy(), text="¥12.88")  # gate 1 sees the old price
    tap_text(u2dev, "确定")
    xml = u2dev.dump_hierarchy()
    assert find(xml, text="最后5件 ¥13.5") and submit_node(xml).get("text") == "提交订单 ¥13.5"


def test_stock_runs_out_before_submit(u2dev, phonesim: PhoneSim):
    phonesim.phone().inject("stock_out", goods_id=GOODS, when={"on_screen": "confirm"})
    xml = walk_to_confirm(u2dev, GOODS, [BLACK, SIZE_M])
    assert find(xml, text="最后0件 ¥12.88")
    u2dev.click(*center(submit_node(xml).getparent()))
    assert find(u2dev.dump_hierarchy(), text="库存不足")
    assert phonesim.phone().orders == []


def test_duplicate_submit_draws_two_real_submit_controls(u2dev, phonesim: PhoneSim):
    phone = phonesim.phone()
    phone.inject("duplicate_submit", when={"on_screen": "confirm"})
    xml = walk_to_confirm(u2dev, GOODS, [BLACK, SIZE_M])
    texts = [n for n in find(xml) if (n.get("text") or "").startswith("提交订单")]
    assert [n.get("text") for n in texts] == ["提交订单 ¥12.88", "提交订单 ¥12.88"]
    parents = [n.getparent() for n in texts]
    assert all(p.get("clickable") == "true" for p in parents)
    assert len({p.get("bounds") for p in parents}) == 2  # two distinct tap targets
    assert [e["fault"] for e in phone.journal.entries("fault")] == ["duplicate_submit"]
    u2dev.shell(["input", "tap", *map(str, center(parents[0]))])  # either one submits
    (tap,) = phone.journal.taps(role="submit")
    assert tap["x"] < 540 and len(phone.orders) == 1


def test_app_version_change_mid_run_and_duplicate_version(u2dev, phonesim: PhoneSim):
    phone = phonesim.phone()
    assert u2dev.app_info(PDD)["versionName"] == "8.17.0"
    phone.inject(
        "version_change",
        version_name="8.18.0",
        version_code=81800,
        when={"after_calls": phone.counters["adb_calls"] + 2},
    )
    assert u2dev.app_info(PDD)["versionName"] == "8.17.0"  # pm path + dumpsys package = 2 calls
    assert u2dev.app_info(PDD) == {"versionName": "8.18.0", "versionCode": 81800}
    phone.inject("duplicate_version", version_name="7.99.0", version_code=79900)
    out = u2dev.shell(["dumpsys", "package", PDD]).output
    assert out.count("versionName=") == 2 and "versionName=7.99.0" in out


def test_wrong_focus_reported_by_app_current(u2dev, phonesim: PhoneSim):
    u2dev.open_url(PRODUCT_URL.format(GOODS))
    phonesim.phone().inject("wrong_focus")
    assert u2dev.app_current()["package"] == "com.android.systemui"
    assert u2dev.app_current()["package"] == PDD


def test_dropped_connection_on_nth_call_raises_from_adbutils(u2dev, phonesim: PhoneSim):
    phone = phonesim.phone()
    dev = u2dev.adb_device
    phone.inject("drop_connection", n=phone.counters["adb_calls"] + 1)
    with adbutils_leaks_ignored(), pytest.raises(adbutils.AdbError):
        dev.shell("getprop ro.serialno")
    assert dev.shell("getprop ro.serialno") == "sim-1"
    phone.inject("drop_connection", on="shell", match="^shell:wm size", offline_for=30)
    with adbutils_leaks_ignored():
        with pytest.raises(adbutils.AdbError):
            dev.shell("wm size")
        assert [(i.serial, i.state) for i in adbutils.adb.list()] == [("sim-1", "offline")]
        with pytest.raises(adbutils.AdbError, match="offline"):
            dev.shell("wm size")
    phone.reconnect()
    assert "1080x2400" in dev.shell("wm size")


@pytest.mark.parametrize("applied", [True, False])
def test_connection_dropped_during_submit_tap(u2dev, phonesim: PhoneSim, applied):
    xml = walk_to_confirm(u2dev, GOODS, [BLACK, SIZE_M])
    phone = phonesim.phone()
    phone.inject("drop_connection", on="submit_tap", applied=applied)
    with adbutils_leaks_ignored(), pytest.raises(adbutils.AdbError):
        u2dev.adb_device.shell("input tap {} {}".format(*center(submit_node(xml).getparent())))
    tap = phone.journal.assert_single_submit_tap()
    assert tap["dropped"] is True and tap["applied"] is applied
    assert len(phone.orders) == (1 if applied else 0)


def test_rpc_crash_makes_uiautomator2_resend_the_click(u2dev, phonesim: PhoneSim):
    """uiautomator2 restarts its server and re-sends the same click: the phone sees two taps."""
    u2dev.open_url(PRODUCT_URL.format(GOODS))
    tap_text(u2dev, "发起拼单")
    tap_text(u2dev, BLACK)
    tap_text(u2dev, SIZE_M)
    phone = phonesim.phone()
    phone.inject("rpc_crash", method="click")
    (inc,) = find(u2dev.dump_hierarchy(), content_desc="增加数量")
    u2dev.click(*center(inc))
    assert len(phone.journal.taps(role="qty_inc")) == 2
    assert phone.state()["quantity"] == 3
    assert phone.journal.entries("uia_start")  # u2 relaunched the on-device server via app_process


def test_popup_at_a_given_step_and_risk_wall(u2dev, phonesim: PhoneSim):
    phone = phonesim.phone()
    phone.inject("popup", popup="update", when={"after_taps": 1})
    u2dev.open_url(PRODUCT_URL.format(GOODS))
    assert not find(u2dev.dump_hierarchy(), text="发现新版本")
    tap_text(u2dev, "发起拼单")
    assert find(u2dev.dump_hierarchy(), text="发现新版本")
    tap_text(u2dev, "以后再说")
    assert phone.state()["screen"] == "sku"
    phone.inject("popup", popup="risk_wall", text="操作过于频繁，请稍后再试")
    assert find(u2dev.dump_hierarchy(), text="操作过于频繁，请稍后再试")
    u2dev.press("back")
    assert phone.state()["screen"] == "popup:risk_wall"  # cannot be dismissed


def test_float_video_and_coupon_popups(u2dev, phonesim: PhoneSim):
    phone = phonesim.phone()
    u2dev.open_url(PRODUCT_URL.format(GOODS))
    phone.inject("popup", popup="float_video")
    phone.inject("popup", popup="coupon")
    xml = u2dev.dump_hierarchy()
    assert find(xml, text="恭喜获得平台红包")
    u2dev.press("back")
    (close,) = find(u2dev.dump_hierarchy(), **{"resource_id": f"{PDD}:id/iv_float_window_close"})
    u2dev.click(*center(close))
    assert not find(u2dev.dump_hierarchy(), **{"resource_id": f"{PDD}:id/iv_float_window_close"})


def test_latency_and_slow_fault(u2dev, phonesim: PhoneSim):
    phone = phonesim.phone()
    phone.set_latency(dump=0.15, tap=0.04)
    t0 = time.monotonic()
    u2dev.dump_hierarchy()
    assert time.monotonic() - t0 >= 0.15
    phone.inject("slow", op="dump", seconds=0.5)
    t0 = time.monotonic()
    u2dev.dump_hierarchy()
    assert time.monotonic() - t0 >= 0.65


def test_cold_start_shows_splash_for_app_start_latency(phonesim_factory):
    scen = load_scenario().data
    scen["latency"] = {"app_start": 0.6}
    sim = phonesim_factory(scen)
    d = u2.connect("sim-1")
    d.open_url(PRODUCT_URL.format(GOODS))
    assert sim.phone().screen == "loading"
    assert not find(d.dump_hierarchy(), text="发起拼单")
    time.sleep(0.7)
    assert find(d.dump_hierarchy(), text="发起拼单")


def test_faults_from_the_scenario_file_per_phone(phonesim_factory):
    scen = load_scenario().data
    scen["phones"] = {"sim-2": {"faults": [{"kind": "empty_dump", "times": None}], "outcome": "BLANK"}}
    sim = phonesim_factory(scen, serials=("sim-1", "sim-2"))
    assert sim.phone("sim-1").faults.describe() == []
    assert sim.phone("sim-2").faults.describe()[0]["kind"] == "empty_dump"
    assert sim.phone("sim-2").cfg.outcome == "BLANK"
