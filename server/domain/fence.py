"""The fence's rules (docs/api.md "submission-fence" and "Fence refusals"). Pure: no I/O.

The fence service (``services/fence.py``) loads the rows, asks here, and writes. The admin supervision
panel (``services/supervision_admin.py``) asks :func:`check_gates` too, to show whether readings awaiting
approval would pass — one rule, two readers.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from cmbuyer.schemas.sku import options_from_text
from cmbuyer.schemas.text import normalize_sku
from cmbuyer.server.domain import lease
from cmbuyer.server.domain.claims import snapshot_matches
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import Conflict
from cmbuyer.server.domain.rows import FencedAuthorization, Snapshot
from cmbuyer.server.domain.sku_readings import (
    is_legacy_report,
    legacy_report_fits,
    options_equal,
    reported_options,
)
from cmbuyer.server.domain.states import AuthorizationState


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
    if body["quantity_read"] != authorization.quantity:
        raise FenceRefused("quantity_mismatch")
    gate1 = Decimal(body["gate1_unit_price"])
    if not gate1 == Decimal(body["gate2_unit_price"]) == Decimal(body["gate3_unit_price"]):
        raise FenceRefused("unit_price_changed")
    cap = Decimal(authorization.max_total_price)
    items = gate1 * authorization.quantity
    if items > cap:
        raise FenceRefused("total_over_cap")
    amount = Decimal(body["confirm_page_amount"])
    if amount > cap:
        raise FenceRefused("confirm_amount_over_cap")
    if amount > items:
        raise FenceRefused("total_above_items")
    if normalize_sku(body["payment_mode"]).strip() not in allowed_payment_modes:
        raise FenceRefused("payment_mode_not_allowed")
    if body["submit_control_match_count"] != 1:
        raise FenceRefused("submit_control_count")
