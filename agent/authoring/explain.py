"""``cmbuyer-agent inspect --explain``: which pack selector matched which node, or why none did (docs/agent.md
"Proving a pack on captures").

Nothing here decides a reading. The screen comes from :func:`readers.recognize` and the values from
:func:`inspect.inspect_dump` — the same code the agent runs; this module only re-runs the pack's
compiled selectors with the :meth:`Selector.failed_constraints` tracing hook (the very tests
:meth:`Selector.matches` runs) and names each selector by its JSON path in the pack
(``readers.confirm_order.unit_price.selector``) with its spec (``evidence`` lists dropped).

Output (``explain_dump``)::

    {"pack", "version", "screen", "layout", "risk_walls": [term],
     "screens": [{"screen", "path", "matches": bool, "winner": bool,
                  "all": [selector], "none": [selector]}],
     "reader": "readers.<screen>"|null,
     "readings": [{"reading", "value", "selectors": [selector], "why_null"?: {header: reason}}]}
    selector = {"path", "spec", "declared": bool, "match_count", "matched": [node],
                "value_regex"?: str, "closest"?: [{"node": node, "failed": [reason]}]}
    node = {"order", "bounds": [l,t,r,b], "class", "text", "desc", "resource_id"}

Bounded: at most :data:`MAX_MATCHED` matched nodes and :data:`MAX_CLOSEST` closest candidates per
selector, texts cut at :data:`MAX_TEXT` characters. The closest candidates of a selector that matched
nothing are the app nodes failing the fewest constraints (a failed text/desc/resource-id or structure
constraint counts double; ties go to the node whose texts are nearest the selector's patterns), each
with every constraint it failed and why.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from cmbuyer.agent.authoring.inspect import inspect_dump
from cmbuyer.agent.errors import AgentError
from cmbuyer.agent.screens import readers, safety
from cmbuyer.agent.screens.dump import Dump, Node
from cmbuyer.agent.screens.packmodel import Pack, PanelReader, Selector
from cmbuyer.agent.screens.text import normalize

MAX_MATCHED = 5
MAX_CLOSEST = 3
MAX_TEXT = 60
# Failing these counts double when ranking near misses: text/desc/resource-id name the node the author
# meant and the structure says where it sits; a class or flag difference is a smaller miss.
_STRUCTURE = frozenset({"parent", "ancestor", "has_descendant", "not_has_descendant", "common_ancestor"})
_HEAVY = frozenset({"text", "desc", "resource_id", *_STRUCTURE})
STRUCTURE_SHORTLIST = 50


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def node_json(node: Node) -> dict[str, Any]:
    """The parts of a node a person uses to find it on the screenshot (texts cut to MAX_TEXT)."""
    b = node.bounds
    return {
        "order": node.order,
        "bounds": [b.left, b.top, b.right, b.bottom],
        "class": node.cls,
        "text": _cut(node.text),
        "desc": _cut(node.desc),
        "resource_id": node.resource_id,
    }


def _spec_at(raw: Any, path: tuple[str | int, ...]) -> Any:
    for key in path:
        try:
            raw = raw[key]
        except (KeyError, IndexError, TypeError):
            return None
    return raw


def _without_evidence(spec: Any) -> Any:
    if isinstance(spec, dict):
        return {k: _without_evidence(v) for k, v in spec.items() if k != "evidence"}
    if isinstance(spec, list):
        return [_without_evidence(v) for v in spec]
    return spec


def path_str(path: tuple[str | int, ...]) -> str:
    """``("readers", "confirm_order", "group_terminators", 0)`` → ``readers.confirm_order.group_terminators[0]``."""
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out


def describe_failure(selector: Selector, name: str, node: Node, depth: int = 0) -> str:
    """Why ``node`` fails the constraint ``name`` of ``selector`` (one short phrase)."""
    if name in ("text", "desc"):
        pattern = selector.text if name == "text" else selector.desc
        value = normalize(node.text if name == "text" else node.desc)
        assert pattern is not None
        return f"{name} regex {pattern.pattern!r} did not full-match {_cut(value)!r}"
    if name == "class":
        assert selector.cls is not None
        return f"class {node.cls!r} differs from {selector.cls.pattern!r}"
    if name == "resource_id":
        return f"resource-id {node.resource_id!r} is not {selector.resource_id!r}"
    if name in ("clickable", "selected", "enabled", "scrollable"):
        return f"{name} is {str(getattr(node, name)).lower()}, wanted {str(getattr(selector, name)).lower()}"
    if name == "parent":
        sub = selector.parent
        if node.parent is None or sub is None:
            return "parent constraint failed: the node has no parent"
        reasons = [describe_failure(sub, n, node.parent, depth + 1) for n in sub.failed_constraints(node.parent)]
        return (
            f"parent constraint failed (parent #{node.parent.order}: {'; '.join(reasons)})"
            if depth < 2
            else "parent constraint failed"
        )
    if name == "ancestor":
        return "ancestor constraint failed: no ancestor matches it"
    if name == "has_descendant":
        return "has_descendant constraint failed: no descendant matches it"
    if name == "not_has_descendant":
        sub = selector.not_has_descendant
        hit = next((d for d in node.descendants() if sub is not None and sub.matches(d)), None)
        return f"not_has_descendant constraint failed: descendant #{hit.order if hit is not None else '?'} matches it"
    if name == "common_ancestor":
        common = selector.common_ancestor
        anc = common.nearest(node) if common is not None else None
        if common is None or anc is None:
            return "common_ancestor constraint failed: no ancestor holds a node matching its 'with'"
        assert common.is_ is not None  # holds() only fails on 'is' once an ancestor is found
        reasons = [describe_failure(common.is_, n, anc, depth + 1) for n in common.is_.failed_constraints(anc)]
        why = "; ".join(reasons)
        return f"common_ancestor constraint failed: the nearest common ancestor #{anc.order} fails 'is' ({why})"
    return f"{name} constraint failed"


def _similarity(selector: Selector, failed: list[str], node: Node) -> float:
    """How near the node's failed text/desc/resource-id are to what the selector asks (0..1 per
    field, difflib ratio against the pattern source): ranks nodes that fail the same constraints."""
    score = 0.0
    for name, wanted, value in (
        ("text", selector.text, node.text),
        ("desc", selector.desc, node.desc),
        ("resource_id", selector.resource_id, node.resource_id),
    ):
        if name in failed and value:
            source = wanted.pattern if isinstance(wanted, re.Pattern) else str(wanted)
            score += difflib.SequenceMatcher(None, source, normalize(value)).ratio()
    return score


def _weight(failed: list[str]) -> int:
    return sum(2 if name in _HEAVY else 1 for name in failed)


def _closest(dump: Dump, selector: Selector, limit: int) -> list[dict[str, Any]]:
    """The ``limit`` nearest misses. Structure constraints walk whole subtrees, so they are tested only
    on the :data:`STRUCTURE_SHORTLIST` nodes nearest on the node's own constraints (a dump of 20 000
    nodes stays a matter of seconds); every listed failure still comes from the selector's own tests."""
    own = [(name, test) for name, test in selector.constraints if name not in _STRUCTURE]
    first = []
    for node in dump.app_nodes():
        failed = [name for name, test in own if not test(node)]
        first.append((_weight(failed), -_similarity(selector, failed, node), node.order, node))
    first.sort(key=lambda item: item[:3])
    scored = []
    for *_, node in first[:STRUCTURE_SHORTLIST]:
        failed = selector.failed_constraints(node)
        scored.append((_weight(failed), -_similarity(selector, failed, node), node.order, node, failed))
    scored.sort(key=lambda item: item[:3])
    return [
        {"node": node_json(node), "failed": [describe_failure(selector, name, node) for name in failed]}
        for *_, node, failed in scored[:limit]
    ]


