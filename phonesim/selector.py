"""uiautomator2 ``Selector`` matching for the selector RPCs (``objInfo``, ``setText`` …).

Implements the UiSelector fields uiautomator2 sends (text*, className*, description*,
booleans, packageName*, resourceId*, index, instance) and ``child``/``sibling`` chains.
Java's ``matches()`` is a full match, hence ``re.fullmatch``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .nodes import Node

_BOOL = {
    "checkable": "checkable",
    "checked": "checked",
    "clickable": "clickable",
    "longClickable": "long_clickable",
    "scrollable": "scrollable",
    "enabled": "enabled",
    "focusable": "focusable",
    "focused": "focused",
    "selected": "selected",
}


def _full(pattern: str, value: str) -> bool:
    try:
        return re.fullmatch(pattern, value, re.S) is not None
    except re.error:
        return False


def _matches(node: Node, index: int, sel: dict[str, Any]) -> bool:
    checks: dict[str, Callable[[Any], bool]] = {
        "text": lambda v: node.text == v,
        "textContains": lambda v: v in node.text,
        "textMatches": lambda v: _full(v, node.text),
        "textStartsWith": lambda v: node.text.startswith(v),
        "className": lambda v: node.cls == v,
        "classNameMatches": lambda v: _full(v, node.cls),
        "description": lambda v: node.desc == v,
        "descriptionContains": lambda v: v in node.desc,
        "descriptionMatches": lambda v: _full(v, node.desc),
        "descriptionStartsWith": lambda v: node.desc.startswith(v),
        "packageName": lambda v: node.package == v,
        "packageNameMatches": lambda v: _full(v, node.package),
        "resourceId": lambda v: node.rid == v,
        "resourceIdMatches": lambda v: _full(v, node.rid),
        "index": lambda v: index == int(v),
    }
    for key, value in sel.items():
        if key in checks:
            if not checks[key](value):
                return False
        elif key in _BOOL and bool(getattr(node, _BOOL[key])) != bool(value):
            return False
    return True


def _candidates(roots: list[Node]) -> list[tuple[Node, int, Node | None]]:
    """(node, index among siblings, parent) for every node, windows in dump order."""
    out: list[tuple[Node, int, Node | None]] = []

    def visit(node: Node, index: int, parent: Node | None) -> None:
        out.append((node, index, parent))
        for i, child in enumerate(node.children):
            visit(child, i, node)

    for root in roots:
        visit(root, 0, None)
    return out


def _plain(sel: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in sel.items() if k not in ("mask", "childOrSibling", "childOrSiblingSelector", "instance")}


def find_all(roots: list[Node], sel: dict[str, Any]) -> list[Node]:
    """All nodes matching a serialized uiautomator2 Selector (before ``instance``)."""
    found = [n for n, i, _ in _candidates(roots) if _matches(n, i, _plain(sel))]
    for kind, sub in zip(sel.get("childOrSibling") or [], sel.get("childOrSiblingSelector") or [], strict=False):
        nxt: list[Node] = []
        for base in found:
            if kind == "child":
                scope = [base]
            else:  # sibling: anything under the same parent
                parents = [p for n, _, p in _candidates(roots) if n is base and p is not None]
                scope = parents[:1]
            for n, i, _ in _candidates(scope):
                if n is not base and _matches(n, i, _plain(sub)) and n not in nxt:
                    nxt.append(n)
        if "instance" in sub:
            k = int(sub["instance"])
            nxt = nxt[k : k + 1]
        found = nxt
    return found


def find(roots: list[Node], sel: dict[str, Any]) -> Node | None:
    found = find_all(roots, sel)
    k = int(sel.get("instance", 0) or 0)
    return found[k] if 0 <= k < len(found) else None


def obj_info(node: Node) -> dict[str, Any]:
    """The dict uiautomator2's ``UiObject.info`` returns."""
    left, top, right, bottom = node.bounds
    bounds = {"bottom": bottom, "left": left, "right": right, "top": top}
    return {
        "bounds": bounds,
        "childCount": len(node.children),
        "className": node.cls,
        "contentDescription": node.desc or None,
        "packageName": node.package,
        "resourceName": node.rid or None,
        "text": node.text,
        "visibleBounds": dict(bounds),
        "checkable": node.checkable,
        "checked": node.checked,
        "clickable": node.clickable,
        "enabled": node.enabled,
        "focusable": node.focusable,
        "focused": node.focused,
        "longClickable": node.long_clickable,
        "scrollable": node.scrollable,
        "selected": node.selected,
    }
