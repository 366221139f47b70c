"""The shipped packs on the two real-structure order sheets (fixtures/real_structures/README.md).

Every reading the fixtures' README lists, through the same readers the flow runs (inspect, the gate-3
reading :func:`capabilities.confirm_reading`, the payment-mode reader); the readers' rules on hand-made
variants of the real text tile (where ``selected`` sits, stock badges, two texts in a wrapper); a
pack without the order-sheet layout stopping with its reason; the price regex of every shipped pack;
the pack's address block: exactly the address row, at any depth.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest

from cmbuyer.agent import capabilities as cap
from cmbuyer.agent import gates
from cmbuyer.agent.authoring.capture import scrub
from cmbuyer.agent.authoring.explain import explain_dump, render_text
from cmbuyer.agent.authoring.inspect import inspect_dump
from cmbuyer.agent.errors import FlowStop, MoneyAmbiguous
from cmbuyer.agent.pack.files import shipped_pack_dir
from cmbuyer.agent.screens import readers
from cmbuyer.agent.screens.dump import parse_dump
from cmbuyer.agent.screens.packmodel import Pack
from tests.agent.packtools import shipped_packs

REAL = Path(__file__).parents[1] / "fixtures" / "real_structures"
SHEET = "pdd-8.22.0-82200"
IMAGE_NAMES = [
    "雾霾蓝#M03+礼袋",
    "奶茶棕#M05 SOFT+礼袋",
    "樱桃红#R12+礼袋",
    "豆沙粉 PINK 07+礼袋",
    "焦糖橘#O2 限定+礼袋",
]
SCARF = "【冬季限定】羊绒围巾CAMEL 180cm"
ROW = "使用#微信支付,更换支付方式"  # NFKC of 使用#微信支付，更换支付方式, as inspect prints every label
# the README's table, as inspect prints it (money as canonical strings)
EXPECTED = {
    "order_sheet_image_tiles.xml": {
        "unit_price": "45.90",
        "quantity": 1,
        "confirm_amount": "45.90",
        "selected": {"色号": "雾霾蓝#M03+礼袋"},
        "options": {"色号": IMAGE_NAMES},
        "sold_out": {},
        "submit_controls": 1,
        "payment_controls": [ROW],
        "risk_walls": [],
        "payment_mode": ROW,
        "payment_problems": [],
    },
    "order_sheet_text_tile.xml": {
        "unit_price": "158.00",
        "quantity": 1,
        "confirm_amount": "158.00",
        "selected": {"款式": SCARF},
        "options": {"款式": [SCARF]},
        "sold_out": {},
        "submit_controls": 1,
        "payment_controls": ["用多多支付减3.20元", ROW],
        "risk_walls": [],
        "payment_mode": ROW,
        "payment_problems": [],
    },
}


def text(name: str) -> str:
    return (REAL / name).read_text("utf-8")


def packs() -> dict[str, Pack]:
    return {p.id: p for p in shipped_packs()}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_order_sheet_pack_gives_every_reading_of_the_readme(name: str) -> None:
    pack = packs()[SHEET]
    out = inspect_dump(parse_dump(text(name)), [pack])
    assert (out["screen"], out["pack"], out["layout"]) == ("confirm_order", SHEET, "order_sheet")
    assert out["readings"] == {"goods_id": None, **EXPECTED[name]}
    # the payment-mode gate's reader: one row, the mode 微信支付, nothing unsafe
    payment = readers.read_payment(parse_dump(text(name)), pack)
    assert (payment.row, payment.mode, payment.problems) == ("使用#微信支付，更换支付方式", "微信支付", ())


def test_inspect_says_how_a_task_may_name_each_option_group() -> None:
    """The pack's alias table shown by ``inspect``: the header as shown and its synonyms."""
    out = inspect_dump(parse_dump(text("order_sheet_image_tiles.xml")), [packs()[SHEET]])
    (header,) = out["readings"]["options"]
    assert out["dimension_names"] == {header: list(packs()[SHEET].aliases_of(header))}
    assert "颜色" in out["dimension_names"][header] and header in out["dimension_names"][header]