def explain_selector(
    dump: Dump,
    pack: Pack,
    selector: Selector | None,
    path: tuple[str | int, ...],
    value_regex: re.Pattern[str] | None = None,
    closest: int = MAX_CLOSEST,
) -> dict[str, Any]:
    """One selector: its path and spec, the nodes it matched, or its ``closest`` nearest candidates."""
    out: dict[str, Any] = {
        "path": path_str(path),
        "spec": _without_evidence(_spec_at(pack.raw, path)),
        "declared": selector is not None,
        "match_count": 0,
        "matched": [],
    }
    if selector is None:
        return out
    matched = selector.find(dump)
    out["match_count"] = len(matched)
    out["matched"] = [node_json(n) for n in matched[:MAX_MATCHED]]
    if value_regex is not None:
        out["value_regex"] = value_regex.pattern
        for view, node in zip(out["matched"], matched, strict=False):
            view["value_regex_full_match"] = [
                label
                for label, raw in (("text", node.text), ("desc", node.desc))
                if raw and value_regex.fullmatch(normalize(raw)) is not None
            ]
    if not matched:
        out["closest"] = _closest(dump, selector, closest)
    return out


def _reading_selectors(dump: Dump, pack: Pack, screen: str, reader: PanelReader) -> dict[str, list[dict[str, Any]]]:
    base: tuple[str | int, ...] = ("readers", screen)

    def sel(
        key: tuple[str | int, ...], selector: Selector | None, regex: re.Pattern[str] | None = None
    ) -> dict[str, Any]:
        return explain_selector(dump, pack, selector, base + key, regex)

    options = [sel(("dimension_header",), reader.dimension_header), sel(("option_tile",), reader.option_tile)]
    options += [sel(("group_terminators", i), t) for i, t in enumerate(reader.group_terminators)]
    if reader.tile_name.name_child is not None:
        options.append(sel(("tile_name", "name_child"), reader.tile_name.name_child))
    goods = reader.goods_id
    return {
        "goods_id": [sel(("goods_id", "selector"), goods[0] if goods else None, goods[1] if goods else None)],
        "unit_price": [
            sel(
                ("unit_price", "selector"),
                reader.unit_price.selector if reader.unit_price else None,
                reader.unit_price.regex if reader.unit_price else None,
            )
        ],
        "quantity": [sel(("quantity",), reader.quantity)],
        "confirm_amount": [
            sel(
                ("amount", "selector"),
                reader.amount.selector if reader.amount else None,
                reader.amount.regex if reader.amount else None,
            )
        ],
        "options": options,
        # selected = the selected option tiles (see options) witnessed by the 已选 label
        "selected": [sel(("sku_label",), reader.sku_label)],
    }


