"""The view tree shared by the XML renderer, the PNG renderer and the tap hit-test.

A :class:`Node` mirrors one ``<node>`` of a uiautomator2 dump plus two private fields
the real phone does not expose: ``action`` (what a tap on it does to the app model)
and ``role`` (a stable tag such as ``"submit"`` used by the journal assertions).
Bounds are screen pixels ``(left, top, right, bottom)``, right/bottom exclusive.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

PDD = "com.xunmeng.pinduoduo"
OBF_ID = f"{PDD}:id/pdd"  # the one obfuscated id almost every node of the real app carries

Bounds = tuple[int, int, int, int]


@dataclass
class Node:
    """One accessibility node; ``children`` are drawn in order (later = on top)."""

    cls: str
    bounds: Bounds
    text: str = ""
    rid: str = ""
    desc: str = ""
    package: str = PDD
    clickable: bool = False
    enabled: bool = True
    focusable: bool = False
    focused: bool = False
    scrollable: bool = False
    long_clickable: bool = False
    checkable: bool = False
    checked: bool = False
    password: bool = False
    selected: bool = False
    visible: bool = True
    naf: bool = False  # uiautomator's NAF="true": a clickable node with no label (real captures have them)
    hint: str = ""
    children: list[Node] = field(default_factory=list)
    # the dump's ``drawing-order`` (place in the parent's drawing, later = on top); None = the place in
    # ``children`` (the simulator draws its own screens in list order)
    drawing_order: int | None = None
    # private to the simulator, never rendered:
    action: tuple[Any, ...] | None = None
    role: str = ""
    style: str = ""  # rendering hint for the PNG painter ("button", "scrim", "tile" ...)

    def add(self, *nodes: Node) -> Node:
        self.children.extend(nodes)
        return self

    def walk(self) -> Iterator[Node]:
        """Pre-order traversal, self first."""
        yield self
        for child in self.children:
            yield from child.walk()

    def contains(self, x: int, y: int) -> bool:
        left, top, right, bottom = self.bounds
        return left <= x < right and top <= y < bottom

    @property
    def center(self) -> tuple[int, int]:
        left, top, right, bottom = self.bounds
        return (left + right) // 2, (top + bottom) // 2

    def summary(self) -> dict[str, Any]:
        """Short JSON-able description used in journal entries."""
        return {
            "class": self.cls,
            "text": self.text,
            "content-desc": self.desc,
            "resource-id": self.rid,
            "package": self.package,
            "clickable": self.clickable,
            "bounds": list(self.bounds),
            "role": self.role,
            "texts": [t for n in self.walk() for t in (n.text, n.desc) if t][:8],
        }


def drawn_last_first(children: list[Node]) -> list[Node]:
    """``children`` from the one drawn last (on top) to the one drawn first: by ``drawing_order``
    (a node without one counts its place in the list, 1-based, as the simulator renders it), ties
    broken by document order (later first)."""
    keyed = [(c.drawing_order if c.drawing_order is not None else i + 1, i) for i, c in enumerate(children)]
    return [children[i] for _, i in sorted(keyed, reverse=True)]


def hit_path(root: Node, x: int, y: int) -> list[Node]:
    """Path root→deepest topmost node containing (x, y); empty when outside ``root``.

    Siblings drawn later are tested first because they are on top (dialogs, sheets, scrims are
    appended after the page content; a parsed dump says so with ``drawing-order``).
    """
    if not root.contains(x, y) or not root.visible:
        return []
    for child in drawn_last_first(root.children):
        sub = hit_path(child, x, y)
        if sub:
            return [root, *sub]
    return [root]


def clickable_target(path: list[Node]) -> Node | None:
    """The node Android would deliver the click to: the deepest clickable node on the path."""
    for node in reversed(path):
        if node.clickable and node.enabled:
            return node
    return None


# --- small builders so screen code stays readable -------------------------------------------


def option_tile(selected: bool, action: tuple[str, ...]) -> dict[str, Any]:
    """Builder keywords every option tile has (sku-sheet, order-sheet text or image tile): a focusable
    clickable ``option`` drawn as a ``tile``, ``selected`` when it is the current choice, ``action`` its tap."""
    return {
        "clickable": True,
        "focusable": True,
        "selected": selected,
        "action": action,
        "role": "option",
        "style": "tile",
    }


def frame(bounds: Bounds, *children: Node, **kw: Any) -> Node:
    return Node("android.widget.FrameLayout", bounds, rid=kw.pop("rid", OBF_ID), children=list(children), **kw)


def linear(bounds: Bounds, *children: Node, **kw: Any) -> Node:
    return Node("android.widget.LinearLayout", bounds, rid=kw.pop("rid", OBF_ID), children=list(children), **kw)


def group(bounds: Bounds, *children: Node, **kw: Any) -> Node:
    return Node("android.view.ViewGroup", bounds, rid=kw.pop("rid", ""), children=list(children), **kw)


def text(bounds: Bounds, value: str, **kw: Any) -> Node:
    return Node("android.widget.TextView", bounds, text=value, rid=kw.pop("rid", OBF_ID), **kw)


def image(bounds: Bounds, desc: str = "", **kw: Any) -> Node:
    return Node("android.widget.ImageView", bounds, desc=desc, rid=kw.pop("rid", OBF_ID), **kw)


def edit(bounds: Bounds, value: str, **kw: Any) -> Node:
    return Node(
        "android.widget.EditText",
        bounds,
        text=value,
        rid=kw.pop("rid", OBF_ID),
        focusable=True,
        clickable=True,
        long_clickable=True,
        **kw,
    )


def text_width(s: str, cjk: int = 36, latin: int = 20) -> int:
    """Rough rendered width of a label in pixels (CJK glyphs are about twice as wide)."""
    return sum(cjk if ord(ch) >= 0x2E80 else latin for ch in s)


def header(title: str = "") -> list[Node]:
    """An app page's top row: the 返回 button and, when given, the page title."""
    nodes = [image((24, 114, 120, 210), "返回", clickable=True, action=("back",))]
    if title:
        nodes.append(text((390, 126, 690, 198), title))
    return nodes
