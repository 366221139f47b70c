"""Screen recognition and readers driven by a selector pack (docs/architecture.md "Agent").

These are pure functions over a parsed :class:`Dump`. They never tap and never import the submit
or permit modules (checked by tests/agent/test_layers.py).

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
from cmbuyer.agent.screens.packmodel import MoneyReader, Pack, PanelReader
from cmbuyer.agent.screens.text import match_amount, normalize
from cmbuyer.schemas.text import normalize_sku

SCREENS = (
    "product",
    "sku_panel",
    "confirm_order",
    "order_created",
    "payment",
    "security_challenge",
    "leave_order_dialog",
)
_QUANTITY_RE = re.compile(r"[1-9][0-9]{0,3}", re.ASCII)


SOLD_OUT_WORDS: tuple[str, ...] = ("刚刚抢光", "已售罄", "该款式售罄", "已抢光", "售罄")
# Stock badges and status suffixes are never part of an option name.
_STATUS_RE = re.compile(r".*\s(?:最后[0-9]{1,4}件|仅剩[0-9]{1,4}件|即将卖完|" + "|".join(SOLD_OUT_WORDS) + r")")
# a stock badge or status word on its own: the badge TextView beside a name, never a name itself
_BADGE_RE = re.compile(r"(?:最后[0-9]{1,4}件|仅剩[0-9]{1,4}件|即将卖完|" + "|".join(SOLD_OUT_WORDS) + r")")
_LABEL_RE = re.compile(r"已选[:：]\s*(?P<names>.+)")


@dataclass(frozen=True)
class OptionTile:
    """One SKU option tile. ``text`` is the name in the comparison form (:func:`sku_name`: outer
    whitespace trimmed, then NFKC) or None when no declared source gives a readable name; ``raw`` is
    the source string (evidence); ``tap`` is the node a tap should hit. ``selected`` is True when the
    tile or the node its name was read from carries the flag (the real text tile flags its name).
    ``available`` is False for disabled tiles and for enabled tiles carrying a sold-out word (real
    sold-out tiles stay enabled)."""

    dimension: str
    text: str | None
    raw: str
    selected: bool
    enabled: bool
    # Nodes differ per dump; stable-read comparisons use the fields above plus bounds.
    node: Node = field(compare=False)
    tap: Node = field(compare=False)
    bounds: tuple[int, int, int, int] = (0, 0, 0, 0)
    sold_out: bool = False

    @property
    def available(self) -> bool:
        return self.enabled and not self.sold_out


@dataclass(frozen=True)
class OptionGroup:
    """One dimension: its header text as shown (NFKC), its tiles in document order, and the
    horizontally scrolling list holding them (None when the group has no scrollable container)."""

    header: str
    tiles: tuple[OptionTile, ...]
    scroll_list: Node | None = field(default=None, compare=False)
    list_bounds: tuple[int, int, int, int] | None = None


def sku_name(raw: str) -> str:
    """The one comparison form of an option name (shared with the server): see
    :func:`cmbuyer.schemas.text.normalize_sku`."""
    return normalize_sku(raw)


def recognize(dump: Dump, pack: Pack) -> str:
    """First screen in the pack's recognition order whose anchors match; risk walls win over any
    pack screen (stop and report, never solve)."""
    if safety.risk_walls(dump):
        return "security_challenge"
    for screen in pack.recognition_order:
        if pack.screens[screen].matches(dump):
            return screen
    return "unknown"


def _only_text_child(tile: Node) -> Node | None:
    """The one descendant carrying text, or None: a wrapper holding two texts (a name and a stock badge
    on the real text tile) has no single name."""
    texts = [d for d in tile.descendants() if d.text.strip()]
    return texts[0] if len(texts) == 1 else None


def tile_name_source(tile: Node, reader: PanelReader) -> tuple[str, Node | None, str | None]:
    """``(raw name, the node it was read from, the pack source that gave it)`` from the first declared
    source that yields a non-empty value; ``("", None, None)`` when none does. ``name_child`` must
    select exactly one descendant (two candidates are no name, never a guess)."""
    spec = reader.tile_name
    for source in spec.sources:
        node: Node | None
        if source in ("desc", "text"):
            node = tile
        elif source == "only_text_child":
            node = _only_text_child(tile)
        else:  # name_child
            assert spec.name_child is not None
            kids = [d for d in tile.descendants() if spec.name_child.matches(d)]
            node = kids[0] if len(kids) == 1 else None
        value = "" if node is None else (node.desc if source == "desc" else node.text)
        if value.strip():
            return value, node, source
    return "", None, None


def _sold_out(tile: Node) -> bool:
    return any(
        w in normalize(label) for n in (tile, *tile.descendants()) for label in (n.text, n.desc) for w in SOLD_OUT_WORDS
    )


def tile_name(raw: str) -> str | None:
    """The comparison form of a tile's raw name, or None when it is no name: empty, a stock badge or
    status word alone (``最后2件``, ``即将卖完``, ``刚刚抢光``), or one fused into the name (never cut off)."""
    name: str | None = sku_name(raw) if raw.strip() else None
    if name is not None and (_STATUS_RE.fullmatch(name) or _BADGE_RE.fullmatch(name)):
        return None
    return name


def _option_tile(dimension: str, node: Node, reader: PanelReader) -> OptionTile:
    raw, name_node, _source = tile_name_source(node, reader)
    return OptionTile(
        dimension=dimension,
        text=tile_name(raw),
        raw=raw,
        # the real text tile carries `selected` on its name TextView, not on the wrapper
        selected=node.selected or (name_node is not None and name_node.selected),
        enabled=node.enabled,
        node=node,
        tap=node.clickable_self_or_ancestor() or node,
        bounds=(node.bounds.left, node.bounds.top, node.bounds.right, node.bounds.bottom),
        sold_out=_sold_out(node),
    )


def _inside(node: Node, container: Node | None) -> bool:
    return container is not None and any(a is container for a in node.ancestors())


def read_groups(dump: Dump, reader: PanelReader) -> dict[str, OptionGroup]:
    """Option groups in document order. A group starts at a dimension header and ends at the next
    header, a pack terminator, or the first node outside any tile that is not an option tile and
    carries text/desc or is clickable (the payment row, ``添加``, the address row and the submit bar
    are never options). Nodes inside a tile (image, badge, name) belong to the tile; the first
    scrollable node of a group is its list. After the first group, a plain (not clickable) text row that
    option tiles follow starts a group under its text — a header the pack does not list. A
    header seen twice raises ScreenError(SKU_AMBIGUOUS)."""
    if reader.dimension_header is None or reader.option_tile is None:
        return {}
    headers = {n.order for n in reader.dimension_header.find(dump)}
    terminators = {n.order for t in reader.group_terminators for n in t.find(dump)}
    tiles = {n.order for n in reader.option_tile.find(dump)}
    out: dict[str, OptionGroup] = {}
    current: str | None = None
    members: list[OptionTile] = []
    scroll: Node | None = None
    last_tile: Node | None = None
    # After the first group, a plain text row that tiles follow is a header the pack does not list (issue
    # 34): its tiles form a group under that text, so the flow names it (or the task may) instead of
    # buying that group's default option unchecked.
    unlisted: str | None = None

    def close() -> None:
        if current is not None:
            b = scroll.bounds if scroll is not None else None
            out[current] = OptionGroup(
                current, tuple(members), scroll, (b.left, b.top, b.right, b.bottom) if b is not None else None
            )

    def start(name: str) -> None:
        nonlocal current, members, scroll, last_tile
        close()
        current = name
        if current in out:
            raise ScreenError("the same option header appears twice", "SKU_AMBIGUOUS")
        members, scroll, last_tile = [], None, None

    for node in dump.app_nodes():
        if node.order in headers:
            start(normalize(node.text or node.desc))
            unlisted = None
            continue
        if node.order in terminators:
            close()
            current, unlisted = None, None
            continue
        if current is None:
            if unlisted is not None and node.order in tiles:
                start(unlisted)
                unlisted = None
                members.append(_option_tile(current or "", node, reader))
                last_tile = node
            elif out and node.text.strip() and not node.clickable:
                unlisted = normalize(node.text).strip()
            continue
        if _inside(node, last_tile):
            continue
        if node.order in tiles:
            members.append(_option_tile(current, node, reader))
            last_tile = node
            continue
        if node.scrollable and scroll is None and not members:
            scroll = node
            continue
        if node.text.strip() or node.desc.strip() or node.clickable:
            close()
            current = None
            if node.text.strip() and not node.clickable:
                unlisted = normalize(node.text).strip()
    close()
    return out


def read_options(dump: Dump, reader: PanelReader) -> dict[str, list[OptionTile]]:
    """``{header: [OptionTile]}`` (see :func:`read_groups`)."""
    return {h: list(g.tiles) for h, g in read_groups(dump, reader).items()}


def _label_canon(text: str) -> str:
    """The witness comparison form: NFKC, ``【】`` read as ``[]``; nothing is deleted."""
    return normalize(text).replace("【", "[").replace("】", "]")


def label_agrees(label: str, names: list[str]) -> bool:
    """Does the ``已选:`` label name exactly ``names`` (in order, separated by single spaces)? Each
    name may carry one leading ``#``; ``[]`` and ``【】`` are equal; nothing inside a name is removed."""
    m = _LABEL_RE.fullmatch(_label_canon(label).strip())
    if m is None or not names:
        return False
    pattern = " ".join("#?" + re.escape(_label_canon(n)) for n in names)
    return re.fullmatch(pattern, m.group("names").strip()) is not None


