"""`cmbuyer-agent capture` (agent/authoring/capture.py): scrubbed captures from the phone simulator through the
REAL uiautomator2 + adbutils (``running_sim``), on both layouts — the 8.17.0 confirm page (sim-1)
and the 8.22.0 order sheet (sim-2) of demo/scenario.yaml. The simulator's status bar carries a
notification icon naming a full name and phone number and the address row a recipient with a masked
number (phonesim/system_ui.py, phonesim/screens.py): none of it may reach the stored files."""

from __future__ import annotations

import hashlib
import io
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from cmbuyer.agent import capabilities as cap
from cmbuyer.agent.authoring.capture import CaptureError, check_foreground, load_expected, parse_expect, scrub
from cmbuyer.agent.authoring.inspect import inspect_dump
from cmbuyer.agent.authoring.readings import READING_KEYS
from cmbuyer.agent.cli import main
from cmbuyer.agent.errors import PackError
from cmbuyer.agent.pack.compile import compile_pack
from cmbuyer.agent.phone.adapter import PhoneAdapter
from cmbuyer.agent.screens.dump import Dump, parse_dump
from cmbuyer.agent.waits import FlowWaits
from cmbuyer.phonesim.server import PhoneSim
from cmbuyer.phonesim.system_ui import NOTIFICATION_TICKER
from cmbuyer.phonesim.testing import running_sim
from tests.agent.packtools import pack_for_version

DEMO = Path(__file__).resolve().parents[3] / "demo" / "scenario.yaml"
GOODS = "937122477375"
PERSONAL = ("王小明", "13812345678", "张**", "138****5678", "北京市朝阳区建国路88号", "妈妈")


@pytest.fixture(scope="module")
def sim() -> Iterator[PhoneSim]:
    with running_sim(DEMO, serials=("sim-1", "sim-2")) as running:
        yield running


def _to_submit_screen(serial: str) -> PhoneAdapter:
    """Drive the phone with the agent's own capabilities to the screen holding the submit control
    (8.17.0: confirm page after the SKU sheet; 8.22.0: the order sheet)."""
    phone = PhoneAdapter.connect(serial)
    version = phone.app_version()
    assert version is not None
    pack = pack_for_version(version.name, version.code)
    waits = FlowWaits()  # production's: a capture drives the phone as a purchase would
    cap.open_product(phone, pack, GOODS, waits=waits)
    layout = cap.open_buy_sheet(phone, pack, waits=waits)
    wanted = {"颜色": "黑色CHA(纯棉)", "尺码": "M(建议100-115)"}
    cap.select_sku_options(phone, pack, layout.options_screen, wanted, waits=waits)
    if layout.options_screen != "confirm_order":
        cap.go_to_order_confirm(phone, pack, layout, waits=waits)
    return phone


def _capture(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["capture", *argv])
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _black(img: Image.Image, box: list[int]) -> bool:
    crop = img.crop(tuple(box))
    return crop.getextrema() == ((0, 0), (0, 0), (0, 0))


