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


# the UiSelector string fields: selector name, Node attribute, the match kinds uiautomator2 has for it
_STR_MATCH: dict[str, Callable[[str, Any], bool]] = {
    "": lambda s, v: s == v,
    "Contains": lambda s, v: v in s,
    "Matches": lambda s, v: _full(v, s),
    "StartsWith": lambda s, v: s.startswith(v),
}
_STR_SELECTORS: dict[str, tuple[str, Callable[[str, Any], bool]]] = {
    name + kind: (attr, _STR_MATCH[kind])
    for name, attr, kinds in (
        ("text", "text", ("", "Contains", "Matches", "StartsWith")),
        ("className", "cls", ("", "Matches")),
        ("description", "desc", ("", "Contains", "Matches", "StartsWith")),
        ("packageName", "package", ("", "Matches")),
        ("resourceId", "rid", ("", "Matches")),
    )
    for kind in kinds
}


def _matches(node: Node, index: int, sel: dict[str, Any]) -> bool:
    for key, value in sel.items():
        if key in _STR_SELECTORS:
            attr, match = _STR_SELECTORS[key]
            if not match(getattr(node, attr), value):
                return False
        elif key == "index":
            if index != int(value):
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
