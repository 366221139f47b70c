"""Dump parsing, normalization, money, safety readers, packs and inspect on fixtures."""

from __future__ import annotations

import copy
import json
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cmbuyer.agent.authoring.inspect import inspect_dump
from cmbuyer.agent.cli import main
from cmbuyer.agent.errors import DumpEmpty, DumpInvalid, DumpNoAppNodes, MoneyAmbiguous, MoneyError, PackError
from cmbuyer.agent.pack.compile import compile_pack
from cmbuyer.agent.screens import safety
from cmbuyer.agent.screens.dump import parse_dump
from cmbuyer.agent.screens.text import money_str, normalize, single_price
from tests.agent.packtools import shipped_packs

FX = Path(__file__).parents[1] / "fixtures"


def load(name: str):
    return parse_dump((FX / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "xml,err",
    [
        ("", DumpEmpty),
        ('<?xml version="1.0"?>\r\n<hierarchy rotation="0" />', DumpEmpty),
        ("<hierarchy><node text='a'", DumpInvalid),
        ('<!DOCTYPE x [<!ENTITY a "aaaa">]><hierarchy>&a;</hierarchy>', DumpInvalid),
        ("<root/>", DumpInvalid),
        ('<hierarchy><node bounds="[0,0][1,x]"/></hierarchy>', DumpInvalid),
    ],
)
def test_bad_dumps(xml: str, err: type) -> None:
    with pytest.raises(err):
        parse_dump(xml)


def test_system_only_dump_has_no_app_nodes() -> None:
    with pytest.raises(DumpNoAppNodes):
        load("real/system_only.xml").require_app()


def test_huge_and_deep_dumps_refused() -> None:
    with pytest.raises(DumpInvalid):
        parse_dump("<hierarchy>" + "<node>" * 300 + "</node>" * 300 + "</hierarchy>")
    with pytest.raises(DumpInvalid):
        parse_dump(b"<hierarchy>" + b" " * (9 * 1024 * 1024) + b"</hierarchy>")


@pytest.mark.parametrize(
    "text,value",
    [
        ("¥269", "269.00"),
        ("￥12.88", "12.88"),
        ("最后3件 ¥269", "269.00"),
        ("提交订单 ¥25.76", "25.76"),
        ("¥ 12.8", "12.80"),
        ("已售5.2万件 ¥0.5", "0.50"),
    ],
)
def test_single_price(text: str, value: str) -> None:
    assert money_str(single_price(text)) == value


def test_two_prices_are_ambiguous() -> None:
    with pytest.raises(MoneyAmbiguous):
        single_price("¥12.88 ¥19.90")


@pytest.mark.parametrize("text", ["无价格", "¥12.888", "¥1,234", "¥012", "¥"])
def test_price_errors(text: str) -> None:
    with pytest.raises(MoneyError):
        single_price(text)


@pytest.mark.serial  # Hypothesis' default 200 ms deadline per example
@given(st.decimals(min_value=Decimal("0.01"), max_value=Decimal("999999"), places=2))
def test_price_roundtrip(value: Decimal) -> None:
    assert single_price(f"￥{value}") == value
    assert single_price(f"最后2件 ¥{value}") == value


def test_normalization_is_nfkc_only() -> None:
    assert normalize("黑色CHA（纯棉）") == "黑色CHA(纯棉)"
    assert normalize("【流砂限定】") != normalize("[流砂限定]")  # NFKC does not unify brackets
    assert normalize("Ｍ") == "M" and normalize("a  b") == "a  b"


def test_payment_denylist_covers_node_ancestors_and_point() -> None:
    dump = load("real/confirm_order.xml")
    pay_row = next(n for n in dump.app_nodes() if n.text == "微信支付")
    target = pay_row.clickable_self_or_ancestor()
    assert safety.tap_denial(dump, target, target.bounds.center) is not None
    dialog = load("real/leave_order_dialog.xml")
    cont = next(n for n in dialog.app_nodes() if n.text == "继续支付").clickable_self_or_ancestor()
    assert safety.tap_denial(dialog, cont, cont.bounds.center) is not None
    leave = next(n for n in dialog.app_nodes() if n.text == "先去逛逛")
    assert safety.tap_denial(dialog, leave, leave.bounds.center) is None


def test_risk_walls_ignore_system_ui() -> None:
    assert safety.risk_walls(load("real/confirm_order.xml")) == []  # SMS 验证码 in system UI
    assert "拖动滑块" in safety.risk_walls(load("real/security_challenge.xml"))


EXPECTED = {
    "real/confirm_order.xml": (
        "confirm_order",
        {
            "unit_price": "269.00",
            "quantity": 1,
            "confirm_amount": "269.00",
            "selected": {"款式": "【流砂限定】经典款"},
            "submit_controls": 1,
        },
    ),
    "real/sku_panel.xml": (
        "sku_panel",
        {"unit_price": "12.88", "quantity": 2, "selected": {"颜色": "黑色CHA(纯棉)", "尺码": "M(建议100-115)"}},
    ),
    "real/product.xml": ("product", {"submit_controls": 0}),
    "real/leave_order_dialog.xml": ("leave_order_dialog", {"payment_controls": ["继续支付", ",仅¥59"]}),
    "real/security_challenge.xml": ("security_challenge", {}),
    "real/system_only.xml": ("unknown", {}),
    "sim/product.xml": ("product", {}),
    "sim/sku_panel.xml": (
        "sku_panel",
        {"unit_price": "12.88", "quantity": 2, "selected": {"颜色": "黑色CHA(纯棉)", "尺码": "M(建议100-115)"}},
    ),
    "sim/confirm_order.xml": (
        "confirm_order",
        {"unit_price": "12.88", "quantity": 2, "confirm_amount": "25.76", "submit_controls": 1},
    ),
    "sim/order_created.xml": ("order_created", {"submit_controls": 0}),
    "sim/leave_order_dialog.xml": ("leave_order_dialog", {}),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_inspect_readings(name: str) -> None:
    screen, readings = EXPECTED[name]
    out = inspect_dump(load(name), shipped_packs())
    assert out["screen"] == screen
    for key, value in readings.items():
        assert out["readings"][key] == value, key
    assert set(out["readings"]) == {
        "goods_id",
        "unit_price",
        "quantity",
        "confirm_amount",
        "selected",
        "options",
        "sold_out",
        "submit_controls",
        "payment_controls",
        "risk_walls",
        "payment_mode",
        "payment_problems",
    }


def test_inspect_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--dump", str(FX / "real/confirm_order.xml")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pack"] == "pdd-8.17.0-81700" and out["readings"]["confirm_amount"] == "269.00"
    assert main(["inspect", "--dump", str(FX / "nope.xml")]) == 2


def test_shipped_packs_valid() -> None:
    """Both shipped packs load (evidence re-hashed: tests/agent/pack/test_evidence.py covers the files)."""
    pack, newer = shipped_packs()
    assert (pack.version_name, pack.version_code) == ("8.17.0", 81700)
    assert (newer.version_name, newer.version_code) == ("8.22.0", 82200)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda p: p["app"].update(version_code="81700"),
        lambda p: p["controls"]["submit"].pop("evidence"),
        lambda p: p["controls"]["submit"].update(evidence=["no-such-bundle"]),
        lambda p: p["readers"]["confirm_order"]["amount"].update(regex="提交订单 (\\d+)"),
        lambda p: p.update(recognition_order=["product", "nonexistent"]),
    ],
)
def test_broken_packs_refused(mutate) -> None:
    raw = copy.deepcopy(shipped_packs()[0].raw)
    mutate(raw)
    with pytest.raises(PackError):
        compile_pack(raw)
