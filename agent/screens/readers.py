"""Screen recognition and readers driven by a selector pack (design §7.4/§7.5, spec 002 §三).

These are pure functions over a parsed :class:`Dump`. They never tap and never import the submit
or permit modules (checked by tests/agent/test_isolation.py).

Shapes:
- :func:`recognize` → screen id (``"product"``, ``"sku_panel"``, … or ``"unknown"``).
- :func:`read_options` → ``{dimension: [OptionTile]}`` where dimension is the NFKC header text.
- :func:`read_money` → ``Decimal`` or None; more than one distinct candidate → MoneyAmbiguous.
- :func:`read_quantity` → ``int`` or None; more than one candidate → ScreenError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal

from cmbuyer.agent.errors import MoneyAmbiguous, ScreenError
from cmbuyer.agent.screens import safety
from cmbuyer.agent.screens.dump import Dump, Node
from cmbuyer.agent.screens.pack import MoneyReader, Pack, PanelReader
from cmbuyer.agent.screens.text import match_amount, normalize

SCREENS = ("product", "sku_panel", "confirm_order", "order_created", "payment",
           "security_challenge", "leave_order_dialog")
_QUANTITY_RE = re.compile(r"[1-9][0-9]{0,3}", re.ASCII)


@dataclass(frozen=True)
class OptionTile:
    """One SKU option tile. ``text`` is NFKC-normalized (compared), ``raw`` kept as evidence;
    ``tap`` is the node a tap should hit (the tile itself or its clickable ancestor)."""

    dimension: str
    text: str
    raw: str
    selected: bool
    enabled: bool
    # Nodes differ per dump; stable-read comparisons use the fields above plus bounds.
    node: Node = field(compare=False)
    tap: Node = field(compare=False)
    bounds: tuple[int, int, int, int] = (0, 0, 0, 0)


def recognize(dump: Dump, pack: Pack) -> str:
    """First screen in the pack's recognition order whose anchors match; risk walls win over any
    pack screen (phone-facts: stop and report, never solve)."""
    if safety.risk_walls(dump):
        return "security_challenge"
    for screen in pack.recognition_order:
        if pack.screens[screen].matches(dump):
            return screen
    return "unknown"


def _tile_text(tile: Node) -> tuple[str, Node] | None:
    """The tile's own text, else its only non-empty text descendant; None when zero or several."""
    if tile.text.strip():
        return tile.text, tile
    texts = [d for d in tile.descendants() if d.text.strip()]
    if len(texts) != 1:
        return None
    return texts[0].text, texts[0]


def read_options(dump: Dump, reader: PanelReader) -> dict[str, list[OptionTile]]:
    """Group option tiles under the dimension header that precedes them in document order, up to
    the next header or terminator. A tile whose label cannot be read unambiguously raises
    ScreenError(SKU_AMBIGUOUS): no guessing which text is the option."""
    if reader.dimension_header is None or reader.option_tile is None:
        return {}
    app = dump.app_nodes()
    headers = {n.order for n in reader.dimension_header.find(dump)}
    terminators = {n.order for t in reader.group_terminators for n in t.find(dump)}
    tiles = {n.order for n in reader.option_tile.find(dump)}
    groups: dict[str, list[OptionTile]] = {}
    current: str | None = None
    for node in app:
        if node.order in headers:
            current = normalize(node.text or node.desc)
            if current in groups:
                raise ScreenError("the same option header appears twice", "SKU_AMBIGUOUS")
            groups[current] = []
            continue
        if node.order in terminators:
            current = None
            continue
        if node.order in tiles and current is not None:
            label = _tile_text(node)
            if label is None:
                raise ScreenError("an option tile has no single label", "SKU_AMBIGUOUS")
            raw, text_node = label
            groups[current].append(OptionTile(
                dimension=current,
                text=normalize(raw),
                raw=raw,
                selected=node.selected or text_node.selected,
                enabled=node.enabled,
                node=node,
                tap=node.clickable_self_or_ancestor() or node,
                bounds=(node.bounds.left, node.bounds.top, node.bounds.right, node.bounds.bottom),
            ))
    return groups


def read_money(dump: Dump, reader: MoneyReader | None) -> Decimal | None:
    """Amount from the nodes the reader selects; None when no node matches the selector+regex.
    Several matching nodes agreeing on one value (e.g. text node + desc twin) give that value;
    differing values → MoneyAmbiguous (no "closest price")."""
    if reader is None:
        return None
    values: set[Decimal] = set()
    for node in reader.selector.find(dump):
        for label in (node.text, node.desc):
            if not label:
                continue
            value = match_amount(reader.regex, label)
            if value is not None:
                values.add(value)
    if len(values) > 1:
        raise MoneyAmbiguous("several different amounts for one reading")
    return next(iter(values), None)


def read_quantity(dump: Dump, reader: PanelReader) -> int | None:
    """Integer shown by the quantity field (an EditText on the real app); several → ScreenError."""
    if reader.quantity is None:
        return None
    values = {normalize(n.text).strip() for n in reader.quantity.find(dump)}
    values.discard("")
    if not values:
        return None
    if len(values) > 1:
        raise ScreenError("several quantity fields", "QUANTITY_MISMATCH")
    value = values.pop()
    if _QUANTITY_RE.fullmatch(value) is None:
        raise ScreenError("quantity field is not a plain number", "QUANTITY_MISMATCH")
    return int(value)


def read_goods_id(dump: Dump, reader: PanelReader) -> str | None:
    if reader.goods_id is None:
        return None
    selector, regex = reader.goods_id
    found = set()
    for node in selector.find(dump):
        m = regex.fullmatch(normalize(node.text or node.desc))
        if m is not None:
            found.add(m.group("goods_id"))
    if len(found) > 1:
        raise ScreenError("several goods ids on screen", "WRONG_GOODS")
    return next(iter(found), None)


def selected_values(groups: dict[str, list[OptionTile]]) -> dict[str, str]:
    """``{dimension: text}`` for dimensions with exactly one selected tile."""
    out: dict[str, str] = {}
    for dim, tiles in groups.items():
        chosen = [t for t in tiles if t.selected]
        if len(chosen) == 1:
            out[dim] = chosen[0].text
    return out


def reader_for(pack: Pack, screen: str) -> PanelReader | None:
    return pack.readers.get(screen)
