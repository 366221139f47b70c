"""``cmbuyer-agent inspect --explain`` through the real CLI on the simulator captures in
tests/agent/fixtures/sim822 and on copies changed in the test (each says what it changed), plus the
proof that the tracing hook agrees with :meth:`Selector.matches` on every pack selector and dump."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.agent.cli import main
from cmbuyer.agent.screens.dump import parse_dump
from cmbuyer.agent.screens.packmodel import Pack, Selector
from tests.agent.packtools import shipped_packs

FX = Path(__file__).parents[1] / "fixtures"
VERSION = "8.22.0:82200"


def _explain(capsys: pytest.CaptureFixture[str], dump: Path, *extra: str) -> Any:
    rc = main(["inspect", "--dump", str(dump), "--version", VERSION, "--explain", *extra])
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out) if "--json" in extra else out


def _reading(explanation: dict[str, Any], key: str) -> dict[str, Any]:
    return next(r for r in explanation["readings"] if r["reading"] == key)


def _changed(tmp_path: Path, pattern: str, replacement: str, name: str = "sheet_tshirt") -> Path:
    text = (FX / "sim822" / f"{name}.xml").read_text("utf-8")
    changed, n = re.subn(pattern, replacement, text)
    assert n == 1, f"{pattern} matched {n} times"
    path = tmp_path / f"{name}-changed.xml"
    path.write_text(changed, "utf-8")
    return path


def _node_with_text(path: Path, text: str) -> Any:
    return next(n for n in parse_dump(path.read_bytes()).nodes if n.text == text)


def test_names_the_selector_and_node_behind_the_unit_price(capsys: pytest.CaptureFixture[str]) -> None:
    dump = FX / "sim822" / "sheet_tshirt.xml"
    report = _explain(capsys, dump, "--json")
    [e] = report["explanations"]
    assert (e["pack"], e["screen"], e["layout"]) == ("pdd-8.22.0-82200", "confirm_order", "order_sheet")
    price = _reading(e, "unit_price")
    assert price["value"] == "29.90" == report["inspect"]["readings"]["unit_price"]
    [sel] = price["selectors"]
    assert sel["path"] == "readers.confirm_order.unit_price.selector"
    assert sel["spec"] == {
        "class": "android.widget.TextView",
        "text": ".*¥.*",
        "common_ancestor": {
            "with": {"desc": "商品主图"},
            "is": {"not_has_descendant": {"clickable": True, "has_descendant": {"text": ".+"}}},
        },
    }  # the pack's spec, evidence dropped
    node = _node_with_text(dump, "最后5件 ¥29.9")
    b = node.bounds
    assert sel["match_count"] == 1
    assert sel["matched"] == [
        {
            "order": node.order,
            "bounds": [b.left, b.top, b.right, b.bottom],
            "class": "android.widget.TextView",
            "text": "最后5件 ¥29.9",
            "desc": "",
            "resource_id": node.resource_id,
            "value_regex_full_match": ["text"],
        }
    ]
    # the human form says the same in one line
    text = _explain(capsys, dump)
    assert "readers.confirm_order.unit_price.selector {" in text
    assert f'matched #{node.order} [{b.left},{b.top}][{b.right},{b.bottom}] TextView text "最后5件 ¥29.9"' in text
    assert 'unit_price = "29.90"' in text


def test_every_path_points_at_the_spec_in_the_pack(capsys: pytest.CaptureFixture[str]) -> None:
    report = _explain(capsys, FX / "sim822" / "sheet_mug.xml", "--json")
    [e] = report["explanations"]
    raw = json.loads((Path(__file__).parents[3] / "agent" / "packs" / "pdd-8.22.0-82200.json").read_text("utf-8"))
    selectors = [s for rule in e["screens"] for s in rule["all"] + rule["none"]]
    selectors += [s for r in e["readings"] for s in r["selectors"]]
    assert len(selectors) > 15
    for sel in selectors:
        node: Any = raw
        for part in re.findall(r"[^.\[\]]+|\[\d+\]", sel["path"]):
            node = node[int(part[1:-1])] if part.startswith("[") else node.get(part) if sel["declared"] else None
            if node is None:
                break
        if sel["declared"]:
            assert _strip(node) == sel["spec"], sel["path"]
        else:
            assert sel["spec"] is None and sel["path"] == "readers.confirm_order.goods_id.selector"


def _strip(spec: Any) -> Any:
    if isinstance(spec, dict):
        return {k: _strip(v) for k, v in spec.items() if k != "evidence"}
    return [_strip(v) for v in spec] if isinstance(spec, list) else spec


def test_screen_rules_in_recognition_order(capsys: pytest.CaptureFixture[str]) -> None:
    [e] = _explain(capsys, FX / "sim822" / "sheet_tshirt.xml", "--json")["explanations"]
    verdicts = {r["screen"]: (r["matches"], r["winner"]) for r in e["screens"]}
    assert verdicts["confirm_order"] == (True, True)
    assert verdicts["product"] == (False, False)  # the sheet is a window of its own (real captures)
    assert verdicts["sku_panel"] == (False, False)
    sku = next(r for r in e["screens"] if r["screen"] == "sku_panel")
    confirm_button = sku["all"][1]
    assert confirm_button["path"] == "screens.sku_panel.all[1]" and confirm_button["match_count"] == 0
    assert len(confirm_button["closest"]) == 1  # bounded once a screen is recognized
    blocked = next(r for r in e["screens"] if r["screen"] == "order_created")["none"][0]
    assert blocked["path"] == "screens.order_created.none[0]" and blocked["matched"][0]["text"] == "提交订单 ¥29.9"
    text = _explain(capsys, FX / "sim822" / "sheet_tshirt.xml")
    assert "screens.confirm_order: 匹配，已识别 (MATCH)" in text
    assert "screens.product: 不匹配" in text
    assert "none (blocks the rule): screens.order_created.none[0]" in text


def test_class_changed_names_the_failed_constraint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The price node's class changed from TextView to Button: the reading is null and the closest
    candidate is that node, failing only the class constraint."""
    dump = _changed(
        tmp_path,
        r'(text="最后5件 ¥29.9" resource-id="[^"]*" class=")android.widget.TextView',
        r"\1android.widget.Button",
    )
    [e] = _explain(capsys, dump, "--json")["explanations"]
    price = _reading(e, "unit_price")
    assert price["value"] is None
    [sel] = price["selectors"]
    assert sel["match_count"] == 0 and sel["matched"] == []
    first = sel["closest"][0]
    assert first["node"]["text"] == "最后5件 ¥29.9" and first["node"]["class"] == "android.widget.Button"
    assert first["failed"] == ["class 'android.widget.Button' differs from 'android.widget.TextView'"]
    text = _explain(capsys, dump)
    assert "matched no node; closest:" in text
    assert "- class 'android.widget.Button' differs from 'android.widget.TextView'" in text


