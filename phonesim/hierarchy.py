"""Serialise the view tree as uiautomator2's ``dumpWindowHierarchy`` XML, and the dump faults.

Attribute order and formatting follow what the on-device server of uiautomator2 3.x
produces: ``index text resource-id class package content-desc checkable
checked clickable enabled focusable focused scrollable long-clickable password selected
visible-to-user bounds drawing-order hint display-id``.
"""

from __future__ import annotations

from .nodes import Node

XML_HEAD = "<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>\r\n"
EMPTY_DUMP = XML_HEAD + '<hierarchy rotation="0" />'

_ESC = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "\n": "&#10;", "\r": "&#13;", "\t": "&#9;"}


# the boolean attributes of a dump node, in dump order, and the Node field each one shows
# (session.py reads a recorded dump back with the same table)
XML_FLAGS = {
    "checkable": "checkable",
    "checked": "checked",
    "clickable": "clickable",
    "enabled": "enabled",
    "focusable": "focusable",
    "focused": "focused",
    "scrollable": "scrollable",
    "long-clickable": "long_clickable",
    "password": "password",
    "selected": "selected",
    "visible-to-user": "visible",
}


def _esc(value: str) -> str:
    return "".join(_ESC.get(ch, ch) for ch in value)


def _b(flag: bool) -> str:
    return "true" if flag else "false"


def _node_xml(node: Node, index: int, drawing_order: int, depth: int, max_depth: int, out: list[str]) -> None:
    left, top, right, bottom = node.bounds
    flags = " ".join(f'{key}="{_b(getattr(node, attr))}"' for key, attr in XML_FLAGS.items())
    attrs = (
        ('NAF="true" ' if node.naf else "")
        + f'index="{index}" text="{_esc(node.text)}" resource-id="{_esc(node.rid)}" class="{_esc(node.cls)}" '
        f'package="{_esc(node.package)}" content-desc="{_esc(node.desc)}" {flags} '
        f'bounds="[{left},{top}][{right},{bottom}]" drawing-order="{drawing_order}" hint="{_esc(node.hint)}" '
        f'display-id="0"'
    )
    children = node.children if depth < max_depth else []
    if not children:
        out.append(f"<node {attrs} />")
        return
    out.append(f"<node {attrs}>")
    for i, child in enumerate(children):
        order = child.drawing_order if child.drawing_order is not None else i + 1
        _node_xml(child, i, order, depth + 1, max_depth, out)
    out.append("</node>")


def render_xml(windows: list[Node], max_depth: int = 50) -> str:
    """The full dump for these window roots (topmost first). ``max_depth`` as the RPC param."""
    if not windows:
        return EMPTY_DUMP
    out = [XML_HEAD, '<hierarchy rotation="0">']
    for root in windows:
        _node_xml(root, 0, 0, 1, max(1, max_depth), out)
    out.append("</hierarchy>")
    return "".join(out)


def cut_depth(node: Node, keep: int) -> Node:
    """A copy of ``node`` without anything deeper than ``keep`` levels (a partial tree)."""
    return Node(**{**node.__dict__, "children": [cut_depth(c, keep - 1) for c in node.children] if keep > 1 else []})


def single_node_dump() -> str:
    """What a phone with a long uptime sometimes returns: one bare node and nothing else."""
    return (
        XML_HEAD + '<hierarchy rotation="0"><node index="0" text="" resource-id="" '
        'class="android.widget.FrameLayout" package="com.android.systemui" content-desc="" '
        'checkable="false" checked="false" clickable="false" enabled="true" focusable="false" '
        'focused="false" scrollable="false" long-clickable="false" password="false" selected="false" '
        'visible-to-user="true" bounds="[0,0][1080,2400]" drawing-order="0" hint="" display-id="0" />'
        "</hierarchy>"
    )


def malform(xml: str) -> str:
    """Truncate mid-element, as the serializer does when it dies while writing."""
    cut = max(len(XML_HEAD) + 40, int(len(xml) * 0.6))
    return xml[:cut]


def break_emoji(xml: str) -> str:
    """Replace every astral character by its lone high surrogate (a UTF-16 serializer split it)."""
    out = []
    for ch in xml:
        cp = ord(ch)
        out.append(chr(0xD800 + ((cp - 0x10000) >> 10)) if cp > 0xFFFF else ch)
    return "".join(out)