def read_sku_label(dump: Dump, reader: PanelReader) -> str | None:
    """The one ``已选:`` label's raw text, or None (absent, several, or empty)."""
    if reader.sku_label is None:
        return None
    found = [n.text for n in reader.sku_label.find(dump) if n.text.strip()]
    return found[0] if len(found) == 1 else None


def selected_readings(
    dump: Dump, reader: PanelReader, groups: dict[str, list[OptionTile]] | None = None
) -> dict[str, str | None]:
    """``{header: selected name or None}`` for every group on screen. None when the group has not
    exactly one selected tile, its name is unreadable, or — when the reader declares the ``已选:``
    label — the label is unreadable or does not name the selected tiles (a second witness). Why a
    value is None: :func:`selected_with_reasons`."""
    return {dim: value for dim, (value, _why) in selected_with_reasons(dump, reader, groups).items()}


def selected_with_reasons(
    dump: Dump, reader: PanelReader, groups: dict[str, list[OptionTile]] | None = None
) -> dict[str, tuple[str | None, str | None]]:
    """``{header: (selected name or None, why it is None or None)}`` — the one place the selected
    reading is decided (gate 1 and gate 3 via :func:`selected_readings`, ``inspect --explain``)."""
    groups = read_options(dump, reader) if groups is None else groups
    out: dict[str, tuple[str | None, str | None]] = {}
    for dim, tiles in groups.items():
        chosen = [t for t in tiles if t.selected]
        if not chosen:
            none = f"no tile of {len(tiles)} carries selected (neither a tile nor its name node)"
            out[dim] = (None, none if tiles else "the group has no option tile")
        elif len(chosen) > 1:
            out[dim] = (None, f"{len(chosen)} tiles carry selected")
        elif chosen[0].text is None:
            raw = chosen[0].raw
            cause = (
                "no declared name source gave a value" if not raw.strip() else f"a stock badge or status word: {raw!r}"
            )
            out[dim] = (None, f"the selected tile's name is unreadable ({cause})")
        else:
            out[dim] = (chosen[0].text, None)
    if reader.sku_label is not None and out:
        label = read_sku_label(dump, reader)
        names = [v for v, _ in out.values() if v is not None]
        why: str | None = None
        if label is None:
            why = "the 已选 label is missing, empty or shown more than once"
        elif len(names) != len(out):  # the label names every dimension at once: it cannot witness a part
            why = "another dimension's selection is unreadable, so the 已选 label cannot witness this one"
        elif not label_agrees(label, names):
            why = f"the 已选 label {normalize(label)!r} does not name the selected tiles {names!r}"
        if why is not None:
            out = {dim: (None, own or why) for dim, (_v, own) in out.items()}
    return out