def test_text_regex_and_common_ancestor_constraints_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The price written as ``29.9元`` (no ¥): the text regex fails on that node; other ¥ texts on the
    page (the submit label) fail the common_ancestor constraint, whose nearest common ancestor and its
    own failing part are named."""
    dump = _changed(tmp_path, 'text="最后5件 ¥29.9"', 'text="最后5件 29.9元"')
    [e] = _explain(capsys, dump, "--json")["explanations"]
    [sel] = _reading(e, "unit_price")["selectors"]
    reasons = {c["node"]["text"]: c["failed"] for c in sel["closest"]}
    assert reasons["最后5件 29.9元"] == ["text regex '.*¥.*' did not full-match '最后5件 29.9元'"]
    failures = [f for failed in reasons.values() for f in failed if f.startswith("common_ancestor")]
    assert failures and all(
        re.fullmatch(
            r"common_ancestor constraint failed: the nearest common ancestor #\d+ fails 'is' "
            r"\(not_has_descendant constraint failed: descendant #\d+ matches it\)",
            f,
        )
        for f in failures
    )


def test_missing_anchor_is_explained(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The goods image's desc renamed: the confirm_order rule no longer matches (nothing else does: the
    sheet is a window of its own); its second anchor matched nothing, and the renamed node is the
    nearest candidate with the failed desc regex."""
    dump = _changed(tmp_path, 'content-desc="商品主图"', 'content-desc="商品主图片"')
    report = _explain(capsys, dump, "--json")
    [e] = report["explanations"]
    assert e["screen"] == "unknown" == report["inspect"]["screen"]
    rule = next(r for r in e["screens"] if r["screen"] == "confirm_order")
    assert (rule["matches"], rule["all"][0]["match_count"]) == (False, 1)
    anchor = rule["all"][1]
    assert anchor["path"] == "screens.confirm_order.all[1]" and anchor["match_count"] == 0
    assert anchor["closest"][0]["node"]["desc"] == "商品主图片"
    assert anchor["closest"][0]["failed"] == ["desc regex '商品主图' did not full-match '商品主图片'"]
    text = _explain(capsys, dump)
    assert "screens.confirm_order: 不匹配" in text
    assert "- desc regex '商品主图' did not full-match '商品主图片'" in text


