"""The fence's rules (docs/api.md "submission-fence" and "Fence refusals"). Pure: no I/O.

The fence service (``services/fence.py``) loads the rows, asks here, and writes. The admin supervision
panel (``web/admin/supervision_view.py``) asks here too: :func:`gate_refusal` whether readings awaiting
approval would pass, and :class:`GateReadings` how each value fares on its own — one rule, two readers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from cmbuyer.schemas import MONEY_RE
from cmbuyer.schemas.sku import options_from_text
from cmbuyer.schemas.text import normalize_sku
from cmbuyer.server.domain import lease
from cmbuyer.server.domain.claims import snapshot_matches
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import Conflict, DomainError
from cmbuyer.server.domain.rows import FencedAuthorization, Snapshot
from cmbuyer.server.domain.sku_readings import (
    is_legacy_report,
    legacy_report_fits,
    options_equal,
    reported_options,
)
from cmbuyer.server.domain.states import AuthorizationState
from cmbuyer.server.domain.supervision import canonical_readings


class FenceRefused(Conflict):
    """``409 {"error":"fence_refused","detail":<word>}``: a gate or authorization check failed."""

    code = Code.FENCE_REFUSED

    def __init__(self, detail: str) -> None:
        super().__init__(f"fence refused: {detail}")
        self.detail = detail


def submission_fenced() -> Conflict:
    """The fixed 409 once a submission exists for the attempt/authorization (after the fence only the
    result may speak)."""
    return Conflict("a submission fence exists", code=Code.SUBMISSION_FENCED)


def version_conflict() -> Conflict:
    """The fixed 409 when ``expected_task_version`` is not the task's version."""
    return Conflict("task version changed", code=Code.VERSION_CONFLICT)


def check_authorization(authorization: FencedAuthorization, task: Snapshot, now: datetime) -> None:
    """Step 6 of the fence: raise :class:`FenceRefused` ``authorization_not_claimed`` (not CLAIMED: not
    yet claimed or already consumed), ``authorization_expired`` (``expires_at`` not strictly later than
    ``now``) or ``snapshot_mismatch`` (a frozen field no longer equals the task's), in that order."""
    if authorization.state != AuthorizationState.CLAIMED:
        raise FenceRefused("authorization_not_claimed")
    if not lease.is_live(authorization.expires_at, now):
        raise FenceRefused("authorization_expired")
    if not snapshot_matches(task, authorization):
        raise FenceRefused("snapshot_mismatch")


def check_gates(body: dict[str, Any], authorization: Snapshot, allowed_payment_modes: tuple[str, ...]) -> None:
    """Step 7 (pure): raise :class:`FenceRefused` naming the first failed gate, in this order
    (docs/api.md "Fence refusals"):

    - ``sku_options_required``: the body names ``selected_color``/``selected_size`` (an agent that
      knows only colour/size) but the task's options are not the colour/size special case — update the agent;
    - ``sku_mismatch``: the read options differ from the snapshot's per dimension by name
      (:func:`~cmbuyer.server.domain.sku_readings.options_equal`): a dimension the task names was not read,
      one was read that it does not name, or one value differs (NFKC on both sides);
    - ``quantity_mismatch``: ``quantity_read`` ≠ the snapshot's quantity;
    - ``unit_price_changed``: gate-1, gate-2 and gate-3 unit prices not all equal;
    - ``total_over_cap``: unit price × quantity > ``max_total_price``;
    - ``confirm_amount_over_cap``: ``confirm_page_amount`` (the total on the submit control) > the cap;
    - ``total_above_items``: that total > unit price × quantity (fees were added; a discount is allowed);
    - ``payment_mode_not_allowed``: NFKC(trimmed ``payment_mode``) not in ``allowed_payment_modes``
      (CMBUYER_ALLOWED_PAYMENT_MODES, stored NFKC);
    - ``submit_control_count``: not exactly one submit control.

    ``body`` is schema-valid (money strings canonical), so the Decimal conversions cannot fail.
    """
    wanted = options_from_text(authorization.sku_options)
    if is_legacy_report(body) and not legacy_report_fits(wanted):
        raise FenceRefused("sku_options_required")
    read = reported_options(body)
    if read is None or not options_equal(read, wanted):
        raise FenceRefused("sku_mismatch")
    passes = GateReadings.parse(body).passes(authorization, allowed_payment_modes)
    if not passes.quantity:
        raise FenceRefused("quantity_mismatch")
    if not (passes.gate2 and passes.gate3):
        raise FenceRefused("unit_price_changed")
    if not passes.gate1:
        raise FenceRefused("total_over_cap")
    if not passes.amount_within_cap:
        raise FenceRefused("confirm_amount_over_cap")
    if not passes.amount_within_items:
        raise FenceRefused("total_above_items")
    if not passes.payment_mode:
        raise FenceRefused("payment_mode_not_allowed")
    if body["submit_control_match_count"] != 1:
        raise FenceRefused("submit_control_count")