def read_money(dump: Dump, reader: MoneyReader | None) -> Decimal | None:
    """Amount from the nodes the reader selects. Every label (text or desc) of
    a selected node that shows a currency sign is a candidate and must full-match the pack regex:
    one that does not (``¥70已拼44件``, ``¥4162人付款``, a lone ``¥`` split from its digits) makes the
    reading None — never a guess. Candidates agreeing on one value (a text node and its desc twin)
    give that value; differing values → MoneyAmbiguous. None also when nothing is selected."""
    if reader is None:
        return None
    values: set[Decimal] = set()
    for node in reader.selector.find(dump):
        for label in (node.text, node.desc):
            if not label or "¥" not in normalize(label):
                continue
            value = match_amount(reader.regex, label)
            if value is None:
                return None
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


def selected_values(groups: dict[str, list[OptionTile]]) -> dict[str, str | None]:
    """``{dimension: text}`` for dimensions with exactly one selected tile (``text`` None when that
    tile's name is unreadable, as in :class:`OptionTile`)."""
    out: dict[str, str | None] = {}
    for dim, tiles in groups.items():
        chosen = [t for t in tiles if t.selected]
        if len(chosen) == 1:
            out[dim] = chosen[0].text
    return out


def reader_for(pack: Pack, screen: str) -> PanelReader | None:
    return pack.readers.get(screen)


