"""The real uiautomator2/adbutils code paths against the simulator."""

from __future__ import annotations

import io

import adbutils
import pytest
from lxml import etree
from PIL import Image

from cmbuyer.phonesim import PhoneSim
from cmbuyer.phonesim.testing import adbutils_leaks_ignored

from .helpers import PDD, PRODUCT_URL, assert_bounds_consistent, center, find

GOODS = "937122477375"


def test_connect_info_and_window_size(u2dev):
    info = u2dev.info
    assert info["displayWidth"] == 1080 and info["displayHeight"] == 2400
    assert info["sdkInt"] == 33 and info["screenOn"] is True
    assert u2dev.window_size() == (1080, 2400)
    assert u2dev.device_info["model"] == "M2012K11AC"


def test_app_info_reads_version(u2dev):
    assert u2dev.app_info(PDD) == {"versionName": "8.17.0", "versionCode": 81700}


def test_deep_link_opens_product_and_app_current(u2dev, phonesim: PhoneSim):
    assert u2dev.app_current()["package"] == "com.miui.home"
    u2dev.open_url(PRODUCT_URL.format(GOODS))
    cur = u2dev.app_current()
    assert cur["package"] == PDD
    assert cur["activity"] == "com.xunmeng.pinduoduo.activity.NewPageActivity"
    top = u2dev.shell("dumpsys activity top").output
    assert f"goods_id={GOODS}" in top
    assert phonesim.phone().journal.entries("deep_link")[0]["goods_id"] == GOODS


def test_dump_hierarchy_structure(u2dev):
    home = {n.get("package") for n in etree.fromstring(u2dev.dump_hierarchy().encode()).iter("node")}
    assert {"com.android.systemui", "com.miui.home"} <= home and PDD not in home
    u2dev.open_url(PRODUCT_URL.format(GOODS))
    xml = u2dev.dump_hierarchy()
    assert xml.startswith("<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>\r\n<hierarchy rotation=\"0\">")
    root = etree.fromstring(xml.encode())
    # the real captures' windows: the launcher behind the full-screen app shows only its gesture strip,
    # the 95 px status bar, the app's window over the whole screen; no navigation bar
    windows = [(w.get("package"), w.get("bounds"), len(w)) for w in root]
    assert windows == [
        ("com.miui.home", "[0,2328][1080,2400]", 0),
        ("com.android.systemui", "[0,0][1080,95]", 2),
        (PDD, "[0,0][1080,2400]", 1),
    ]
    first = next(root.iter("node"))
    assert list(first.attrib) == [
        "index",
        "text",
        "resource-id",
        "class",
        "package",
        "content-desc",
        "checkable",
        "checked",
        "clickable",
        "enabled",
        "focusable",
        "focused",
        "scrollable",
        "long-clickable",
        "password",
        "selected",
        "visible-to-user",
        "bounds",
        "drawing-order",
        "hint",
        "display-id",
    ]
    assert find(xml, text="发起拼单") and find(xml, text="单独购买")


def test_bounds_are_consistent_on_product_and_sheet(u2dev):
    u2dev.open_url(PRODUCT_URL.format(GOODS))
    xml = u2dev.dump_hierarchy()
    assert_bounds_consistent(xml)
    (buy,) = find(xml, text="发起拼单")
    u2dev.click(*center(buy))
    assert_bounds_consistent(u2dev.dump_hierarchy())


def test_screenshot_jpeg_and_screencap_png(u2dev, phonesim: PhoneSim):
    u2dev.open_url(PRODUCT_URL.format(GOODS))
    img = u2dev.screenshot()
    assert img.size == (1080, 2400)
    png = u2dev.adb_device.shell(["screencap", "-p"], encoding=None)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert Image.open(io.BytesIO(png)).size == (1080, 2400)
    assert u2dev.adb_device.screenshot().size == (1080, 2400)
    assert phonesim.phone().counters["screenshots"] == 3


def test_click_and_input_tap_are_journaled_with_the_node(u2dev, phonesim: PhoneSim):
    u2dev.open_url(PRODUCT_URL.format(GOODS))
    (buy,) = find(u2dev.dump_hierarchy(), text="单独购买")
    u2dev.click(*center(buy))
    assert phonesim.phone().state()["screen"] == "sku"
    (close,) = find(u2dev.dump_hierarchy(), content_desc="关闭")
    u2dev.shell("input tap {} {}".format(*center(close)))
    assert phonesim.phone().state()["screen"] == "product"
    taps = phonesim.phone().journal.taps()
    assert [t["via"] for t in taps] == ["rpc_click", "input_tap"]
    assert taps[0]["role"] == "buy" and taps[0]["node"]["text"] == "单独购买"
    assert taps[1]["target"]["content-desc"] == "关闭"


def test_press_back_and_keyevent(u2dev, phonesim: PhoneSim):
    u2dev.open_url(PRODUCT_URL.format(GOODS))
    u2dev.press("back")
    assert phonesim.phone().state()["screen"] == "home"  # cold start put the home page under it
    u2dev.adb_device.shell("input keyevent 4")
    assert phonesim.phone().state()["screen"] == "launcher"
    assert [k["key"] for k in phonesim.phone().journal.entries("key")] == ["back", "back"]


def test_selector_api_and_set_text_on_quantity(u2dev, phonesim: PhoneSim):
    u2dev.open_url(PRODUCT_URL.format(GOODS))
    u2dev(text="发起拼单").click()
    u2dev(text="白色CHA(纯棉)").click()
    u2dev(text="L(建议115-130)").click()
    assert u2dev(text="白色CHA(纯棉)").info["selected"] is True
    u2dev(className="android.widget.EditText").set_text("7")
    assert u2dev(className="android.widget.EditText").get_text() == "7"
    u2dev(className="android.widget.EditText").set_text("999")  # clamped to the stock, like the app
    assert phonesim.phone().state()["quantity"] == 20
    assert not u2dev(text="不存在的按钮").exists


def test_adbutils_direct_use(phonesim: PhoneSim):
    dev = adbutils.adb.device("sim-1")
    assert dev.get_state() == "device"
    assert "shell_v2" in dev.get_features()
    r = dev.shell2("echo hi", v2=True)
    assert (r.returncode, r.output.strip()) == (0, "hi")
    r = dev.shell2("nosuchcmd")
    assert r.returncode == 127
    assert dev.prop.model == "M2012K11AC"
    assert dev.app_info(PDD).version_name == "8.17.0"
    assert dev.window_size() == (1080, 2400)


def test_unknown_serial_and_unsupported_service_fail_clearly(phonesim: PhoneSim):
    with adbutils_leaks_ignored():
        with pytest.raises(adbutils.AdbError, match="not found"):
            adbutils.adb.device("nope").shell("echo")
        dev = adbutils.adb.device("sim-1")
        with pytest.raises(adbutils.AdbError, match="phonesim: unsupported"):
            dev.forward("tcp:1234", "tcp:9008")
        with pytest.raises(adbutils.AdbError, match="unsupported device service"):
            dev.root()
