"""Phone capability layer (docs/architecture.md "Agent"): each function does one step, verifies it,
and raises :class:`FlowStop` (with a wire reason code) instead of guessing.

None of these can tap the submit control (the adapter's generic tap refuses it) and this module
does not import ``permit``/``submit`` (tests/agent/test_layers.py).

Pacing: no fixed sleeps on the happy path. Screen transitions and the effect of a tap are polled
(short pauses, a deadline); every reading still needs two equal consecutive dumps
(:meth:`PhoneAdapter.read_stable`, which reuses the last dumps when nothing was tapped since), and
the node a tap aims at comes from a stable read that includes that node.
"""

from __future__ import annotations

import functools
import operator
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import TypeVar

from cmbuyer.agent import gates
from cmbuyer.agent.errors import FlowStop, MoneyError, ScreenError
from cmbuyer.agent.phone.adapter import PhoneAdapter
from cmbuyer.agent.screens import readers, safety
from cmbuyer.agent.screens.dump import Dump, Node
from cmbuyer.agent.screens.packmodel import Layout, MoneyReader, Pack, PanelReader, Selector
from cmbuyer.agent.waits import FlowWaits

T = TypeVar("T")

# how long a screen or a tap's effect may take: FlowWaits.screen and .tap_effect, passed in by the caller
POLL_SECONDS = 0.05  # pause between polls while waiting for a screen or a tap's effect


MAX_SWIPES = 12  # per direction while looking for a tile in one option list


@dataclass(frozen=True)
class ConfirmReading:
    """Everything read on the screen that holds the submit control (a stable, comparable value):
    the gate-3 reading (selected options by the task's dimension names, unit price, quantity, total, submit
    controls), the headers as shown (``header → selected name or None``) and the payment witnesses."""

    gate3: gates.Gate3Reading
    shown: dict[str, str | None]
    payment: readers.PaymentReading


def _stop_for_screen(screen: str, dump: Dump) -> None:
    if safety.update_prompt(dump):
        raise FlowStop("app update prompt on screen", "APP_UPDATE_PROMPT")
    if screen == "security_challenge":
        raise FlowStop("risk wall or security check on screen", "RISK_WALL")
    if screen in ("payment", "leave_order_dialog"):
        raise FlowStop(f"unexpected {screen} screen", "POPUP_UNHANDLED")


def wait_for_screen(phone: PhoneAdapter, pack: Pack, wanted: str, timeout: float) -> Dump:
    """Dump until ``wanted`` is recognized in two consecutive dumps, at most ``timeout`` seconds
    (see :func:`wait_for_any`)."""
    return wait_for_any(phone, pack, (wanted,), timeout)[1]


def wait_for_any(phone: PhoneAdapter, pack: Pack, wanted: tuple[str, ...], timeout: float) -> tuple[str, Dump]:
    """Dump until one of ``wanted`` is recognized in two consecutive dumps; allow-listed popups are
    dismissed on the way; risk walls, update prompts and other known screens stop the flow. Nothing
    wanted after ``timeout`` seconds (the last poll included) → SCREEN_UNRECOGNIZED."""
    deadline = time.monotonic() + timeout
    last = "unknown"
    polls = 0
    while True:
        # polls after the first need a new dump (the latest one may be the first of the pair)
        screen, dump = phone.read_stable(lambda d: readers.recognize(d, pack), new_dump=polls > 0)
        polls += 1
        last = screen
        if screen in wanted and not safety.update_prompt(dump):
            return screen, dump
        _stop_for_screen(screen, dump)
        if dismiss_popups(phone, pack, dump):
            continue
        if time.monotonic() >= deadline:
            raise FlowStop(f"expected {wanted}, saw {last}", "SCREEN_UNRECOGNIZED")
        time.sleep(POLL_SECONDS)


def _read_until(
    phone: PhoneAdapter, reader: Callable[[Dump], T], done: Callable[[T], bool], timeout: float
) -> tuple[T, Dump]:
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


def open_product(phone: PhoneAdapter, pack: Pack, goods_id: str, *, waits: FlowWaits) -> Dump:
    """Deep link, then verify package (dump scoped), screen (within ``waits.screen``) and goods id
    (dumpsys activity top)."""
    phone.open_goods(goods_id)
    dump = wait_for_screen(phone, pack, "product", waits.screen)
    shown = phone.current_goods_id()
    if shown != goods_id:
        raise FlowStop("the product page shows another goods id", "WRONG_GOODS")
    return dump


def _one(nodes: list[Node], what: str, reason: str) -> Node:
    if len(nodes) != 1:
        raise FlowStop(f"{what}: {len(nodes)} candidates", reason)
    return nodes[0]