def _why_selected_null(dump: Dump, reader: PanelReader) -> dict[str, str]:
    """``{header: why its selected reading is null}`` for every null one (readers.selected_with_reasons)."""
    try:
        reasons = readers.selected_with_reasons(dump, reader)
    except AgentError as exc:  # the groups themselves are unreadable (a header twice)
        return {"*": f"the option groups are unreadable: {exc}"}
    return {dim: why for dim, (value, why) in reasons.items() if value is None and why is not None}


def explain_dump(dump: Dump, pack: Pack) -> dict[str, Any]:
    """Explain how ``pack`` reads ``dump`` (shape: module docstring)."""
    result = inspect_dump(dump, [pack])
    screen = readers.recognize(dump, pack)
    winner = next((s for s in pack.recognition_order if pack.screens[s].matches(dump)), None)
    # once a screen is recognized the other rules' near misses are noise: one candidate each
    near = MAX_CLOSEST if screen == "unknown" else 1
    screens = []
    for name in pack.recognition_order:
        rule = pack.screens[name]
        screens.append(
            {
                "screen": name,
                "path": path_str(("screens", name)),
                "matches": rule.matches(dump),
                "winner": name == screen and name == winner,
                "all": [
                    explain_selector(dump, pack, s, ("screens", name, "all", i), closest=near)
                    for i, s in enumerate(rule.all)
                ],
                "none": [
                    explain_selector(dump, pack, s, ("screens", name, "none", i), closest=near)
                    for i, s in enumerate(rule.none)
                ],
            }
        )
    reader = readers.reader_for(pack, screen)
    readings: list[dict[str, Any]] = []
    if reader is not None:
        for key, selectors in _reading_selectors(dump, pack, screen, reader).items():
            entry: dict[str, Any] = {"reading": key, "value": result["readings"][key], "selectors": selectors}
            if key == "selected":
                entry["why_null"] = _why_selected_null(dump, reader)
            readings.append(entry)
    if screen == "confirm_order":
        row = explain_selector(dump, pack, pack.payment.row, ("payment", "row"), pack.payment.mode_regex)
        readings.append(
            {
                "reading": "payment_mode",
                "value": result["readings"]["payment_mode"],
                "problems": result["readings"]["payment_problems"],
                "selectors": [row],
            }
        )
    return {
        "pack": pack.id,
        "version": f"{pack.version_name} ({pack.version_code})",
        "screen": screen,
        "layout": result["layout"],
        "risk_walls": safety.risk_walls(dump),
        "screens": screens,
        "reader": path_str(("readers", screen)) if reader is not None else None,
        "readings": readings,
    }


