"""Readers, gates and pack loading for the order sheet (docs/agent.md "Readers (the order sheet)"), on simulator
captures of the
order-sheet layout (tests/agent/fixtures/sim822, rendered by render_sim_order_sheet.py — simulator
captures, not a real phone) and on small variations of them made in the test (each says what it
changed)."""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.agent import gates
from cmbuyer.agent.authoring.inspect import inspect_dump
from cmbuyer.agent.capabilities import confirm_reading
from cmbuyer.agent.cli import main
from cmbuyer.agent.errors import FlowStop, MoneyAmbiguous, PackError
from cmbuyer.agent.pack.compile import compile_pack
from cmbuyer.agent.screens import readers
from cmbuyer.agent.screens.dump import parse_dump
from cmbuyer.agent.screens.packmodel import Pack
from cmbuyer.agent.screens.text import match_amount
from cmbuyer.schemas.text import normalize_sku
from tests.agent.packtools import shipped_packs

FX = Path(__file__).parents[1] / "fixtures"
PACK_FILE = Path(__file__).parents[3] / "agent" / "packs" / "pdd-8.22.0-82200.json"


def pack822() -> Pack:
    return next(p for p in shipped_packs() if p.version_name == "8.22.0")


def xml(name: str) -> str:
    return (FX / "sim822" / f"{name}.xml").read_text("utf-8")


def inspect(text: str) -> dict[str, Any]:
    return inspect_dump(parse_dump(text), [pack822()])


# --- normalization: one implementation, trim outer whitespace then NFKC ----------------------------
@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        ("  奶白色+礼盒", "奶白色+礼盒"),
        ("复古红#999", "复古红#999"),
        ("Ｍ（建议）", "M(建议)"),
        ("【限定】奶白色", "【限定】奶白色"),
        (" a  b ", "a  b"),
        ("\u3000黑色\u3000", "黑色"),
    ],
)
def test_normalize_sku_trims_then_nfkc_and_nothing_else(raw: str, norm: str) -> None:
    assert normalize_sku(raw) == norm
    assert readers.sku_name(raw) == norm


# --- the 已选 label is a second witness -------------------------------------------------------------
@pytest.mark.parametrize(
    ("label", "names", "agrees"),
    [
        ("已选: #奶白色+礼盒", ["奶白色+礼盒"], True),
        ("已选: [限定]奶白色", ["【限定】奶白色"], True),
        ("已选: 黑色 M", ["黑色", "M"], True),
        ("已选: 复古红#999", ["复古红#999"], True),
        ("已选: #复古红#999", ["复古红#999"], True),
        ("已选: 复古红999", ["复古红#999"], False),  # nothing inside a name is ever deleted
        ("已选: ##奶白色", ["奶白色"], False),  # only ONE leading '#'
        ("已选: 奶白色礼盒", ["奶白色+礼盒"], False),
        ("已选: 白色 M", ["黑色", "M"], False),
        ("请选择 颜色 尺码", ["黑色", "M"], False),
    ],
)
def test_label_witness(label: str, names: list[str], agrees: bool) -> None:
    assert readers.label_agrees(label, names) is agrees


def test_label_disagreement_nulls_the_reading() -> None:
    """The mug capture with its label changed to name another option: the tile still reads as
    selected, but the reading is null (and gate 3 would stop)."""
    good = inspect(xml("sheet_mug"))["readings"]["selected"]
    assert good == {"款式": "奶白色+礼盒"}
    bad = inspect(xml("sheet_mug").replace("已选: #奶白色+礼盒", "已选: #经典白"))["readings"]["selected"]
    assert bad == {"款式": None}
    gone = inspect(xml("sheet_mug").replace("已选: #奶白色+礼盒", ""))["readings"]["selected"]
    assert gone == {"款式": None}