def open_buy_sheet(phone: PhoneAdapter, pack: Pack, buy_path: str = "single", *, waits: FlowWaits) -> Layout:
    """Tap the pack's buy button for ``buy_path`` (exactly one, from a stable read of the product page
    that includes it) and recognize the layout by the screen that opens (within ``waits.screen``): the SKU
    sheet (``sku_panel``) or the order sheet (``confirm_order``). A path the pack does not declare stops."""
    selector = pack.buy_paths.get(buy_path)
    if selector is None:
        raise FlowStop(f"pack has no {buy_path} buy path", "SCREEN_UNRECOGNIZED")
    dump, buy = _stable_control(phone, selector, "buy button", "SCREEN_UNRECOGNIZED")
    phone.tap_node(dump, buy)
    # the screen holding the submit control is awaited too: an order sheet must stop at once with its
    # reason when the pack cannot drive it, not time out waiting for a SKU sheet that never comes
    wanted = tuple(dict.fromkeys((*(layout.options_screen for layout in pack.layouts), "confirm_order")))
    screen, sheet = wait_for_any(phone, pack, wanted, waits.screen)
    return layout_for_sheet(pack, screen, sheet)


def layout_for_sheet(pack: Pack, screen: str, dump: Dump) -> Layout:
    """The layout of the sheet the buy button opened, recognized as ``screen`` in ``dump`` (pure).

    The screen holding the submit control right after the buy tap is an order sheet: a pack without a
    layout whose options sit there (8.17.0 has only ``sku_sheet``) stops with NO_SELECTOR_PACK and says
    why, instead of driving the SKU-sheet path on it; so does a "SKU sheet" that shows a submit control
    (``提交订单 ¥…`` is never on a real SKU sheet: the pack misrecognized an order sheet)."""
    layout = pack.layout_on(screen)
    if layout is None:
        raise FlowStop(
            f"the buy button opened an order sheet ({screen}); pack {pack.id} has no order_sheet layout",
            "NO_SELECTOR_PACK",
        )
    if layout.options_screen == "sku_panel" and safety.submit_controls(dump):
        raise FlowStop(
            f"the sheet recognized as sku_panel shows a submit control: an order sheet pack {pack.id} cannot drive",
            "NO_SELECTOR_PACK",
        )
    return layout


def _reader(pack: Pack, screen: str) -> PanelReader:
    reader = pack.readers.get(screen)
    if reader is None:
        raise FlowStop(f"pack has no reader for {screen}", "NO_SELECTOR_PACK")
    return reader


def _groups(dump: Dump, reader: PanelReader) -> dict[str, readers.OptionGroup]:
    try:
        return readers.read_groups(dump, reader)
    except ScreenError as exc:
        raise FlowStop(exc.summary, exc.reason_code) from exc


def dimensions(pack: Pack, groups: dict[str, readers.OptionGroup], wanted: dict[str, str]) -> dict[str, str]:
    """``{task dimension: header}`` for the sheet's option groups (gates.map_dimensions, each header matched
    to the task's dimensions by name or through the pack's alias table)."""
    headers = list(groups)
    return gates.map_dimensions(headers, {h: pack.task_dimension(h, wanted) for h in headers}, wanted)


def _tile_view(group: readers.OptionGroup | None) -> tuple[object, ...]:
    return () if group is None else tuple((t.text, t.bounds) for t in group.tiles)


def find_tile(
    phone: PhoneAdapter, reader: PanelReader, header: str, wanted: str
) -> tuple[readers.OptionTile, Dump, int]:
    """The one tile named ``wanted`` in ``header``'s group, scrolling inside the group's own list when
    it is not on screen: first toward the end, then back toward the start, each until the visible
    tiles stop changing. Returns (tile, the stable dump it was read from, swipes made). Not found
    after both ends → SKU_VALUE_MISSING; two → SKU_AMBIGUOUS; sold out or disabled → OUT_OF_STOCK."""
    swipes = 0
    for forward in (True, False):
        for _ in range(MAX_SWIPES + 1):
            groups, dump = phone.read_stable(lambda d: _groups(d, reader), new_dump=swipes > 0)
            group = groups.get(header)
            if group is None:
                raise FlowStop(f"{header}: option group gone", "SCREEN_UNRECOGNIZED")
            matches = [t for t in group.tiles if t.text == wanted]
            if len(matches) > 1:
                raise FlowStop(f"{header}: requested value offered twice", "SKU_AMBIGUOUS")
            if matches:
                if not matches[0].available:
                    raise FlowStop(f"{header}: requested value sold out", "OUT_OF_STOCK")
                return matches[0], dump, swipes
            if group.scroll_list is None:
                raise FlowStop(f"{header}: requested value not offered", "SKU_VALUE_MISSING")
            before = _tile_view(group)
            phone.swipe_in_list(dump, group.scroll_list, forward)
            swipes += 1
            after, _ = phone.read_stable(lambda d: _tile_view(_groups(d, reader).get(header)), new_dump=True)
            if after == before:
                break  # this end of the list is reached
    raise FlowStop(f"{header}: requested value not found after scrolling both ends", "SKU_VALUE_MISSING")


