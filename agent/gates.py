"""The three gates before the fence (design §7.5; the server re-checks them at the fence).

Pure functions over readings; each raises FlowStop with the wire reason code on failure.
"""

from __future__ import annotations

from decimal import Decimal

from cmbuyer.agent.errors import FlowStop
from cmbuyer.agent.screens.text import normalize


def gate1(selected: dict[str, str], wanted: dict[str, str], unit_price: Decimal | None) -> Decimal:
    """Gate 1 (SKU panel): each role reads back exactly the requested value (NFKC equality) and
    the unit price reads unambiguously. Returns the unit price."""
    for role, value in wanted.items():
        if selected.get(role) != normalize(value):
            raise FlowStop(f"gate 1: {role} does not read back", "SKU_NOT_SELECTED")
    if unit_price is None:
        raise FlowStop("gate 1: unit price unreadable", "UNIT_PRICE_UNREADABLE")
    return unit_price


def gate2(quantity_read: int, wanted: int, gate1_price: Decimal, price_now: Decimal) -> None:
    """Gate 2: quantity set and read back exactly; unit price unchanged since gate 1."""
    if quantity_read != wanted:
        raise FlowStop("gate 2: quantity does not read back", "QUANTITY_MISMATCH")
    if price_now != gate1_price:
        raise FlowStop("gate 2: unit price changed", "PRICE_CHANGED")


def gate3(*, unit_price: Decimal, quantity: int, confirm_amount: Decimal, max_total: Decimal,
          submit_controls: int, confirm_unit_price: Decimal | None, confirm_quantity: int | None,
          confirm_selected_color: str | None, wanted_color: str) -> None:
    """Gate 3 (confirm page): computed total and displayed amount ≤ cap, exactly one submit
    control; plus the confirm page agrees with the panel (price, quantity, colour tile)."""
    if confirm_unit_price is not None and confirm_unit_price != unit_price:
        raise FlowStop("gate 3: unit price changed on the confirm page", "PRICE_CHANGED")
    if confirm_quantity is not None and confirm_quantity != quantity:
        raise FlowStop("gate 3: quantity differs on the confirm page", "QUANTITY_MISMATCH")
    if confirm_selected_color is not None and confirm_selected_color != normalize(wanted_color):
        raise FlowStop("gate 3: selected option differs on the confirm page", "SKU_MISMATCH_ON_CONFIRM")
    computed = unit_price * quantity
    if computed > max_total or confirm_amount > max_total:
        raise FlowStop("gate 3: total over the cap", "PRICE_OVER_CAP")
    if submit_controls != 1:
        raise FlowStop(f"gate 3: {submit_controls} submit controls", "SUBMIT_CONTROL_COUNT")