@pytest.mark.parametrize("serial", ["sim-1", "sim-2"])
def test_stored_capture_holds_only_the_app_and_no_personal_data(
    sim: PhoneSim, tmp_path: Path, serial: str, capsys: pytest.CaptureFixture[str]
) -> None:
    phone = _to_submit_screen(serial)
    raw = phone.dump_raw()
    assert NOTIFICATION_TICKER in raw and "138****5678" in raw  # the phone does show personal data
    out = tmp_path / "cap"
    code, printed = _capture(capsys, "--device", serial, "--label", "submit screen", "--out", str(out))
    assert code == 0, printed
    xml = (out / "dump.xml").read_text(encoding="utf-8")
    dump = parse_dump(xml)
    assert dump.packages() == {"com.xunmeng.pinduoduo"}
    assert "com.android.systemui" not in xml and "com.miui.home" not in xml
    for word in PERSONAL:
        assert word not in xml, word
    meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))
    assert meta["capture_format"] == 1 and meta["device"] == serial and meta["pack_id"].startswith("pdd-")
    assert meta["dump_sha256"] == hashlib.sha256((out / "dump.xml").read_bytes()).hexdigest()
    assert meta["screenshot_sha256"] == hashlib.sha256((out / "screenshot.png").read_bytes()).hexdigest()
    scrubbed = meta["scrubbed"]
    # the status bar and the launcher's gesture strip (MIUI, as on the real captures: no navigation bar)
    assert scrubbed["dropped_packages"] == ["com.android.systemui", "com.miui.home"]
    assert scrubbed["dropped_nodes"] == len(parse_dump(raw).nodes) - len(dump.nodes)
    assert scrubbed["blanked_rows"] == 1 and scrubbed["status_bar"] == "dump"
    status_band, strip = [0, 0, 1080, 95], [0, 2328, 1080, 2400]
    # the status band, the other windows drawn over the app (the launcher's gesture strip), then the
    # address row; no navigation bar on this phone
    assert scrubbed["blacked_out"][:2] == [status_band, strip] and len(scrubbed["blacked_out"]) == 3
    address_row = scrubbed["blacked_out"][-1]
    # the blanked row is the address row: in the dump, a clickable row with nothing left in it
    # (on the order sheet the row's plain containers share its bounds: the row is the clickable one)
    row = next(
        n
        for n in dump.nodes
        if [n.bounds.left, n.bounds.top, n.bounds.right, n.bounds.bottom] == address_row and n.clickable
    )
    assert row.clickable and all(not n.text and not n.desc for n in [row, *row.descendants()])
    img = Image.open(io.BytesIO((out / "screenshot.png").read_bytes())).convert("RGB")
    assert img.size == (1080, 2400)
    assert _black(img, status_band) and _black(img, strip) and _black(img, address_row)
    # the bottom bar with the submit button stays visible down to the strip drawn over its last 26 px
    assert not _black(img, [0, 2112, 1080, 2280]) and not _black(img, [334, 2280, 1080, 2328])
    # the proposed readings are inspect's readings of the stored dump, with the capture's own version
    proposal = json.loads((out / "expected.proposed.json").read_text(encoding="utf-8"))
    assert main(["inspect", "--dump", str(out / "dump.xml")]) == 0
    inspected = json.loads(capsys.readouterr().out)
    assert proposal == {
        "expected_format": 1,
        "screen": "confirm_order",
        "readings": inspected["readings"],
        "confirmed_by": None,
    }
    assert proposal["readings"]["unit_price"] == "12.88" and proposal["readings"]["submit_controls"] == 1


