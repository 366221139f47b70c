"""Phone capability layer (spec 002 §三 真机能力分层): each function does one step, verifies it,
and raises :class:`FlowStop` (with a wire reason code) instead of guessing.

None of these can tap the submit control (the adapter's generic tap refuses it) and this module
does not import ``permit``/``submit`` (tests/agent/test_isolation.py).

Pacing: no fixed sleeps on the happy path. Screen transitions and the effect of a tap are polled
(short pauses, a deadline); every reading still needs two equal consecutive dumps
(:meth:`PhoneAdapter.read_stable`, which reuses the last dumps when nothing was tapped since), and
the node a tap aims at comes from a stable read that includes that node.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import TypeVar

from cmbuyer.agent.errors import FlowStop, ScreenError
from cmbuyer.agent.phone.adapter import PhoneAdapter
from cmbuyer.agent.screens import readers, safety
from cmbuyer.agent.screens.dump import Dump, Node
from cmbuyer.agent.screens.pack import Pack, PanelReader, Selector
from cmbuyer.agent.screens.text import normalize

T = TypeVar("T")

SCREEN_WAIT_SECONDS = 8.0
POLL_SECONDS = 0.05  # pause between polls while waiting for a screen or a tap's effect
TAP_EFFECT_SECONDS = 2.0  # how long a tap may take to show (tile selected, quantity moved)


@dataclass(frozen=True)
class SkuReadback:
    """Gate-1 readings: ``selected`` maps role (color/size) → tile text (NFKC)."""

    selected: dict[str, str]
    raw: dict[str, str]
    unit_price: Decimal


@dataclass(frozen=True)
class ConfirmReading:
    amount: Decimal
    unit_price: Decimal | None
    quantity: int | None
    submit_controls: int
    selected: dict[str, str]


def _stop_for_screen(screen: str) -> None:
    if screen == "security_challenge":
        raise FlowStop("risk wall or security check on screen", "RISK_WALL")
    if screen in ("payment", "leave_order_dialog"):
        raise FlowStop(f"unexpected {screen} screen", "POPUP_UNHANDLED")


def wait_for_screen(phone: PhoneAdapter, pack: Pack, wanted: str,
                    timeout: float = SCREEN_WAIT_SECONDS) -> Dump:
    """Dump until ``wanted`` is recognized in two consecutive dumps; allow-listed popups are
    dismissed on the way; risk walls/other screens stop the flow."""
    deadline = time.monotonic() + timeout
    last = "unknown"
    polls = 0
    while True:
        # polls after the first need a new dump (the latest one may be the first of the pair)
        screen, dump = phone.read_stable(lambda d: readers.recognize(d, pack), new_dump=polls > 0)
        polls += 1
        last = screen
        if screen == wanted:
            return dump
        _stop_for_screen(screen)
        if dismiss_popups(phone, pack, dump):
            continue
        if time.monotonic() >= deadline:
            raise FlowStop(f"expected {wanted}, saw {last}", "SCREEN_UNRECOGNIZED")
        time.sleep(POLL_SECONDS)


def _read_until(phone: PhoneAdapter, reader: Callable[[Dump], T], done: Callable[[T], bool],
                timeout: float = TAP_EFFECT_SECONDS) -> tuple[T, Dump]:
    """Stable reads until ``done(value)`` or the deadline; returns the last stable reading either
    way (the caller checks it). Waiting longer only gives a slow phone time to show a tap."""
    deadline = time.monotonic() + timeout
    polls = 0
    while True:
        value, dump = phone.read_stable(reader, new_dump=polls > 0)
        polls += 1
        if done(value) or time.monotonic() >= deadline:
            return value, dump
        time.sleep(POLL_SECONDS)


def _stable_control(phone: PhoneAdapter, selector: Selector, what: str, reason: str) -> tuple[Dump, Node]:
    """The one node ``selector`` finds, from a stable read that includes that node (its text,
    flags and bounds), so a tap never aims at a control seen in a single dump only."""
    _, dump = phone.read_stable(lambda d: tuple(n.signature() for n in selector.find(d)))
    return dump, _one(selector.find(dump), what, reason)


def dismiss_popups(phone: PhoneAdapter, pack: Pack, dump: Dump) -> bool:
    """Tap the first pack-defined dismissal whose trigger is present. Returns True if tapped.
    Only allow-listed dismissals; the denylist check still runs inside the adapter."""
    for rule in pack.dismissals:
        if rule.when.find(dump):
            targets = rule.tap.find(dump)
            if len(targets) == 1:
                phone.tap_node(dump, targets[0])
                time.sleep(0.3)
                return True
    return False


def open_product(phone: PhoneAdapter, pack: Pack, goods_id: str) -> Dump:
    """Deep link, then verify package (dump scoped), screen and goods id (dumpsys activity top)."""
    phone.open_goods(goods_id)
    dump = wait_for_screen(phone, pack, "product")
    shown = phone.current_goods_id()
    if shown != goods_id:
        raise FlowStop("the product page shows another goods id", "WRONG_GOODS")
    return dump


def _one(nodes: list[Node], what: str, reason: str) -> Node:
    if len(nodes) != 1:
        raise FlowStop(f"{what}: {len(nodes)} candidates", reason)
    return nodes[0]


def open_sku_panel(phone: PhoneAdapter, pack: Pack) -> Dump:
    """Tap the pack's buy entry (exactly one, from a stable read of the product page that includes
    the button), then wait for the SKU panel."""
    dump, buy = _stable_control(phone, pack.controls["product_buy"], "buy button", "SCREEN_UNRECOGNIZED")
    phone.tap_node(dump, buy)
    return wait_for_screen(phone, pack, "sku_panel")


def _reader(pack: Pack, screen: str) -> PanelReader:
    reader = pack.readers.get(screen)
    if reader is None:
        raise FlowStop(f"pack has no reader for {screen}", "NO_SELECTOR_PACK")
    return reader


def role_dimensions(pack: Pack, groups: dict[str, list[readers.OptionTile]]) -> dict[str, str]:
    """Map role (color/size) → the one dimension header on screen carrying it."""
    out: dict[str, str] = {}
    for role, names in pack.dimension_roles.items():
        present = [dim for dim in groups if dim in names]
        if len(present) != 1:
            raise FlowStop(f"{role}: {len(present)} matching option groups", "SKU_VALUE_MISSING")
        out[role] = present[0]
    if len(groups) != len(out):
        raise FlowStop("the panel has option groups the task does not specify", "SKU_AMBIGUOUS")
    return out


def _tile_for(groups: dict[str, list[readers.OptionTile]], dim: str, wanted: str) -> readers.OptionTile:
    """Exactly one tile equal to the NFKC-normalized requested value (design §7.5 gate 1)."""
    target = normalize(wanted)
    matches = [t for t in groups[dim] if t.text == target]
    if not matches:
        raise FlowStop(f"{dim}: requested value not offered", "SKU_VALUE_MISSING")
    if len(matches) > 1:
        raise FlowStop(f"{dim}: requested value offered twice", "SKU_AMBIGUOUS")
    if not matches[0].enabled:
        raise FlowStop(f"{dim}: requested value not available", "OUT_OF_STOCK")
    return matches[0]


def select_sku_options(phone: PhoneAdapter, pack: Pack, wanted: dict[str, str]) -> dict[str, str]:
    """Select each role's value (tap only if not already selected), then read back: every role's
    dimension must have exactly one selected tile equal to the request. Returns role → tile text."""
    reader = _reader(pack, "sku_panel")
    tapped = False
    for role in ("color", "size"):
        groups, dump = phone.read_stable(lambda d: _groups(d, reader))
        dims = role_dimensions(pack, groups)
        tile = _tile_for(groups, dims[role], wanted[role])
        if not tile.selected:
            phone.tap_node(dump, tile.node)
            tapped = True

    def all_selected(groups: dict[str, list[readers.OptionTile]]) -> bool:
        try:
            dims = role_dimensions(pack, groups)
        except FlowStop:
            return True  # nothing to wait for: the check below stops
        return all(any(t.selected and t.text == normalize(wanted[role]) for t in groups[dim])
                   for role, dim in dims.items())
    groups, _ = _read_until(phone, lambda d: _groups(d, reader), all_selected,
                            TAP_EFFECT_SECONDS if tapped else 0.0)
    dims = role_dimensions(pack, groups)
    out: dict[str, str] = {}
    for role, dim in dims.items():
        chosen = [t for t in groups[dim] if t.selected]
        if len(chosen) != 1 or chosen[0].text != normalize(wanted[role]):
            raise FlowStop(f"{dim}: selection did not read back", "SKU_NOT_SELECTED")
        out[role] = chosen[0].text
    return out


def _groups(dump: Dump, reader: PanelReader) -> dict[str, list[readers.OptionTile]]:
    try:
        return readers.read_options(dump, reader)
    except ScreenError as exc:
        raise FlowStop(exc.summary, exc.reason_code) from exc


def read_sku_unit_price(phone: PhoneAdapter, pack: Pack) -> Decimal:
    """The unit price on the SKU panel (pack reader; ambiguous → stop)."""
    reader = _reader(pack, "sku_panel")
    try:
        price, _ = phone.read_stable(lambda d: readers.read_money(d, reader.unit_price))
    except ScreenError as exc:
        raise FlowStop(exc.summary, exc.reason_code) from exc
    if price is None:
        raise FlowStop("unit price not readable", "UNIT_PRICE_UNREADABLE")
    return price


def _quantity(dump: Dump, reader: PanelReader) -> int | None:
    try:
        return readers.read_quantity(dump, reader)
    except ScreenError as exc:
        raise FlowStop(exc.summary, "QUANTITY_MISMATCH") from exc


def read_quantity(phone: PhoneAdapter, reader: PanelReader) -> int:
    qty, _ = phone.read_stable(lambda d: _quantity(d, reader))
    if qty is None:
        raise FlowStop("quantity not readable", "QUANTITY_MISMATCH")
    return qty


def set_quantity_and_readback(phone: PhoneAdapter, pack: Pack, wanted: int) -> int:
    """Step the quantity with +/− one tap at a time, reading back after each tap; a tap that does
    not move the number means the app capped it (stock) → QUANTITY_CAPPED_BY_STOCK."""
    reader = _reader(pack, "sku_panel")
    current = read_quantity(phone, reader)
    guard = 0
    while current != wanted:
        guard += 1
        if guard > 1000:
            raise FlowStop("quantity never converged", "QUANTITY_MISMATCH")
        control = "quantity_increase" if current < wanted else "quantity_decrease"
        selector = pack.controls.get(control)
        if selector is None:
            raise FlowStop("pack has no quantity control", "QUANTITY_MISMATCH")
        dump, node = _stable_control(phone, selector, control, "QUANTITY_MISMATCH")
        phone.tap_node(dump, node)
        before = current
        after, _ = _read_until(phone, lambda d: _quantity(d, reader), lambda q, b=before: q != b)
        if after is None:
            raise FlowStop("quantity not readable", "QUANTITY_MISMATCH")
        if after == current:
            raise FlowStop("quantity stopped moving", "QUANTITY_CAPPED_BY_STOCK"
                           if control == "quantity_increase" else "QUANTITY_MISMATCH")
        if abs(after - current) != 1:
            raise FlowStop("quantity jumped", "QUANTITY_MISMATCH")
        current = after
    return current


def go_to_order_confirm(phone: PhoneAdapter, pack: Pack) -> Dump:
    dump, button = _stable_control(phone, pack.controls["sku_confirm"], "sku confirm button",
                                   "SCREEN_UNRECOGNIZED")
    phone.tap_node(dump, button)
    return wait_for_screen(phone, pack, "confirm_order")


def _confirm(dump: Dump, pack: Pack) -> ConfirmReading:
    reader = _reader(pack, "confirm_order")
    if readers.recognize(dump, pack) != "confirm_order":
        raise FlowStop("not on the confirm page", "SCREEN_UNRECOGNIZED")
    generic = set(safety.submit_amounts(dump))
    amount = readers.read_money(dump, reader.amount)
    if amount is None or generic != {amount}:
        raise FlowStop("confirm amount unreadable or inconsistent", "CONFIRM_AMOUNT_UNREADABLE")
    pack_controls = {(n.clickable_self_or_ancestor() or n).order for n in pack.controls["submit"].find(dump)}
    generic_controls = {n.order for n in safety.submit_controls(dump)}
    count = len(pack_controls | generic_controls)
    groups = readers.read_options(dump, reader)
    return ConfirmReading(amount=amount, unit_price=readers.read_money(dump, reader.unit_price),
                          quantity=readers.read_quantity(dump, reader), submit_controls=count,
                          selected=readers.selected_values(groups))


def read_confirm_page(phone: PhoneAdapter, pack: Pack) -> ConfirmReading:
    """Stable confirm-page readings (amount from the submit text, unit price, quantity, controls)."""
    try:
        reading, _ = phone.read_stable(lambda d: _confirm(d, pack))
    except ScreenError as exc:
        raise FlowStop(exc.summary, exc.reason_code) from exc
    return reading


def back_out(phone: PhoneAdapter, pack: Pack, max_steps: int = 4) -> None:
    """Leave the order path without submitting or paying: system BACK only (never a screen control,
    so never a payment control). Stops early on the product page."""
    for _ in range(max_steps):
        try:
            dump = phone.dump()
            if readers.recognize(dump, pack) in ("product", "security_challenge"):
                return
        except Exception:  # noqa: S110 - best effort: backing out must not raise over the real error
            pass
        phone.press_back()
        time.sleep(0.3)