# --- inspect on order-sheet captures -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "unit", "total", "selected"),
    [
        ("sheet_tshirt", "29.90", "29.90", {"颜色": "黑色", "尺码": "M"}),
        ("sheet_mug", "59.00", "59.00", {"款式": "奶白色+礼盒"}),
        ("sheet_blanket", "128.00", "128.00", {"颜色分类": "奶咖色"}),
        ("sheet_lipstick", "39.90", "39.90", {"色号": "复古红#999"}),
        ("sheet_case", "12.80", "12.80", {"款式": None}),  # the selected tile is off-screen
    ],
)
def test_inspect_order_sheet(name: str, unit: str, total: str, selected: dict[str, str | None]) -> None:
    out = inspect(xml(name))
    assert (out["screen"], out["pack"], out["layout"]) == ("confirm_order", "pdd-8.22.0-82200", "order_sheet")
    r = out["readings"]
    assert (r["unit_price"], r["quantity"], r["confirm_amount"], r["submit_controls"]) == (unit, 1, total, 1)
    assert r["selected"] == selected
    assert r["payment_mode"] == "使用#微信支付,更换支付方式" and r["payment_problems"] == []
    assert any("更换支付方式" in c for c in r["payment_controls"])
    options = [o for values in r["options"].values() for o in values]
    assert not any(o is None or "支付" in o or o == "添加" or "提交订单" in o or "地址" in o for o in options)


def test_inspect_image_tiles_names_and_sold_out() -> None:
    groups = readers.read_groups(parse_dump(xml("sheet_blanket")), pack822().readers["confirm_order"])
    tiles = {t.text: t for t in groups["颜色分类"].tiles}
    assert list(tiles) == ["奶咖色", "雾霾蓝色款", "樱花粉", "燕麦白"]  # no badge (最后2件) in a name
    assert tiles["雾霾蓝色款"].enabled and not tiles["雾霾蓝色款"].available  # enabled but 刚刚抢光
    assert tiles["燕麦白"].available
    assert groups["颜色分类"].scroll_list is None  # four tiles: rows of three, nothing scrolls
    lipstick = readers.read_groups(parse_dump(xml("sheet_lipstick")), pack822().readers["confirm_order"])
    assert lipstick["色号"].scroll_list is not None  # fourteen: one row that scrolls


def test_inspect_cli_with_pack_names_pack_and_layout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--pack", str(PACK_FILE), "--dump", str(FX / "sim822" / "sheet_tshirt.xml")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pack"] == "pdd-8.22.0-82200" and out["layout"] == "order_sheet"
    assert out["readings"]["selected"] == {"颜色": "黑色", "尺码": "M"}