def _node_line(node: dict[str, Any]) -> str:
    left, top, right, bottom = node["bounds"]
    parts = [f"#{node['order']} [{left},{top}][{right},{bottom}] {node['class'].rsplit('.', 1)[-1]}"]
    for key, label in (("text", "text"), ("desc", "desc"), ("resource_id", "id")):
        if node[key]:
            parts.append(f"{label} {json.dumps(node[key], ensure_ascii=False)}")
    if node.get("value_regex_full_match") is not None:
        hits = node["value_regex_full_match"]
        parts.append(f"(value regex full-matches {', '.join(hits)})" if hits else "(value regex does NOT full-match)")
    return " ".join(parts)


def _selector_lines(sel: dict[str, Any], indent: str, label: str = "") -> list[str]:
    spec = json.dumps(sel["spec"], ensure_ascii=False, separators=(",", ":"))
    if not sel["declared"]:
        return [f"{indent}{label}{sel['path']}: not declared in the pack"]
    lines = [f"{indent}{label}{sel['path']} {spec}"]
    if sel.get("value_regex"):
        lines.append(f"{indent}  value regex {sel['value_regex']!r}")
    if sel["matched"]:
        more = sel["match_count"] - len(sel["matched"])
        lines += [f"{indent}  matched {_node_line(n)}" for n in sel["matched"]]
        if more:
            lines.append(f"{indent}  … and {more} more")
        return lines
    if not sel.get("closest"):
        return [*lines, f"{indent}  matched no node (the dump has no node of the app package)"]
    lines.append(f"{indent}  matched no node; closest:")
    for cand in sel.get("closest", []):
        lines.append(f"{indent}    {_node_line(cand['node'])}")
        lines += [f"{indent}      - {reason}" for reason in cand["failed"]]
    return lines


def render_text(explanation: dict[str, Any]) -> str:
    """The human-readable form of :func:`explain_dump`'s result."""
    e = explanation
    lines = [f"识别包 {e['pack']}（{e['version']}）：画面 {e['screen']}，布局 {e['layout']}"]
    if e["risk_walls"]:
        lines.append(f"画面上有风控拦截（优先于所有规则）：{', '.join(e['risk_walls'])}")
    lines.append("画面规则，按识别顺序（第一个匹配的生效）：")
    for rule in e["screens"]:
        verdict = (
            "匹配，已识别 (MATCH)"
            if rule["winner"]
            else ("也匹配，但前面的规则已生效" if rule["matches"] else "不匹配")
        )
        lines.append(f"  {rule['path']}: {verdict}")
        for sel in rule["all"]:
            lines += _selector_lines(sel, "    ", "all: ")
        for sel in rule["none"]:
            if sel["matched"]:
                lines += _selector_lines(sel, "    ", "none (blocks the rule): ")
    if e["reader"] is None:
        lines.append(f"读数：识别包没有画面 {e['screen']} 的读取规则")
    else:
        lines.append(f"读数（{e['reader']}）：")
    for reading in e["readings"]:
        value = json.dumps(reading["value"], ensure_ascii=False)
        lines.append(f"  {reading['reading']} = {value}")
        for dim, why in reading.get("why_null", {}).items():
            lines.append(f"    {dim} 为空：{why}")
        if reading.get("problems"):
            lines.append(f"    问题：{'; '.join(reading['problems'])}")
        for sel in reading["selectors"]:
            lines += _selector_lines(sel, "    ")
    return "\n".join(lines)