def _money(raw: object) -> Decimal | None:
    return Decimal(raw) if isinstance(raw, str) and MONEY_RE.fullmatch(raw) else None


@dataclass(frozen=True)
class GatePasses:
    """Whether each value the gates compare passes on its own (False when it is missing or malformed):
    ``gate1`` unit price × quantity ≤ the cap; ``gate2``/``gate3`` unit price equal to gate 1's;
    ``quantity`` equal to the task's; ``amount_within_cap`` / ``amount_within_items`` the submit control's
    total ≤ the cap / ≤ unit price × quantity; ``payment_mode`` allowed."""

    gate1: bool
    gate2: bool
    gate3: bool
    quantity: bool
    amount_within_cap: bool
    amount_within_items: bool
    payment_mode: bool


@dataclass(frozen=True)
class GateReadings:
    """The values the gates compare, each None when it is missing or malformed (money not canonical,
    quantity not an int ≥ 1, payment mode blank after NFKC). :func:`check_gates` reads a schema-valid body
    through it; the admin panel reads stored readings awaiting approval, where any value may be bad."""

    unit_prices: tuple[Decimal | None, Decimal | None, Decimal | None]
    quantity: int | None
    amount: Decimal | None
    payment_mode: str | None

    @classmethod
    def parse(cls, readings: Mapping[str, Any]) -> GateReadings:
        """The gate values of a readings object or fence body (other keys are ignored)."""
        quantity = readings.get("quantity_read")
        mode = readings.get("payment_mode")
        return cls(
            (
                _money(readings.get("gate1_unit_price")),
                _money(readings.get("gate2_unit_price")),
                _money(readings.get("gate3_unit_price")),
            ),
            quantity if type(quantity) is int and quantity >= 1 else None,
            _money(readings.get("confirm_page_amount")),
            mode if isinstance(mode, str) and normalize_sku(mode).strip() else None,
        )

    def passes(self, task: Snapshot, allowed_payment_modes: tuple[str, ...]) -> GatePasses:
        """How each value fares against the task's locked values (``task``) — see :class:`GatePasses`."""
        cap = Decimal(task.max_total_price)
        gate1 = self.unit_prices[0]
        items = None if gate1 is None else gate1 * task.quantity
        amount = self.amount
        return GatePasses(
            gate1=items is not None and items <= cap,
            gate2=self.unit_prices[1] is not None and self.unit_prices[1] == gate1,
            gate3=self.unit_prices[2] is not None and self.unit_prices[2] == gate1,
            quantity=self.quantity == task.quantity,
            amount_within_cap=amount is not None and amount <= cap,
            amount_within_items=amount is not None and items is not None and amount <= items,
            payment_mode=self.payment_mode is not None
            and normalize_sku(self.payment_mode).strip() in allowed_payment_modes,
        )


def gate_refusal(readings: Mapping[str, Any], task: Snapshot, allowed_payment_modes: tuple[str, ...]) -> str | None:
    """None when the fence's gates (:func:`check_gates`) pass on these readings, else the refusal word
    (``unreadable`` when the readings are not the 8 well-formed values). The submit-control count is not
    part of the readings; it is checked by the fence itself, so 1 is assumed here."""
    try:
        canonical = canonical_readings(readings)
    except DomainError:
        return "unreadable"
    try:
        check_gates({**canonical, "submit_control_match_count": 1}, task, allowed_payment_modes)
    except FenceRefused as exc:
        return exc.detail
    return None