def test_inspect_without_pack_names_every_recognizing_pack_and_reads_by_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 8.17.0 pack recognizes an 8.22.0 order sheet but cannot read its price: without --pack the
    output must say that another pack also recognizes it; --version and a capture bundle's meta.json
    pick the pack of exactly that version."""
    dump = FX / "sim822" / "sheet_tshirt.xml"
    assert main(["inspect", "--dump", str(dump)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pack_candidates"] == ["pdd-8.17.0-81700", "pdd-8.22.0-82200"]
    assert main(["inspect", "--version", "8.22.0:82200", "--dump", str(dump)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["pack"], out["layout"], out["readings"]["unit_price"]) == ("pdd-8.22.0-82200", "order_sheet", "29.90")
    assert "pack_candidates" not in out
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "dump.xml").write_bytes(dump.read_bytes())
    (bundle / "meta.json").write_text(json.dumps({"app_version_name": "8.22.0", "app_version_code": 82200}))
    assert main(["inspect", "--dump", str(bundle / "dump.xml")]) == 0
    assert json.loads(capsys.readouterr().out)["pack"] == "pdd-8.22.0-82200"
    (bundle / "meta.json").write_text(json.dumps({"app_version_name": "9.9.9", "app_version_code": 1}))
    assert main(["inspect", "--dump", str(bundle / "dump.xml")]) == 2  # no pack for that version: no guess
    assert json.loads(capsys.readouterr().out)["error"] == "NO_SELECTOR_PACK"
    assert main(["inspect", "--version", "8.22.0", "--dump", str(dump)]) == 2
    assert json.loads(capsys.readouterr().out)["error"] == "NO_SELECTOR_PACK"


@pytest.mark.parametrize(
    ("name", "row"),
    [
        ("sheet_balance", "使用多多支付余额¥5.05，更换支付方式"),
        ("sheet_paylater", "使用#先用后付，更换支付方式"),
        ("sheet_nopw", "使用#多多支付(免密支付)，更换支付方式"),
        ("sheet_unreadable", None),
        ("sheet_tworows", None),
        ("sheet_paynow", "使用#微信支付，更换支付方式"),
    ],
)
def test_unsafe_payment_variants_are_named(name: str, row: str | None) -> None:
    dump = parse_dump(xml(name))
    reading = readers.read_payment(dump, pack822())
    assert reading.row == row and reading.problems
    with pytest.raises(FlowStop) as err:
        gates.payment_gate(reading.problems, reading.mode)
    assert err.value.reason_code == "PAYMENT_MODE_UNSAFE"
    assert inspect(xml(name))["screen"] == "confirm_order"  # recognized, so the gate runs


def test_safe_payment_modes() -> None:
    for name, mode in (("sheet_tshirt", "微信支付"), ("sheet_alipay", "支付宝")):
        reading = readers.read_payment(parse_dump(xml(name)), pack822())
        assert gates.payment_gate(reading.problems, reading.mode) == mode


@pytest.mark.parametrize("total", ["提交订单 ¥0", "提交订单 ¥0.00", "提交订单 ￥0"])
def test_zero_total_is_no_hand_off(total: str) -> None:
    """Breaker: a zero total leaves nothing for a person to confirm in an external app, yet passed
    both the payment gate (the text is exactly 提交订单 ¥<amount>) and gate 3 (as a "discount")."""
    dump = parse_dump(xml("sheet_lipstick").replace('text="提交订单 ¥39.9"', f'text="{total}"', 1))
    reading = readers.read_payment(dump, pack822())
    with pytest.raises(FlowStop) as err:
        gates.payment_gate(reading.problems, reading.mode)
    assert err.value.reason_code == "PAYMENT_MODE_UNSAFE"


def _second_submit_bar(text: str, amount: str) -> str:
    """The sheet with a second submit control (a copy of the clickable FrameLayout > LinearLayout >
    TextView ``提交订单 ¥…``) whose label shows ``amount``."""
    root = ET.fromstring(text)
    parents = {c: p for p in root.iter() for c in p}
    bar = next(n for n in root.iter("node") if (n.get("text") or "").startswith("提交订单"))
    while bar.get("clickable") != "true":  # the submit control: the label's nearest clickable ancestor
        bar = parents[bar]
    parent = parents[bar]
    twin = copy.deepcopy(bar)
    twin.set("bounds", "[0,1900][334,1990]")
    for node in twin.iter("node"):
        node.set("bounds", "[0,1900][334,1990]")
        node.set("text", (node.get("text") or "").replace("¥39.9", amount))
    parent.insert(list(parent).index(bar) + 1, twin)
    return ET.tostring(root, encoding="unicode")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        # two submit bars with different totals: the total is unreadable (not an exception out of the reader)
        (lambda t: _second_submit_bar(t, "¥19.9"), "CONFIRM_AMOUNT_UNREADABLE"),
        # two submit bars with the same total: one control too many
        (lambda t: _second_submit_bar(t, "¥39.9"), "SUBMIT_CONTROL_COUNT"),
        # the unit-price node's desc twin disagrees with its text: unreadable, never a pick
        (
            lambda t: t.replace(
                'text="¥39.9" resource-id="com.xunmeng.pinduoduo:id/pdd" class="android.widget.TextView" '
                'package="com.xunmeng.pinduoduo" content-desc=""',
                'text="¥39.9" resource-id="com.xunmeng.'
                'pinduoduo:id/pdd" class="android.widget.TextView" package="com.xunmeng.pinduoduo" '
                'content-desc="¥19.9"',
            ),
            "UNIT_PRICE_UNREADABLE",
        ),
        # the selected image tile's name (its content-desc) fused with a stock badge: unreadable
        (
            lambda t: t.replace('content-desc="复古红#999"', 'content-desc="复古红#999 最后2件"', 1),
            "SKU_SELECTION_UNREADABLE",
        ),
        (
            lambda t: t.replace(
                'text="1" resource-id="com.xunmeng.pinduoduo:id/pdd" class="android.widget.EditText"',
                'text="2件" resource-id="com.xunmeng.pinduoduo:id/pdd" class="android.widget.EditText"',
            ),
            "QUANTITY_UNREADABLE",
        ),
    ],
)
def test_gate3_on_hand_changed_sheets_stops_with_its_code(change: Any, reason: str) -> None:
    """Breaker: variations of a simulator sheet (each lambda says what changed) read by the same path
    the flow uses (capabilities.confirm_reading) and judged by gate 3."""
    text = change(xml("sheet_lipstick"))
    assert text != xml("sheet_lipstick")
    wanted = {"颜色": "复古红#999"}
    reading = confirm_reading(parse_dump(text), pack822(), wanted)
    with pytest.raises(FlowStop) as err:
        gates.gate3(reading.gate3, wanted=wanted, gate1_price=Decimal("39.90"), quantity=1, max_total=Decimal("100"))
    assert err.value.reason_code == reason


_LIPSTICK_RED = 'text="复古红#999" resource-id="com.xunmeng.pinduoduo:id/tv_content"'  # the name text
_RED_TILE = 'content-desc="复古红#999" checkable="false" checked="false" clickable="true" enabled="true"'


@pytest.mark.parametrize(
    "change",
    [
        # stock ran out after the selection: name truncated with a status, full name kept in content-desc
        lambda t: t.replace(_LIPSTICK_RED, _LIPSTICK_RED.replace('text="复古红#999"', 'text="复古红... 刚刚抢光"'), 1),
        # the selected tile turned disabled
        lambda t: t.replace(_RED_TILE, _RED_TILE.replace('enabled="true"', 'enabled="false"'), 1),
    ],
)
def test_selected_tile_sold_out_on_the_submit_screen_stops(change: Any) -> None:
    """Breaker: the selected wanted tile reads sold out/disabled on the submit screen; its name still
    equals the task's value, so gate 3 passed it."""
    text = change(xml("sheet_lipstick"))
    assert text != xml("sheet_lipstick")
    with pytest.raises(FlowStop) as err:
        confirm_reading(parse_dump(text), pack822(), {"颜色": "复古红#999"})
    assert err.value.reason_code == "OUT_OF_STOCK"