@pytest.mark.parametrize(
    ("name", "wanted", "price"),
    [
        ("order_sheet_image_tiles.xml", {"颜色": "雾霾蓝#M03+礼袋"}, Decimal("45.9")),
        ("order_sheet_text_tile.xml", {"颜色": SCARF}, Decimal("158")),
    ],
)
def test_gate3_reading_of_the_real_sheet_passes_gate3(name: str, wanted: dict[str, str], price: Decimal) -> None:
    """The one gate-3 reading function (the flow's READ_CONFIRM_PAGE and any later re-read) on the real
    trees: every value present, and gate 3 passes for a task asking exactly that."""
    reading = cap.confirm_reading(parse_dump(text(name)), packs()[SHEET], wanted)
    assert reading.gate3 == gates.Gate3Reading(wanted, price, 1, price, 1)
    gates.gate3(reading.gate3, wanted=wanted, gate1_price=price, quantity=1, max_total=price)
    assert gates.payment_gate(reading.payment.problems, reading.payment.mode) == "微信支付"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_pack_declaring_the_order_sheet_recognizes_it_and_the_others_stop(name: str) -> None:
    dump = parse_dump(text(name))
    declaring = [p for p in shipped_packs() if any(lay.options_screen == "confirm_order" for lay in p.layouts)]
    others = [p for p in shipped_packs() if p not in declaring]
    assert declaring and others  # 8.22.0 declares it, 8.17.0 does not
    for pack in declaring:
        screen = readers.recognize(dump, pack)
        assert cap.layout_for_sheet(pack, screen, dump).id == "order_sheet", pack.id
    for pack in others:
        screen = readers.recognize(dump, pack)
        with pytest.raises(FlowStop) as err:
            cap.layout_for_sheet(pack, screen, dump)
        assert err.value.reason_code == "NO_SELECTOR_PACK" and "no order_sheet layout" in str(err.value), pack.id
        assert inspect_dump(dump, [pack])["layout"] is None  # never labelled as its sku_sheet
        # the same sheet recognized as a "SKU sheet" by a pack: the submit control on it stops too
        with pytest.raises(FlowStop) as err:
            cap.layout_for_sheet(pack, "sku_panel", dump)
        assert err.value.reason_code == "NO_SELECTOR_PACK"


@pytest.mark.parametrize("pack_id", ["pdd-8.17.0-81700", SHEET])
@pytest.mark.parametrize(
    ("label", "value"),
    [
        ("即将卖完 ¥88", "88"),
        ("最后4件 ¥45.9", "45.9"),
        ("最后2件 ¥158", "158"),
        ("仅剩3件 ¥12.80", "12.80"),
        ("¥29.9", "29.9"),
        ("即将卖完¥88", "88"),
        ("¥88起", None),  # anchored: anything after the amount is no price
        ("即将卖完 ¥88 ¥99", None),
        ("最后4件 45.9元", None),
        ("最后4件 ¥045.9", None),
    ],
)
def test_every_pack_price_regex_reads_stock_prefixed_prices(pack_id: str, label: str, value: str | None) -> None:
    for screen, reader in packs()[pack_id].readers.items():
        assert reader.unit_price is not None, screen
        m = reader.unit_price.regex.fullmatch(label)
        got = None if m is None else Decimal(m.group("amount"))
        assert got == (None if value is None else Decimal(value)), (screen, label)


def test_two_price_candidates_stop() -> None:
    price = packs()[SHEET].readers["confirm_order"].unit_price
    assert price is not None
    source = text("order_sheet_text_tile.xml")
    # a ¥ text outside the goods card (the address row) is not a candidate of the card-bound selector
    assert readers.read_money(parse_dump(source.replace('text="手动添加地址"', 'text="¥99"')), price) == Decimal("158")
    # a second price inside the card: two candidates → ambiguous, never a guess
    second = source.replace('text="已选: [冬季限定]羊绒围巾CAMEL 180cm"', 'text="¥99"')
    with pytest.raises(MoneyAmbiguous):
        readers.read_money(parse_dump(second), price)
    # the same price twice is one value
    same = source.replace('text="已选: [冬季限定]羊绒围巾CAMEL 180cm"', 'text="¥158"')
    assert readers.read_money(parse_dump(same), price) == Decimal("158")
    # a candidate that does not full-match the regex nulls the reading
    fused = source.replace('text="已选: [冬季限定]羊绒围巾CAMEL 180cm"', 'text="¥158已拼44件"')
    assert readers.read_money(parse_dump(fused), price) is None


# --- readers on variants of the real text tile -----------------------------------------------------
TILE = 'text="【冬季限定】羊绒围巾CAMEL 180cm"'


def _tile_variant(old: str, new: str) -> str:
    source = text("order_sheet_text_tile.xml")
    assert source.count(old) == 1, old
    return source.replace(old, new)


def _selected(xml: str) -> dict[str, str | None]:
    return inspect_dump(parse_dump(xml), [packs()[SHEET]])["readings"]["selected"]


def _name_node_flags(xml: str, selected: str) -> str:
    """The name TextView's line with its ``selected`` attribute set to ``selected``."""
    line = next(ln for ln in xml.splitlines() if TILE in ln)
    return xml.replace(line, line.replace('selected="true"', f'selected="{selected}"'))