def test_unrecognized_dump_lists_more_candidates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The product page with its buy buttons renamed (a new version's wording): no rule recognizes it;
    each rule shows up to three near misses — the product rule's first is the renamed button — and
    there is no reader to explain."""
    dump = _changed(tmp_path, 'text="单独购买"', 'text="单独买"', name="product")
    dump.write_text(dump.read_text("utf-8").replace('text="发起拼单"', 'text="拼单"'), "utf-8")
    report = _explain(capsys, dump, "--json")
    [e] = report["explanations"]
    assert e["screen"] == "unknown" and e["readings"] == [] and e["reader"] is None
    assert all(len(s["closest"]) == 3 for r in e["screens"] for s in r["all"] if s["match_count"] == 0)
    product = next(r for r in e["screens"] if r["screen"] == "product")["all"][0]
    assert product["closest"][0]["node"]["text"] in ("单独买", "拼单")
    wanted = "text regex '单独购买|免拼购买|立即购买|发起拼单|去拼单|参与拼单' did not full-match"
    assert product["closest"][0]["failed"][0].startswith(wanted)
    assert "读数：识别包没有画面 unknown 的读取规则" in _explain(capsys, dump)


def test_payment_row_and_value_regex(capsys: pytest.CaptureFixture[str]) -> None:
    [e] = _explain(capsys, FX / "sim822" / "sheet_paylater.xml", "--json")["explanations"]
    pay = _reading(e, "payment_mode")
    assert pay["value"] == "使用#先用后付,更换支付方式"
    assert "先用后付 on the sheet" in pay["problems"]
    [row] = pay["selectors"]
    assert row["path"] == "payment.row" and row["matched"][0]["value_regex_full_match"] == ["text"]


def test_bad_input_stays_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--dump", str(tmp_path / "none.xml"), "--explain"]) == 2
    assert json.loads(capsys.readouterr().out)["error"] == "UNREADABLE_FILE"
    (tmp_path / "bad.xml").write_text("<hierarchy>", "utf-8")
    assert (
        main(
            [
                "inspect",
                "--dump",
                str(tmp_path / "bad.xml"),
                "--explain",
                "--pack",
                str(Path(__file__).parents[3] / "agent" / "packs" / "pdd-8.22.0-82200.json"),
            ]
        )
        == 2
    )
    assert json.loads(capsys.readouterr().out)["error"] == "DUMP_INVALID"


# --- the tracing hook never disagrees with matching ---------------------------------------------------


def _selectors(sel: Selector) -> Iterator[Selector]:
    yield sel
    for sub in (sel.parent, sel.ancestor, sel.has_descendant, sel.not_has_descendant):
        if sub is not None:
            yield from _selectors(sub)


def _pack_selectors(pack: Pack) -> Iterator[Selector]:
    tops: list[Selector | None] = [s for rule in pack.screens.values() for s in (*rule.all, *rule.none)]
    for reader in pack.readers.values():
        tops += [
            reader.dimension_header,
            reader.option_tile,
            reader.quantity,
            reader.sku_label,
            reader.tile_name.name_child,
            *reader.group_terminators,
            reader.unit_price.selector if reader.unit_price else None,
            reader.amount.selector if reader.amount else None,
            reader.goods_id[0] if reader.goods_id else None,
        ]
    tops += [pack.payment.row, *pack.controls.values(), *pack.buy_paths.values()]
    for top in tops:
        if top is not None:
            yield from _selectors(top)


@pytest.mark.parametrize("pack", shipped_packs(), ids=lambda p: p.id)
def test_failed_constraints_agrees_with_matches(pack: Pack) -> None:
    dumps = [
        parse_dump(p.read_bytes()) for folder in ("sim822", "sim", "real") for p in sorted((FX / folder).glob("*.xml"))
    ]
    checked = 0
    for dump in dumps:
        for sel in _pack_selectors(pack):
            for node in dump.nodes:
                failed = sel.failed_constraints(node)
                assert (not failed) == sel.matches(node)
                assert set(failed) <= {name for name, _ in sel.constraints}
                checked += 1
    assert checked > 10_000