def test_capture_never_overwrites_without_force(
    sim: PhoneSim, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _to_submit_screen("sim-2")
    out = tmp_path / "cap"
    assert _capture(capsys, "--device", "sim-2", "--label", "one", "--out", str(out))[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code, printed = _capture(capsys, "--device", "sim-2", "--label", "two", "--out", str(out))
    assert code == 2 and printed["error"] == "CAPTURE_EXISTS" and "--force" in printed["detail"]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    code, printed = _capture(capsys, "--device", "sim-2", "--label", "two", "--out", str(out), "--force")
    assert code == 0 and json.loads((out / "meta.json").read_text("utf-8"))["label"] == "two"
    # --force replaces captures only, never a folder holding anything else
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("keep me", encoding="utf-8")
    code, printed = _capture(capsys, "--device", "sim-2", "--label", "x", "--out", str(other), "--force")
    assert code == 2 and (other / "todo.txt").read_text(encoding="utf-8") == "keep me"


def test_expectations_are_recorded_and_bad_keys_refused(
    sim: PhoneSim, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bad"
    code, printed = _capture(
        capsys,
        "--device",
        "sim-2",
        "--label",
        "x",
        "--out",
        str(out),
        "--expect",
        "screen=confirm_order",
        "price=59.00",
    )
    assert code == 2 and printed["error"] == "BAD_EXPECT" and "'price'" in printed["detail"]
    assert not out.exists()
    _to_submit_screen("sim-2")
    out = tmp_path / "good"
    code, _ = _capture(
        capsys,
        "--device",
        "sim-2",
        "--label",
        "sheet",
        "--out",
        str(out),
        "--by",
        "ops-li",
        "--expect",
        "screen=confirm_order",
        "unit_price=12.88",
        "quantity=1",
        'selected={"颜色": "黑色CHA(纯棉)", "尺码": "M(建议100-115)"}',
    )
    assert code == 0
    expected = json.loads((out / "expected.json").read_text(encoding="utf-8"))
    assert expected == {
        "expected_format": 1,
        "screen": "confirm_order",
        "confirmed_by": "ops-li",
        "readings": {
            "unit_price": "12.88",
            "quantity": 1,
            "selected": {"颜色": "黑色CHA(纯棉)", "尺码": "M(建议100-115)"},
        },
    }
    assert not (out / "expected.proposed.json").exists()
    # what the person confirmed is what inspect reads on the stored dump
    readings = inspect_dump(parse_dump((out / "dump.xml").read_bytes()), [pack_for_version("8.22.0", 82200)])
    assert all(readings["readings"][k] == v for k, v in expected["readings"].items())


def test_expect_values_and_expected_files_are_checked(tmp_path: Path) -> None:
    doc = parse_expect(["screen=sku_panel", "unit_price=59", "confirm_amount=null", "payment_problems=[]"], None)
    assert doc["readings"] == {"unit_price": "59.00", "confirm_amount": None, "payment_problems": []}
    for bad in (
        ["unit_price=59.00"],
        ["screen=cart"],
        ["screen=product", "quantity=two"],
        ["screen=product", "unit_price=-1"],
        ["screen=product", "selected=[1]"],
        ["screen"],
    ):
        with pytest.raises(CaptureError):
            parse_expect(bad, None)
    path = tmp_path / "expected.json"
    path.write_text(json.dumps({"expected_format": 1, "screen": "product", "readings": {"colour": "x"}}), "utf-8")
    with pytest.raises(CaptureError, match="colour"):
        load_expected(path)


def test_reading_keys_are_the_keys_inspect_prints() -> None:
    dump = parse_dump(
        '<hierarchy rotation="0"><node package="com.xunmeng.pinduoduo" bounds="[0,0][10,10]">'
        '<node package="com.xunmeng.pinduoduo" text="x" bounds="[0,0][5,5]"/></node></hierarchy>'
    )
    assert tuple(inspect_dump(dump, [])["readings"]) == READING_KEYS


def test_unreadable_dumps_and_a_foreign_foreground_write_nothing(
    sim: PhoneSim, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    phone = PhoneAdapter.connect("sim-1")
    phone.open_goods(GOODS)  # the app in front: only the dump is wrong
    sim.phone("sim-1").inject("empty_dump", times=1)
    out = tmp_path / "empty"
    code, printed = _capture(capsys, "--device", "sim-1", "--label", "x", "--out", str(out))
    assert code == 2 and printed["error"] == "CAPTURE_REFUSED" and "DUMP_EMPTY" in printed["detail"]
    assert not out.exists() and list(tmp_path.iterdir()) == []
    sim.phone("sim-1").inject("malformed_dump", times=1)
    code, printed = _capture(capsys, "--device", "sim-1", "--label", "x", "--out", str(out))
    assert code == 2 and "cannot be read" in printed["detail"] and not out.exists()
    for _ in range(4):  # back to the launcher: the app is not in front
        phone.press_back()
    code, printed = _capture(capsys, "--device", "sim-1", "--label", "x", "--out", str(out))
    assert code == 2 and "com.miui.home has the focus" in printed["detail"] and not out.exists()
    # the same screen refused by the dump alone (a focus line that cannot be read)
    with pytest.raises(CaptureError, match="not in front"):
        scrub(phone.dump_raw(), phone.screenshot_png(), None)


def test_a_phone_number_row_is_scrubbed_without_a_pack() -> None:
    """A new app version has no pack yet: the row showing a phone number is still blanked."""
    sys_ui, app = 'package="com.android.systemui"', 'package="com.xunmeng.pinduoduo"'
    xml = (
        '<hierarchy rotation="0">'
        f'<node {sys_ui} resource-id="com.android.systemui:id/status_bar" bounds="[0,0][1080,96]">'
        f'<node {sys_ui} text="短信 王小明 13812345678" bounds="[0,0][900,96]"/></node>'
        f'<node {app} bounds="[0,96][1080,2280]">'
        f'<node {app} clickable="true" bounds="[0,200][1080,400]">'
        f'<node {app} text="赵六  186 1234 5678" bounds="[120,220][900,300]"/>'
        f'<node {app} text="广州市天河区" content-desc="广州市天河区" bounds="[120,300][900,380]"/>'
        f'</node><node {app} text="¥59" bounds="[100,500][300,560]"/></node></hierarchy>'
    )
    png = io.BytesIO()
    Image.new("RGB", (540, 1200), (255, 255, 255)).save(png, format="PNG")
    done = scrub(xml, png.getvalue(), None)
    assert "赵六" in xml and "赵六" not in done.xml and "广州市天河区" not in done.xml and "13812345678" not in done.xml
    assert "¥59" in done.xml
    assert done.report["blanked_rows"] == 1 and done.report["dropped_packages"] == ["com.android.systemui"]
    # rectangles are scaled to the half-size screenshot
    assert done.report["blacked_out"] == [[0, 0, 540, 48], [0, 100, 540, 200]]
    img = Image.open(io.BytesIO(done.png))
    assert _black(img, [0, 100, 540, 200]) and not _black(img, [0, 250, 540, 600])
    # no status bar in the dump (some ROMs hide it from uiautomator): a fixed top band, 4.5 % of the height
    no_bar = scrub(
        xml.replace("com.android.systemui:id/status_bar", "com.android.systemui:id/other"), png.getvalue(), None
    )
    assert no_bar.report["status_bar"] == "fixed-band"
    assert no_bar.report["blacked_out"][0] == [0, 0, 540, 54]
    assert _black(Image.open(io.BytesIO(no_bar.png)), [0, 0, 540, 54])


def test_shipped_packs_declare_the_address_row_and_bad_privacy_rows_are_refused() -> None:
    for version in (("8.17.0", 81700), ("8.22.0", 82200)):
        assert len(pack_for_version(*version).privacy_rows) == 1
        block = pack_for_version(*version).address_block
        assert block is not None and block.screens == {"confirm_order"}
    raw = json.loads(json.dumps(pack_for_version("8.22.0", 82200).raw))
    raw["address_block"] = {"blocks": [{"clickable": True, "evidence": ["nope"]}], "screens": ["confirm_order"]}
    with pytest.raises(PackError, match=r"\$\.address_block\.blocks\[0\]"):
        compile_pack(raw)
    raw["address_block"] = {"blocks": [], "screens": ["confirm_order"]}
    with pytest.raises(PackError):
        compile_pack(raw)
    del raw["address_block"]
    raw["privacy"] = {"rows": [{"text": "(", "evidence": ["sim822-product"]}]}
    with pytest.raises(PackError, match=r"\$\.privacy\.rows\[0\]"):
        compile_pack(raw)
    raw["privacy"] = {"rows": [{"text": "x", "evidence": ["nope"]}]}
    with pytest.raises(PackError, match=r"\$\.privacy\.rows\[0\]"):
        compile_pack(raw)
    raw["privacy"] = {"row": []}
    with pytest.raises(PackError):
        compile_pack(raw)


def test_a_capture_is_refused_while_another_window_has_the_focus() -> None:
    check_foreground("  mCurrentFocus=Window{8a3f2c1 u0 com.xunmeng.pinduoduo/.activity.NewPageActivity}")
    check_foreground("")  # unreadable: the dump-based scrubbing still applies
    for pkg in ("com.tencent.mm", "com.android.systemui"):
        with pytest.raises(CaptureError, match=pkg):
            check_foreground(f"  mCurrentFocus=Window{{1 u0 {pkg}/.Main}}")


# --- the address block, by structure -----------------------------------------------
FIXTURES = Path(__file__).parents[1] / "fixtures"
# (dump, its app version, the bounds of the address row's text nodes): the rebuilt order sheet shows
# the recipient in one TextView (name, phone and address), the older confirm page in two
SUBMIT_SCREENS = [
    (FIXTURES / "sim822" / "sheet_tshirt.xml", ("8.22.0", 82200), ("[127,375][1026,428]",)),
    (
        FIXTURES / "sim822" / "sku_sheet_old_confirm.xml",
        ("8.22.0", 82200),
        ("[120,252][1000,312]", "[120,324][1000,396]"),
    ),
    (FIXTURES / "sim" / "confirm_order.xml", ("8.17.0", 81700), ("[120,252][1000,312]", "[120,324][1000,396]")),
]
# each form of the recipient row the outside attack found left in the stored files, and a plain one
ADDRESS_FORMS = {
    "dotted": ("李四  139.1234.5678", "上海市浦东新区世纪大道100号"),
    "landline": ("王五  0571-88881234", "杭州市西湖区文三路90号"),
    "none": ("赵六", "广州市天河区体育西路"),
    "+86": ("钱七  +86 139 1234 5678", "深圳市南山区科技园"),
}


def _white_png(size: tuple[int, int] = (1080, 2400)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (255, 255, 255)).save(buf, format="PNG")
    return buf.getvalue()


def _with_recipient(path: Path, slots: tuple[str, ...], name: str, address: str) -> str:
    """The fixture with the recipient written into the address row's TextViews (found by their bounds,
    not by the pack: the captured fixtures had them blanked); one slot gets both texts."""
    root = ET.fromstring(path.read_bytes())
    values = [f"{name}  {address}"] if len(slots) == 1 else [name, address]
    for bounds, value in zip(slots, values, strict=True):
        (node,) = [
            n for n in root.iter("node") if n.get("bounds") == bounds and n.get("class", "").endswith("TextView")
        ]
        node.set("text", value)
    return "<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>\n" + ET.tostring(root, encoding="unicode")


def _shown(dump: Dump) -> str:
    """Every text and content-desc of the dump, one per line."""
    return "\n".join(v for n in dump.nodes for v in (n.text, n.desc) if v)


@pytest.mark.parametrize("form", ADDRESS_FORMS, ids=ADDRESS_FORMS.keys())
@pytest.mark.parametrize("screen", SUBMIT_SCREENS, ids=lambda s: f"{s[0].parent.name}/{s[0].stem}")
def test_the_address_block_is_scrubbed_whatever_its_texts_look_like(
    screen: tuple[Path, tuple[str, int], tuple[str, ...]], form: str
) -> None:
    path, version, slots = screen
    name, address = ADDRESS_FORMS[form]
    xml = _with_recipient(path, slots, name, address)
    assert name in _shown(parse_dump(xml)) and address in _shown(parse_dump(xml))
    pack = pack_for_version(*version)
    done = scrub(xml, _white_png(), pack)
    left = _shown(done.dump)
    for text in (name, address, name.split()[0], *name.split()[1:]):
        assert text not in left, text
    assert name not in done.xml and address not in done.xml
    assert done.report["address_blocks"] == 1 and done.report["screen"] == "confirm_order"
    assert pack.address_block is not None
    (block,) = pack.address_block.find(parse_dump(xml).require_app())
    bounds = [block.bounds.left, block.bounds.top, block.bounds.right, block.bounds.bottom]
    assert bounds in done.report["blacked_out"]
    img = Image.open(io.BytesIO(done.png)).convert("RGB")
    assert _black(img, bounds)  # every pixel of the address block
    assert not _black(img, [0, bounds[3] + 30, 1080, bounds[3] + 200])  # the goods row below stays
    # the readings the pack makes on the scrubbed dump are still there
    assert inspect_dump(done.dump, [pack])["readings"]["submit_controls"] == 1


def test_a_submit_screen_without_its_address_block_is_refused(tmp_path: Path) -> None:
    """The row no longer has the structure the pack declares (here: not clickable any more): the
    capture is refused rather than stored with whatever the row shows."""
    path, version, slots = SUBMIT_SCREENS[0]
    xml = path.read_text(encoding="utf-8")
    row_start = xml.rindex('clickable="true"', 0, xml.index(f'bounds="{slots[0]}"'))  # the row around the text
    changed = xml[:row_start] + 'clickable="false"' + xml[row_start + len('clickable="true"') :]
    with pytest.raises(CaptureError, match=r"address block .* not on this confirm_order screen: .*; nothing written"):
        scrub(changed, _white_png(), pack_for_version(*version))
    # another screen of the same pack has no address block to find: nothing to refuse
    product = (FIXTURES / "sim822" / "product.xml").read_text(encoding="utf-8")
    assert scrub(product, _white_png(), pack_for_version(*version)).report["address_blocks"] == 0


@pytest.mark.parametrize(
    "text",
    ["李四  139.1234.5678", "0571-88881234", "+86 139 1234 5678", "(010) 1234 5678", "8613912345678", "139 **** 1234"],
)
def test_a_phone_number_like_text_anywhere_is_scrubbed(text: str) -> None:
    app = 'package="com.xunmeng.pinduoduo"'
    xml = (
        f'<hierarchy rotation="0"><node {app} bounds="[0,96][1080,2280]">'
        f'<node {app} text="联系商家 {text}" bounds="[0,200][1080,300]"/>'
        f'<node {app} text="订单编号：250101-000000002" bounds="[0,400][1080,500]"/></node></hierarchy>'
    )
    done = scrub(xml, _white_png(), None)
    assert text not in done.xml and "250101-000000002" in done.xml  # an order number is not a phone
    assert _black(Image.open(io.BytesIO(done.png)).convert("RGB"), [0, 200, 1080, 300])


def test_a_deeply_nested_expected_file_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "expected.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(CaptureError, match=r"cannot read .* as JSON"):
        load_expected(path)
    with pytest.raises(CaptureError, match="give JSON"):
        parse_expect(["screen=confirm_order", "selected=" + "[" * 100_000], None)