def test_selected_on_the_name_node_or_the_tile_counts_and_nowhere_else() -> None:
    source = text("order_sheet_text_tile.xml")
    assert _selected(source) == {"款式": SCARF}  # on the name TextView only (the real capture)
    unflagged = _name_node_flags(source, "false")
    assert _selected(unflagged) == {"款式": None}
    # the flag on the wrapper (the tile itself) also counts
    wrapper = '<node index="0" text="" resource-id="" class="android.view.ViewGroup" package="com.xunmeng.pinduoduo"'
    line = next(ln for ln in unflagged.splitlines() if wrapper in ln and "[35,1104][718,1191]" in ln)
    assert _selected(unflagged.replace(line, line.replace('selected="false"', 'selected="true"'))) == {"款式": SCARF}
    # the flag on the stock badge is neither the tile nor its name node
    badge = next(ln for ln in unflagged.splitlines() if 'text="最后2件"' in ln)
    on_badge = unflagged.replace(badge, badge.replace('selected="false"', 'selected="true"'))
    assert _selected(on_badge) == {"款式": None}


def test_a_name_is_never_a_stock_badge_and_a_wrapper_with_two_texts_is_no_name() -> None:
    # the name TextView no longer clickable: the pack's name source (the one clickable TextView) is
    # gone, and the wrapper's two texts (name + 最后2件) are no name either → null, never the badge
    line = next(ln for ln in text("order_sheet_text_tile.xml").splitlines() if TILE in ln)
    xml = text("order_sheet_text_tile.xml").replace(line, line.replace('clickable="true"', 'clickable="false"'))
    out = inspect_dump(parse_dump(xml), [packs()[SHEET]])["readings"]
    assert out["options"] == {"款式": [None]} and out["selected"] == {"款式": None}
    # a name node that holds only a badge is no name
    badge_only = _tile_variant(TILE, 'text="最后2件"')
    assert inspect_dump(parse_dump(badge_only), [packs()[SHEET]])["readings"]["options"] == {"款式": [None]}
    assert readers.tile_name("最后2件") is None and readers.tile_name("即将卖完") is None
    assert readers.tile_name(" 雾霾蓝 最后2件") is None  # fused: never cut off
    assert readers.tile_name("  最后一件款 ") == "最后一件款"


def test_inspect_shows_sold_out_tiles() -> None:
    xml = text("order_sheet_image_tiles.xml").replace('text="最后9件"', 'text="刚刚抢光"')
    out = inspect_dump(parse_dump(xml), [packs()[SHEET]])["readings"]
    assert out["sold_out"] == {"色号": ["奶茶棕#M05 SOFT+礼袋"]}
    assert out["options"] == {"色号": IMAGE_NAMES}  # still offered by the app, shown as sold out


def test_explain_says_why_selected_is_null() -> None:
    pack = packs()[SHEET]
    unflagged = parse_dump(_name_node_flags(text("order_sheet_text_tile.xml"), "false"))
    explanation = explain_dump(unflagged, pack)
    [selected] = [r for r in explanation["readings"] if r["reading"] == "selected"]
    assert selected["value"] == {"款式": None}
    assert selected["why_null"] == {"款式": "no tile of 1 carries selected (neither a tile nor its name node)"}
    assert "款式 为空：no tile of 1 carries selected" in render_text(explanation)
    # a label that names another option: the label is the reason
    relabelled = parse_dump(text("order_sheet_text_tile.xml").replace("已选: [冬季限定]", "已选: [夏季限定]"))
    [selected] = [r for r in explain_dump(relabelled, pack)["readings"] if r["reading"] == "selected"]
    assert selected["why_null"]["款式"].startswith("the 已选 label")
    # the real sheets themselves: nothing is null, nothing to explain
    for name in EXPECTED:
        [selected] = [r for r in explain_dump(parse_dump(text(name)), pack)["readings"] if r["reading"] == "selected"]
        assert selected["why_null"] == {}


def test_fixtures_are_the_handed_over_files_and_the_packs_evidence() -> None:
    """The repository's copies are the evidence the 8.22.0 pack names (byte for byte)."""
    pack = packs()[SHEET]
    for eid, name in (
        ("real-sheet-image-tiles", "order_sheet_image_tiles.xml"),
        ("real-sheet-text-tile", "order_sheet_text_tile.xml"),
    ):
        entry = pack.raw["evidence"][eid]
        assert entry["source"] == "real-structure" and set(entry["files"]) == {"dump"}
        assert (shipped_pack_dir() / entry["files"]["dump"]["path"]).read_bytes() == (REAL / name).read_bytes()