# --- prices ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("最后3件 ¥69", "69.00"),
        ("即将卖完 ¥88", "88.00"),
        ("¥12.88", "12.88"),
        ("￥12.88", "12.88"),
        ("仅剩2件 ¥5", "5.00"),
        ("¥70已拼44件", None),
        ("¥4162人付款", None),
        ("¥70已拼44件最后6件", None),
        ("已售5.2万件 ¥12.88", None),
        ("¥29.9-39", None),
    ],
)
def test_unit_price_regex(text: str, value: str | None) -> None:
    got = match_amount(pack822().readers["confirm_order"].unit_price.regex, text)  # type: ignore[union-attr]
    assert (None if got is None else str(got)) == value


def _price_node_changed(new: str) -> str:
    return xml("sheet_tshirt").replace('text="最后5件 ¥29.9"', new, 1)


def test_price_split_over_nodes_or_fused_is_null() -> None:
    split = _price_node_changed('text="¥"')  # the digits would sit in sibling nodes: the ¥ alone
    assert inspect(split)["readings"]["unit_price"] is None
    fused = _price_node_changed('text="¥70已拼44件"')
    assert inspect(fused)["readings"]["unit_price"] is None


def test_two_price_candidates_are_ambiguous() -> None:
    # the 已选 label beside the price node changed into a second price
    dump = parse_dump(xml("sheet_tshirt").replace('text="已选: 黑色 M"', 'text="¥31.9"', 1))
    with pytest.raises(MoneyAmbiguous):
        readers.read_money(dump, pack822().readers["confirm_order"].unit_price)


