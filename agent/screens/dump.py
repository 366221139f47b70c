"""Parse a uiautomator2 hierarchy dump into an immutable node tree (docs/architecture.md "Agent").

Input: the XML string ``dumpWindowHierarchy`` returns (``<hierarchy rotation>`` → nested ``<node>``).
Output: :class:`Dump` with every node in document order, each knowing its parent chain and bounds.

Every failure is a :class:`~cmbuyer.agent.errors.DumpError` (never another exception: the parser is
fuzzed with Hypothesis in tests/agent/screens/test_dump_fuzz.py). Failures are typed (never "element absent"):
- :class:`DumpEmpty`     — empty string or a hierarchy with no nodes (uiautomator2's fallback
  ``<hierarchy rotation="0" />`` after three empty dumps);
- :class:`DumpInvalid`   — unparsable XML, any ``<!DOCTYPE``/``<!ENTITY`` (entity expansion is refused
  outright), more than :data:`MAX_DUMP_BYTES` / :data:`MAX_NODES` / :data:`MAX_DEPTH`, a root other
  than ``hierarchy``, malformed ``bounds``, text that is not valid Unicode (unpaired UTF-16
  surrogates: the on-device serializer splits emoji), and a hierarchy of a single
  node (a long-uptime serializer glitch, never a real screen: reporting it as "no app node" would
  blame the phone's foreground app instead of the dump);
- :class:`DumpNoAppNodes` — raised by :meth:`Dump.require_app` when no node belongs to the app package.
"""

from __future__ import annotations

import functools
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from cmbuyer.agent.errors import DumpEmpty, DumpInvalid, DumpNoAppNodes

APP_PACKAGE = "com.xunmeng.pinduoduo"
T = TypeVar("T")
MAX_DUMP_BYTES = 8 * 1024 * 1024
MAX_NODES = 20_000
MAX_DEPTH = 200