def _selected_by_dimension(dump: Dump, reader: PanelReader, dims: dict[str, str]) -> dict[str, str | None]:
    shown = readers.selected_readings(dump, reader, readers.read_options(dump, reader))
    return {dimension: shown.get(header) for dimension, header in dims.items()}


def select_sku_options(
    phone: PhoneAdapter, pack: Pack, screen: str, wanted: dict[str, str], *, waits: FlowWaits
) -> tuple[dict[str, str | None], int]:
    """On ``screen`` (the layout's options screen): map the sheet's option groups to the task's dimensions
    before any tap (SKU_DIMENSION_UNNAMED otherwise), find each wanted tile (scrolling its list if needed)
    and tap it unless already selected, then read the selection back — tiles and, where the pack declares
    it, the ``已选:`` label (a tap may take ``waits.tap_effect`` to show). Returns ({task dimension: name read
    or None}, swipes made); gate 1 judges it."""
    reader = _reader(pack, screen)
    groups, _ = phone.read_stable(lambda d: _groups(d, reader))
    dims = dimensions(pack, groups, wanted)
    tapped, swipes = False, 0
    for dimension, header in dims.items():
        tile, dump, n = find_tile(phone, reader, header, wanted[dimension])
        swipes += n
        if not tile.selected:
            phone.tap_node(dump, tile.node)
            tapped = True

    def read(d: Dump) -> dict[str, str | None]:
        groups_now = _groups(d, reader)
        if set(groups_now) != set(groups):
            raise FlowStop("the option dimensions changed", "SKU_DIMENSION_UNNAMED")
        return _selected_by_dimension(d, reader, dims)

    if tapped or swipes:  # the read-back takes fresh dumps: gate 1's screenshot between two of them
        phone.arm_gate_shot()
    selected, _ = _read_until(
        phone,
        read,
        lambda sel: all(sel.get(r) == wanted[r] for r in dims),
        waits.tap_effect if tapped or swipes else 0.0,
    )
    return selected, swipes


def read_unit_price(phone: PhoneAdapter, pack: Pack, screen: str) -> Decimal | None:
    """The unit price on ``screen`` (pack reader), None when unreadable; several → UNIT_PRICE_AMBIGUOUS."""
    reader = _reader(pack, screen)
    try:
        price, _ = phone.read_stable(lambda d: readers.read_money(d, reader.unit_price))
    except ScreenError as exc:
        raise FlowStop(exc.summary, exc.reason_code) from exc
    return price


def _quantity(dump: Dump, reader: PanelReader) -> int | None:
    try:
        return readers.read_quantity(dump, reader)
    except ScreenError:
        return None  # several fields or not a plain number: unreadable, never a guess


def read_quantity(phone: PhoneAdapter, reader: PanelReader) -> int | None:
    qty, _ = phone.read_stable(lambda d: _quantity(d, reader))
    return qty


def set_quantity_and_readback(
    phone: PhoneAdapter, pack: Pack, screen: str, wanted: int, *, waits: FlowWaits
) -> int | None:
    """Step the quantity on ``screen`` with +/− one tap at a time, reading back after each tap; a tap
    that does not move the number within ``waits.tap_effect`` means the app capped it (stock) →
    QUANTITY_CAPPED_BY_STOCK; an unreadable quantity → QUANTITY_UNREADABLE. Returns the quantity read last
    (gate 2 judges)."""
    reader = _reader(pack, screen)
    current = read_quantity(phone, reader)
    guard = 0
    while current != wanted:
        if current is None:
            raise FlowStop("quantity not readable", "QUANTITY_UNREADABLE")
        guard += 1
        if guard > 1000:
            raise FlowStop("quantity never converged", "QUANTITY_MISMATCH")
        control = "quantity_increase" if current < wanted else "quantity_decrease"
        selector = pack.controls.get(control)
        if selector is None:
            raise FlowStop("pack has no quantity control", "QUANTITY_MISMATCH")
        dump, node = _stable_control(phone, selector, control, "QUANTITY_MISMATCH")
        if current + (1 if control == "quantity_increase" else -1) == wanted:
            phone.arm_gate_shot()  # the last tap: gate 2's screenshot between the read-back's dumps
        phone.tap_node(dump, node)
        before = current
        after, _ = _read_until(
            phone, lambda d: _quantity(d, reader), functools.partial(operator.ne, before), waits.tap_effect
        )
        if after is None:
            raise FlowStop("quantity not readable", "QUANTITY_UNREADABLE")
        if after == current:
            raise FlowStop(
                "quantity stopped moving",
                "QUANTITY_CAPPED_BY_STOCK" if control == "quantity_increase" else "QUANTITY_MISMATCH",
            )
        if abs(after - current) != 1:
            raise FlowStop("quantity jumped", "QUANTITY_MISMATCH")
        current = after
    return current