def _one_level_deeper(xml: str, test: Callable[[ET.Element], bool]) -> str:
    """``xml`` with the one node passing ``test`` wrapped in a new plain LinearLayout (same bounds)."""
    root = ET.fromstring(xml)
    parents = {c: p for p in root.iter() for c in p}
    (node,) = [n for n in root.iter("node") if test(n)]
    parent = parents[node]
    wrapper = ET.Element("node", {**node.attrib, "text": "", "content-desc": "", "resource-id": ""})
    wrapper.set("class", "android.widget.LinearLayout")
    for flag in ("clickable", "selected", "focusable", "long-clickable", "checkable", "checked", "scrollable"):
        wrapper.set(flag, "false")
    parent.insert(list(parent).index(node), wrapper)
    parent.remove(node)
    wrapper.append(node)
    return ET.tostring(root, encoding="unicode")


DEEPER = {
    "price": lambda n: "¥" in (n.get("text") or "") and not (n.get("text") or "").startswith("提交订单"),
    "goods image": lambda n: n.get("content-desc") == "商品主图",
    "sku label": lambda n: (n.get("text") or "").startswith("已选"),
    "quantity": lambda n: n.get("class") == "android.widget.EditText",
    "payment text": lambda n: "更换支付方式" in (n.get("text") or ""),
    "submit text": lambda n: (n.get("text") or "").startswith("提交订单"),
    "header": lambda n: n.get("text") in ("款式", "色号"),
    "tile name": lambda n: n.get("text") in (SCARF, "雾霾蓝#M03+礼袋"),
    "tile": lambda n: (
        n.get("class") == "android.view.ViewGroup"
        and (n.get("content-desc") == "雾霾蓝#M03+礼袋" or any(c.get("text") == SCARF for c in n))
    ),
    "option list": lambda n: (
        n.get("class") == "android.support.v7.widget.RecyclerView" and n.get("bounds", "").startswith("[0,")
    ),
}


@pytest.mark.parametrize("what", sorted(DEEPER))
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_readings_do_not_depend_on_the_nesting_depth(name: str, what: str) -> None:
    """The same sheet with one more wrapper level around one node reads the same: the pack names
    relations that hold at any depth."""
    xml = text(name)
    deeper = _one_level_deeper(xml, DEEPER[what])
    out = inspect_dump(parse_dump(deeper), [packs()[SHEET]])
    assert (out["screen"], out["layout"]) == ("confirm_order", "order_sheet")
    assert out["readings"] == {"goods_id": None, **EXPECTED[name]}


# --- the address block on the real sheets ----------------------------------------------------
ADDRESS = "手动添加地址"
ADDRESS_DEEPER = {
    **DEEPER,
    "address row": lambda n: n.get("clickable") == "true" and n.get("bounds") == "[0,332][1080,470]",
    "address text": lambda n: n.get("text") == ADDRESS,
}
# a screenshot of the same 1080 px width for scrub(): the real captures come as dumps alone
SCREENSHOT = "evidence/pdd-8.22.0-82200/sim822-sheet-tshirt/screenshot.png"


@pytest.mark.parametrize("what", [None, *sorted(ADDRESS_DEEPER)])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_address_block_is_the_address_row_and_nothing_else(name: str, what: str | None) -> None:
    """The 8.22.0 pack's ``address_block`` finds exactly one node on each real sheet — the clickable
    row holding ``手动添加地址`` (its nearest clickable ancestor), not the goods card, the promotion or
    payment row, an option tile or the submit bar — also with one more wrapper level around any read
    node, the row or its text; a capture blanks that row only and every reading of the README stays."""
    pack = packs()[SHEET]
    xml = text(name) if what is None else _one_level_deeper(text(name), ADDRESS_DEEPER[what])
    dump = parse_dump(xml).require_app()
    (label,) = [n for n in dump.app_nodes() if n.text == ADDRESS]
    row = label.clickable_self_or_ancestor()
    assert row is not None and row.cls == "android.view.ViewGroup"
    assert pack.address_block is not None
    assert [b.order for b in pack.address_block.find(dump)] == [row.order]
    # the row holds the address text and its icons, nothing the readers read
    assert {v for n in (row, *row.descendants()) for v in (n.text, n.desc) if v} == {ADDRESS}
    done = scrub(xml, (shipped_pack_dir() / SCREENSHOT).read_bytes(), pack)
    assert done.report["address_blocks"] == 1 and done.report["screen"] == "confirm_order"
    assert ADDRESS not in done.xml
    b = row.bounds
    assert [b.left, b.top, b.right, b.bottom] in done.report["blacked_out"]
    assert inspect_dump(done.dump, [pack])["readings"] == {"goods_id": None, **EXPECTED[name]}