_BOUNDS_RE = re.compile(r"\[(-?\d{1,6}),(-?\d{1,6})\]\[(-?\d{1,6}),(-?\d{1,6})\]", re.ASCII)
_DRAWING_ORDER_RE = re.compile(r"[0-9]{1,6}", re.ASCII)
_FORBIDDEN_RE = re.compile(r"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)
_SURROGATE_RE = re.compile("[\ud800-\udfff]")  # a str from JSON may hold them; UTF-8 cannot


@dataclass(frozen=True)
class Bounds:
    """Screen rectangle in pixels, ``[left,top][right,bottom]`` as uiautomator2 writes it."""

    left: int
    top: int
    right: int
    bottom: int

    @property
    def center(self) -> tuple[int, int]:
        return ((self.left + self.right) // 2, (self.top + self.bottom) // 2)

    @property
    def empty(self) -> bool:
        return self.right <= self.left or self.bottom <= self.top

    def contains(self, x: int, y: int) -> bool:
        return self.left <= x < self.right and self.top <= y < self.bottom


@dataclass(eq=False)
class Node:
    """One ``<node>``. ``text``/``desc`` are the raw strings (evidence); readers normalize them.

    ``parent`` is None for top-level window roots; ``order`` is the document-order index.
    """

    order: int
    depth: int
    text: str
    desc: str
    cls: str
    package: str
    resource_id: str
    clickable: bool
    selected: bool
    checked: bool
    enabled: bool
    focused: bool
    bounds: Bounds
    scrollable: bool = False
    # ``drawing-order``: the view's place in its parent's drawing (later = on top), relative to its
    # siblings only; None when the dump has no such attribute (or not a plain integer)
    drawing_order: int | None = None
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)

    def ancestors(self) -> Iterator[Node]:
        """Parent, grandparent, … up to the window root."""
        node = self.parent
        while node is not None:
            yield node
            node = node.parent

    def descendants(self) -> Iterator[Node]:
        """All nodes below this one, in document order (iterative: depth is capped anyway)."""
        stack = list(reversed(self.children))
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def window(self) -> Node:
        """The root of this node's window (a top-level child of ``<hierarchy>``)."""
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def clickable_self_or_ancestor(self) -> Node | None:
        """The node a finger should hit for this node: itself if clickable, else the nearest
        clickable ancestor (text nodes are often not clickable, their parent is)."""
        if self.clickable:
            return self
        for anc in self.ancestors():
            if anc.clickable:
                return anc
        return None

    def signature(self) -> tuple[object, ...]:
        """Everything a reader could depend on; two dumps agree when signatures agree."""
        return (
            self.text,
            self.desc,
            self.cls,
            self.package,
            self.clickable,
            self.selected,
            self.checked,
            self.enabled,
            self.bounds,
            self.scrollable,
            self.drawing_order,
        )

    def __repr__(self) -> str:  # short: dumps may hold personal data, keep reprs small
        return f"<Node #{self.order} {self.cls} clickable={self.clickable}>"


@dataclass
class Dump:
    """A parsed dump. ``nodes`` is every node in document order; ``app_package`` scopes queries."""

    nodes: list[Node]
    app_package: str = APP_PACKAGE
    rotation: str = "0"
    # results computed from this dump by a long-lived object (a pack's selector): id(owner) → (owner, value);
    # the owner is held, so its id cannot be reused while the dump lives (see :meth:`remember`)
    _remembered: dict[int, tuple[object, Any]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def app_nodes(self) -> list[Node]:
        """Nodes of the app package only (system UI / launcher are ignored)."""
        return [n for n in self.nodes if n.package == self.app_package]

    def require_app(self) -> Dump:
        if not any(n.package == self.app_package for n in self.nodes):
            raise DumpNoAppNodes("no node of the app package in the dump")
        return self

    def packages(self) -> set[str]:
        return {n.package for n in self.nodes}

    def twin(self) -> Dump:
        """Another Dump of the same text: the same nodes and remembered results, a different identity."""
        twin = Dump(nodes=self.nodes, app_package=self.app_package, rotation=self.rotation)
        twin._remembered = self._remembered
        return twin

    def remember(self, owner: object, compute: Callable[[], T]) -> T:
        """``compute()`` the first time ``owner`` asks about this dump, the same value after. A dump is
        never changed after parsing and equal dump texts share one Dump (:func:`parse_dump`), so the readers
        and gates that look at one screen find each selector's nodes once; ``compute`` must depend on
        nothing but the dump and ``owner``, and callers must not change the value."""
        entry = self._remembered.get(id(owner))
        if entry is None or entry[0] is not owner:
            entry = (owner, compute())
            self._remembered[id(owner)] = entry
        value: T = entry[1]
        return value


def _parse_bounds(raw: str) -> Bounds:
    m = _BOUNDS_RE.fullmatch(raw)
    if m is None:
        raise DumpInvalid("malformed bounds attribute")
    left, top, right, bottom = (int(g) for g in m.groups())
    return Bounds(left, top, right, bottom)


def _flag(attrs: dict[str, str], name: str) -> bool:
    return attrs.get(name, "false") == "true"


def _drawing_order(raw: str | None) -> int | None:
    if raw is None or _DRAWING_ORDER_RE.fullmatch(raw) is None:
        return None
    return int(raw)


# Recently parsed dumps by (text, app package). The two equal dumps of a stable read, and the windows dump
# a gate screenshot takes of a screen that has not changed, are the same text: they share one parse.
# Small: only consecutive reads of one screen repeat. The key holds the text, so a hit is an equal dump.
PARSE_CACHE_SIZE = 4


def parse_dump(xml: str | bytes, app_package: str = APP_PACKAGE) -> Dump:
    """Parse and validate a dump. Does *not* require app nodes (``inspect`` shows any dump);
    phone code calls :meth:`Dump.require_app`. Raises DumpEmpty / DumpInvalid.

    Equal texts share one parse while it is among the last :data:`PARSE_CACHE_SIZE` (:func:`parse_cache_info`):
    each call gives a Dump of its own (the adapter tells its dumps apart by identity — which dump a
    screenshot was taken after) over the same nodes and the same remembered results (:meth:`Dump.remember`);
    a Dump's nodes are never changed after parsing, so sharing them is safe. Failures are not remembered
    (each bad dump is parsed, and refused, again)."""
    if isinstance(xml, bytes):
        if len(xml) > MAX_DUMP_BYTES:
            raise DumpInvalid("dump larger than the cap")
        try:
            xml = xml.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DumpInvalid("dump is not UTF-8") from exc
    if not isinstance(xml, str):
        raise DumpInvalid("dump is not text")
    if len(xml) > MAX_DUMP_BYTES:
        raise DumpInvalid("dump larger than the cap")
    return _parse_text(xml, app_package).twin()


def parse_cache_info() -> functools._CacheInfo:
    """Hits, misses and size of the parse cache of :func:`parse_dump` (tests, diagnostics)."""
    return _parse_text.cache_info()


@functools.lru_cache(maxsize=PARSE_CACHE_SIZE)
def _parse_text(xml: str, app_package: str) -> Dump:
    if _SURROGATE_RE.search(xml):
        # The JSON-RPC answer may carry lone surrogates (JSON "\\ud83c" escapes of a split emoji);
        # expat would raise UnicodeEncodeError out of the parser. A dump we cannot read is a stop.
        raise DumpInvalid("dump text is not valid Unicode (unpaired surrogate)")
    if not xml.strip():
        raise DumpEmpty("empty dump")
    if _FORBIDDEN_RE.search(xml):
        raise DumpInvalid("dump declares a DTD or entity")
    try:
        root = ET.fromstring(xml)  # noqa: S314 - no DTD possible (checked above), size capped
    except (ET.ParseError, ValueError, RecursionError) as exc:
        # ValueError: e.g. an XML declaration naming an encoding expat cannot switch to mid-string.
        raise DumpInvalid("dump is not well-formed XML") from exc
    if root.tag != "hierarchy":
        raise DumpInvalid("dump root is not <hierarchy>")

    nodes: list[Node] = []
    # Iterative walk: (element, parent Node, depth).
    stack: list[tuple[ET.Element, Node | None, int]] = [(el, None, 1) for el in reversed(list(root))]
    while stack:
        el, parent, depth = stack.pop()
        if el.tag != "node":
            raise DumpInvalid("unexpected element in dump")
        if depth > MAX_DEPTH:
            raise DumpInvalid("dump nested too deep")
        if len(nodes) >= MAX_NODES:
            raise DumpInvalid("dump has too many nodes")
        a = el.attrib
        node = Node(
            order=len(nodes),
            depth=depth,
            text=a.get("text", ""),
            desc=a.get("content-desc", ""),
            cls=a.get("class", ""),
            package=a.get("package", ""),
            resource_id=a.get("resource-id", ""),
            clickable=_flag(a, "clickable"),
            selected=_flag(a, "selected"),
            checked=_flag(a, "checked"),
            enabled=a.get("enabled", "true") == "true",
            focused=_flag(a, "focused"),
            bounds=_parse_bounds(a.get("bounds", "[0,0][0,0]")),
            scrollable=_flag(a, "scrollable"),
            drawing_order=_drawing_order(a.get("drawing-order")),
            parent=parent,
        )
        if parent is not None:
            parent.children.append(node)
        nodes.append(node)
        stack.extend((child, node, depth + 1) for child in reversed(list(el)))
    if not nodes:
        raise DumpEmpty("hierarchy has no nodes")
    if len(nodes) == 1:
        raise DumpInvalid("dump has a single node only")
    return Dump(nodes=nodes, app_package=app_package, rotation=root.attrib.get("rotation", "0"))