# --- gates -----------------------------------------------------------------------------------------
WANTED = {"颜色": "黑色", "尺码": "M"}


def g3(**over: Any) -> gates.Gate3Reading:
    base: dict[str, Any] = dict(
        selected={"颜色": "黑色", "尺码": "M"},
        unit_price=Decimal("10.00"),
        quantity=2,
        total=Decimal("20.00"),
        submit_controls=1,
    )
    base.update(over)
    return gates.Gate3Reading(**base)


@pytest.mark.parametrize(
    ("reading", "reason"),
    [
        (g3(selected={"颜色": None, "尺码": "M"}), "SKU_SELECTION_UNREADABLE"),
        (g3(selected={"颜色": "黑色", "尺码": None}), "SKU_SELECTION_UNREADABLE"),
        (g3(selected={"颜色": "黑色"}), "SKU_SELECTION_UNREADABLE"),
        (g3(unit_price=None), "UNIT_PRICE_UNREADABLE"),
        (g3(quantity=None), "QUANTITY_UNREADABLE"),
        (g3(total=None), "CONFIRM_AMOUNT_UNREADABLE"),
        (g3(selected={"颜色": "白色", "尺码": "M"}), "SKU_MISMATCH_ON_CONFIRM"),
        (g3(selected={"颜色": "黑色", "尺码": "L"}), "SKU_MISMATCH_ON_CONFIRM"),
        (g3(quantity=3, total=Decimal("30.00")), "QUANTITY_MISMATCH"),
        (g3(unit_price=Decimal("9.00"), total=Decimal("18.00")), "PRICE_CHANGED"),
        (g3(total=Decimal("20.01")), "TOTAL_ABOVE_ITEMS"),
        (g3(submit_controls=2), "SUBMIT_CONTROL_COUNT"),
    ],
)
def test_gate3_fails_closed(reading: gates.Gate3Reading, reason: str) -> None:
    with pytest.raises(FlowStop) as err:
        gates.gate3(reading, wanted=WANTED, gate1_price=Decimal("10.00"), quantity=2, max_total=Decimal("25.00"))
    assert err.value.reason_code == reason


def test_gate3_caps_and_discount() -> None:
    with pytest.raises(FlowStop) as err:
        gates.gate3(g3(), wanted=WANTED, gate1_price=Decimal("10.00"), quantity=2, max_total=Decimal("19.99"))
    assert err.value.reason_code == "PRICE_OVER_CAP"
    summary = gates.gate3(
        g3(total=Decimal("17.00")), wanted=WANTED, gate1_price=Decimal("10.00"), quantity=2, max_total=Decimal("20.00")
    )
    assert "discount" in summary


def test_gates_1_and_2_fail_closed_on_null() -> None:
    for selected in ({"颜色": None, "尺码": "M"}, {"尺码": "M"}):
        with pytest.raises(FlowStop, match="gate 1"):
            gates.gate1(selected, WANTED, Decimal("1.00"))
    with pytest.raises(FlowStop) as err:
        gates.gate1({"颜色": "黑色", "尺码": "M"}, WANTED, None)
    assert err.value.reason_code == "UNIT_PRICE_UNREADABLE"
    for qty, price, reason in ((None, Decimal("1.00"), "QUANTITY_UNREADABLE"), (2, None, "UNIT_PRICE_UNREADABLE")):
        with pytest.raises(FlowStop) as err:
            gates.gate2(qty, 2, Decimal("1.00"), price)
        assert err.value.reason_code == reason