def go_to_order_confirm(phone: PhoneAdapter, pack: Pack, layout: Layout, *, waits: FlowWaits) -> Dump:
    """Leave the SKU sheet with the layout's confirm control, then wait for the confirm page (at most
    ``waits.screen``)."""
    if layout.to_confirm is None:
        raise FlowStop("layout has no way from the SKU sheet to the confirm page", "SCREEN_UNRECOGNIZED")
    dump, button = _stable_control(phone, layout.to_confirm, "sku confirm button", "SCREEN_UNRECOGNIZED")
    if layout.quantity_screen != "confirm_order":  # the next read is gate 3's: its screenshot in between
        phone.arm_gate_shot()
    phone.tap_node(dump, button)
    return wait_for_screen(phone, pack, "confirm_order", waits.screen)


def _safe_money(dump: Dump, reader: MoneyReader | None) -> Decimal | None:
    try:
        return readers.read_money(dump, reader)
    except (ScreenError, MoneyError):  # MoneyAmbiguous is a MoneyError, not a ScreenError
        return None  # two candidates: unreadable, never a guess (gate 3 stops)


def confirm_reading(dump: Dump, pack: Pack, wanted: dict[str, str]) -> ConfirmReading:
    """Read the screen that holds the submit control (pure; see :class:`ConfirmReading`). Every value
    that cannot be read is None; the only stops here are "not that screen", a dimension set that
    does not match the task (SKU_DIMENSION_UNNAMED) and a selected option that is sold out or
    disabled (OUT_OF_STOCK)."""
    reader = _reader(pack, "confirm_order")
    if readers.recognize(dump, pack) != "confirm_order":
        raise FlowStop("not on the screen that holds the submit control", "SCREEN_UNRECOGNIZED")
    generic = set(safety.submit_amounts(dump))
    amount = _safe_money(dump, reader.amount)
    total = amount if amount is not None and generic == {amount} else None
    pack_controls = {(n.clickable_self_or_ancestor() or n).order for n in pack.controls["submit"].find(dump)}
    generic_controls = {n.order for n in safety.submit_controls(dump)}
    groups = _groups(dump, reader)
    shown = readers.selected_readings(dump, reader, {h: list(g.tiles) for h, g in groups.items()})
    dims = dimensions(pack, groups, wanted)
    # stock can run out between the selection and the submit screen; the tile stays selected and
    # keeps its name in content-desc, so the name alone would pass gate 3
    if any(t.selected and not t.available for header in dims.values() for t in groups[header].tiles):
        raise FlowStop("a selected option is sold out or disabled", "OUT_OF_STOCK")
    selected = {dimension: shown.get(header) for dimension, header in dims.items()}
    reading = gates.Gate3Reading(
        selected=selected,
        unit_price=_safe_money(dump, reader.unit_price),
        quantity=_quantity(dump, reader),
        total=total,
        submit_controls=len(pack_controls | generic_controls),
    )
    return ConfirmReading(reading, shown, readers.read_payment(dump, pack))


def read_confirm_page(phone: PhoneAdapter, pack: Pack, wanted: dict[str, str]) -> ConfirmReading:
    """Stable reading of the screen that holds the submit control (two equal dumps)."""
    reading, _ = phone.read_stable(lambda d: confirm_reading(d, pack, wanted))
    return reading


def check_payment_mode(phone: PhoneAdapter, pack: Pack) -> str:
    """The payment-mode gate on a stable read of the current screen: the mode name, or
    PAYMENT_MODE_UNSAFE (see readers.read_payment for every check)."""
    payment, _ = phone.read_stable(lambda d: readers.read_payment(d, pack))
    return gates.payment_gate(payment.problems, payment.mode)


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