@dataclass(frozen=True)
class PaymentReading:
    """The payment-mode witnesses on the screen holding the submit control.

    ``row`` is the raw text of the one payment row (None when there is not exactly one readable
    row); ``mode`` the name the pack's ``mode_regex`` extracts from it; ``problems`` lists every reason
    the tap could pay without a person (empty = the mode hands off to an external app)."""

    row: str | None
    mode: str | None
    problems: tuple[str, ...]


def read_payment(dump: Dump, pack: Pack) -> PaymentReading:
    """Read the payment row with the pack and run the code-level checks on the whole sheet: exactly
    one row (pack selector and the generic ``更换支付方式`` count agree), a mode from the pack's
    handoff list, no ``先用后付``/``免密`` anywhere, and a submit label that is exactly
    ``提交订单 ¥<amount>`` (never ``0元下单``/``立即支付``/``确认支付``/``免密支付``) with an amount above
    zero (``提交订单 ¥0`` hands nothing off to a person)."""
    problems: list[str] = []
    rows = [n for n in pack.payment.row.find(dump)]
    # the mode sits in the row's text on the order sheet; older confirm pages carry it in content-desc
    texts = [n.text if n.text.strip() else n.desc for n in rows if (n.text.strip() or n.desc.strip())]
    generic = safety.payment_row_targets(dump)
    row = texts[0] if len(rows) == 1 and len(texts) == 1 else None
    if len(rows) != 1 or generic != 1:
        problems.append(f"payment rows: pack {len(rows)}, generic {generic}")
    mode = None
    if row is not None:
        m = pack.payment.mode_regex.fullmatch(normalize(row))
        mode = m.group("mode") if m is not None else None
    if mode is None:
        problems.append("payment mode unreadable")
    elif mode not in pack.payment.handoff_modes:
        problems.append("payment mode does not hand off to an external app")
    for word in safety.unsafe_sheet_words(dump):
        problems.append(f"{word} on the sheet")
    if safety.unsafe_submit_labels(dump):
        problems.append("a submit label that pays")
    # every submit label must be exactly 提交订单 ¥<amount> (how many there are is gate 3's check)
    controls = safety.submit_controls(dump)
    amounts = safety.submit_amounts(dump)
    if not controls or len(amounts) != len(controls):
        problems.append("submit text is not exactly 提交订单 ¥<amount>")
    # a zero total leaves nothing for an external app to confirm: the one tap would complete the
    # order by itself (the 0元下单 / 先用后付 outcome), so it is no hand-off
    if any(a <= 0 for a in amounts):
        problems.append("a zero total: no external hand-off")
    return PaymentReading(row, mode, tuple(problems))