@pytest.mark.parametrize(
    ("headers", "wanted", "ok"),
    [
        (["颜色", "尺码"], {"颜色": "a", "尺码": "b"}, True),
        (["色号"], {"颜色": "a"}, True),  # a synonym from the pack's alias table
        (["颜色分类", "尺寸"], {"颜色": "a", "尺码": "b"}, True),
        (["规格", "数量"], {"规格": "a", "数量": "b"}, True),  # any goods: the headers as shown
        (["规格", "数量", "口味"], {"口味": "c", "规格": "a", "数量": "b"}, True),  # three, in any order
        (["颜色分类", "颜色"], {"颜色": "a", "颜色分类": "b"}, True),  # exact names win over synonyms
        (["款式"], {"颜色": "a", "尺码": "b"}, False),  # a named dimension the sheet does not show
        (["颜色", "尺码"], {"颜色": "a"}, False),  # a sheet dimension the task does not name
        (["颜色", "套餐"], {"颜色": "a", "尺码": "b"}, False),  # a header nobody named
        (["色号", "款式"], {"颜色": "a", "尺码": "b"}, False),  # two headers for one task dimension
        (["a", "b", "c", "d"], {"a": "1", "b": "2", "c": "3"}, False),  # four: more than a task can name
    ],
)
def test_sku_dimensions(headers: list[str], wanted: dict[str, str], ok: bool) -> None:
    pack = pack822()
    matched = {h: pack.task_dimension(h, wanted) for h in headers}
    if ok:
        assert set(gates.map_dimensions(headers, matched, wanted)) == set(wanted)
    else:
        with pytest.raises(FlowStop) as err:
            gates.map_dimensions(headers, matched, wanted)
        assert err.value.reason_code == "SKU_DIMENSION_UNNAMED"


def test_an_unnamed_dimension_is_named_with_how_to_write_the_task() -> None:
    pack = pack822()
    wanted = {"规格": "3层100抽"}
    headers = ["规格", "数量"]
    with pytest.raises(FlowStop) as err:
        gates.map_dimensions(headers, {h: pack.task_dimension(h, wanted) for h in headers}, wanted)
    assert "“数量”任务未指定" in err.value.summary and "数量=（页面上的选项名）" in err.value.summary


# --- pack loading: a pack cannot widen what may be tapped ------------------------------------------
def _sel(text: str) -> dict[str, Any]:
    return {"text": text, "evidence": ["sim822-product"]}


@pytest.mark.parametrize(
    "mutate",
    [
        lambda p: p["dismissals"].append({"id": "pay", "when": _sel("确定放弃吗"), "tap": _sel("继续支付")}),
        lambda p: p["dismissals"].append({"id": "any", "when": _sel("x"), "tap": _sel(".*")}),
        lambda p: p["dismissals"].append(
            {"id": "noname", "when": _sel("x"), "tap": {"clickable": True, "evidence": ["sim822-product"]}}
        ),
        lambda p: p["buy_paths"].update(single=_sel("单独购买|提交订单.*")),
        lambda p: p["buy_paths"].update(group=_sel(".*支付.*")),
        lambda p: p["layouts"][1].update(to_confirm=_sel("确定|立即支付")),
        lambda p: p["controls"]["quantity_increase"].update(desc=".*"),
        lambda p: p["layouts"].append(
            {"id": "web_sheet", "options_screen": "confirm_order", "quantity_screen": "confirm_order"}
        ),
        lambda p: p["layouts"][0].update(options_screen="cashier"),
        lambda p: p["layouts"].append(dict(p["layouts"][0])),
        lambda p: p["layouts"][0].update(quantity_screen="sku_panel"),
        lambda p: p["layouts"][1].pop("to_confirm"),
        lambda p: p["screens"].update(cashier=p["screens"]["payment"]),
        lambda p: p["payment"].update(handoff_modes=["微信支付", "先用后付"]),
        lambda p: p["payment"].update(handoff_modes=["多多支付(免密)"]),
        lambda p: p["payment"].update(mode_regex="使用(.*)"),
        lambda p: p["dimension_aliases"][1].append("颜色"),  # one header in two alias groups
        # breaker: regexes that reach a payment/submit control without matching any fixed probe
        lambda p: p["dismissals"].append({"id": "pay2", "when": _sel("x"), "tap": _sel("确认支付¥.*")}),
        lambda p: p["dismissals"].append({"id": "pay3", "when": _sel("x"), "tap": _sel("去支付[0-9]+")}),
        lambda p: p["dismissals"].append({"id": "sub", "when": _sel("x"), "tap": _sel("提交订单 ¥[0-9.]+起")}),
        lambda p: p["buy_paths"].update(single=_sel("去付款")),
        lambda p: p.update(pack_format=1),
    ],
)
def test_pack_refused_at_load(mutate: Any) -> None:
    raw = copy.deepcopy(pack822().raw)
    mutate(raw)
    with pytest.raises(PackError):
        compile_pack(raw)


def test_shipped_822_pack_says_its_evidence_is_simulator_captures() -> None:
    pack = pack822()
    assert "SIMULATOR" in pack.raw["description"] and "real-structure" in pack.raw["description"]
    sources = {eid: e["source"] for eid, e in pack.raw["evidence"].items()}
    assert {eid for eid, src in sources.items() if src == "real-structure"} == {
        "real-sheet-image-tiles",
        "real-sheet-text-tile",
    }
    assert set(sources.values()) == {"simulator", "real-structure"}
    assert [layout.id for layout in pack.layouts] == ["order_sheet", "sku_sheet"]
    assert set(pack.buy_paths) == {"single", "group"}


# --- swipes stay inside their list and pass the denylist like taps ----------------------------------
class _ShellRecorder:
    """Stands in for the adbutils device: records shell commands (nothing is sent anywhere). The
    swipe path through the real adb stack is covered in test_order_sheet_flow.py."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def shell(self, cmd: list[str], timeout: float | None = None) -> str:
        self.calls.append(list(cmd))
        return ""


def _lipstick_list(text: str) -> tuple[Any, Any]:
    dump = parse_dump(text)
    group = readers.read_groups(dump, pack822().readers["confirm_order"])["色号"]
    return dump, group.scroll_list


def test_swipe_inside_the_list_bounds() -> None:
    from cmbuyer.agent.phone.adapter import PhoneAdapter

    rec = _ShellRecorder()
    dump, lst = _lipstick_list(xml("sheet_lipstick"))
    PhoneAdapter("x", rec, None).swipe_in_list(dump, lst, forward=True)
    ((*cmd, x1, y1, x2, y2, _ms),) = rec.calls
    assert cmd == ["input", "swipe"]
    b = lst.bounds
    for x, y in ((int(x1), int(y1)), (int(x2), int(y2))):
        assert b.left < x < b.right and b.top <= y < b.bottom
    assert int(x1) > int(x2)  # forward: finger right-to-left


def test_swipe_refused_on_a_denylisted_list() -> None:
    from cmbuyer.agent.errors import PaymentControlBlocked
    from cmbuyer.agent.phone.adapter import PhoneAdapter

    rec = _ShellRecorder()
    # a tile of the list changed to carry a payment word
    dump, lst = _lipstick_list(xml("sheet_lipstick").replace('text="豆沙色#520"', 'text="去支付"', 1))
    with pytest.raises(PaymentControlBlocked):
        PhoneAdapter("x", rec, None).swipe_in_list(dump, lst, forward=False)
    assert rec.calls == []
