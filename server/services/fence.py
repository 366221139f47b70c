"""``POST /api/v1/purchase-attempts/{aid}/submission-fence`` — the one-time fence (spec 002, design §2.1).

Whatever happens (replays, races, crashes, restarts, expired leases) at most one ``click_permitted:
true`` is ever issued per authorization. The argument:

- the whole check-and-create runs as one job inside one write transaction (group commit runs whole jobs
  one after another; only the single writer touches the connection), so no two fence requests
  interleave, and other processes are serialized by SQLite's write lock. When the writer re-runs a batch
  after another job failed (server/db.py), the rolled-back first run's answer is dropped: the permit
  that is sent is always the one of the run that committed;
- ``order_submissions`` has UNIQUE ``authorization_id`` and UNIQUE ``attempt_id`` and a no-delete
  trigger, so even a bug in the checks could not create a second fence row;
- ``click_permitted: true`` exists only in the return value of the job that inserted the row; it is
  sent after COMMIT, and what is *stored* under the ``fence_key`` is the replay body
  (``click_permitted: false``, ``reconciliation_required: true``). A lost first response therefore
  can never be replayed as a permit; any later request for the same attempt/authorization is either
  that replay (same key, same payload) or ``409 submission_fenced`` (new key).

Order inside the job (any failure raises, nothing is written, never a permit):

1. conditional "device still ACTIVE" UPDATE (revoked → empty 401);
2. idempotency lookup of ``fence_key`` (same request → the stored replay body, 200; reused key → 409);
3. current claim: this device's OPEN attempt ``aid`` of ``task_id`` with this generation and token,
   lease strictly later than now (equal = expired); ``authorization_id`` must be the attempt's
   (``409 claim_not_current``);
4. no submission yet for this attempt or authorization (``409 submission_fenced``);
5. task version equals ``expected_task_version`` (``409 version_conflict``) and the task is CLAIMED or
   ORDERING at the claim's version (``409 invalid_state`` / ``claim_not_current``);
6. authorization CLAIMED (not yet consumed), strictly unexpired, snapshot equal to the task's fields;
7. the gates, re-checked on the values the agent READ on the screen (``409 fence_refused`` with a
   ``detail`` word, see :func:`check_gates`): colour and size as read, quantity read, the three unit
   prices, the total read from ``提交订单 ¥<total>``, the payment mode read beside it, the number of
   submit controls; then, for an attempt supervised at claim time (issue 17), a person's approval of
   exactly these readings (``409 approval_required``, :func:`supervision.require_approval`);
8. insert the submission (FENCED), authorization CLAIMED → FENCED, task → SUBMITTING (version + 1),
   audit row, replay record.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from cmbuyer.schemas.text import normalize_sku
from cmbuyer.server.clock import to_wire
from cmbuyer.server.db import StorageError
from cmbuyer.server.domain import claim_token, lease
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import Conflict
from cmbuyer.server.domain.states import (
    AUTHORIZATION_TRANSITIONS,
    TASK_TRANSITIONS,
    AuthorizationState,
    SubmissionState,
    TaskState,
    transition,
)
from cmbuyer.server.services import device_tx, idempotency
from cmbuyer.server.services import supervision as supervision_service
from cmbuyer.server.services.claim_check import claim_not_current, current_claim
from cmbuyer.server.services.claim_next import snapshot_matches
from cmbuyer.server.services.common import canonical_json, new_id
from cmbuyer.server.services.fail_attempt import submission_fenced
from cmbuyer.server.store import audit
from cmbuyer.server.store import authorizations as auth_store
from cmbuyer.server.store import submissions as submission_store
from cmbuyer.server.store import tasks as task_store
from cmbuyer.server.store.authorizations import Authorization

ENDPOINT = "submission-fence"
SUBMIT_TEXT = "提交订单"


class FenceRefused(Conflict):
    """``409 {"error":"fence_refused","detail":<word>}``: a gate or authorization check failed."""

    code = Code.FENCE_REFUSED

    def __init__(self, detail: str) -> None:
        super().__init__(f"fence refused: {detail}")
        self.detail = detail


@dataclass(frozen=True)
class FenceAnswer:
    """What to send: ``status`` and the exact body text. ``permit`` is True only for the one job that
    created the submission (the first response)."""

    status: int
    body: str
    permit: bool


def version_conflict() -> Conflict:
    """The fixed 409 when ``expected_task_version`` is not the task's version."""
    return Conflict("task version changed", code="version_conflict")


def response_body(submission_id: str, *, first: bool) -> dict[str, Any]:
    """The fence response: the first one permits the click, every replay requires reconciliation."""
    return {
        "submission_id": submission_id,
        "status": SubmissionState.FENCED.value,
        "click_permitted": first,
        "reconciliation_required": not first,
        "submit_text": SUBMIT_TEXT,
    }


def request_payload(attempt_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """Idempotency comparison form: body + URL attempt id, token replaced by its SHA-256 hex."""
    return {**body, "attempt_id": attempt_id, "claim_token": claim_token.token_hash(body["claim_token"]).hex()}


def _read_sku(value: str | None) -> str | None:
    return None if value is None else normalize_sku(value)


def check_gates(body: dict[str, Any], authorization: Authorization, allowed_payment_modes: tuple[str, ...]) -> None:
    """Step 7 (pure): raise :class:`FenceRefused` naming the first failed gate, in this order
    (docs/api.md "Fence refusals"; issue 15 §5):

    - ``sku_mismatch``: NFKC(``selected_color``) ≠ the snapshot's colour, or ``selected_size`` ≠ the
      snapshot's size — a size read where the task has none, or none read where it has one, included
      (``None`` equals only ``None``);
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
    if (
        normalize_sku(body["selected_color"]) != authorization.sku_color
        or _read_sku(body["selected_size"]) != authorization.sku_size
    ):
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


def create_fence(
    conn: sqlite3.Connection,
    *,
    device_id: str,
    attempt_id: str,
    body: dict[str, Any],
    now: datetime,
    allowed_payment_modes: tuple[str, ...],
) -> FenceAnswer:
    """Run the fence for a schema-valid request (see the module docstring for the order);
    ``allowed_payment_modes`` is ``Settings.allowed_payment_modes``."""
    device_tx.begin(conn, device_id)
    key: str = body["fence_key"]
    payload = request_payload(attempt_id, body)
    stored = device_tx.replay_scoped(conn, device_id, key, ENDPOINT, payload)
    if stored is not None and stored.body is not None:
        return FenceAnswer(stored.status, stored.body, permit=False)
    attempt = current_claim(
        conn,
        device_id=device_id,
        attempt_id=attempt_id,
        token=body["claim_token"],
        now=now,
        generation=body["claim_generation"],
        task_id=body["task_id"],
        require_lease=True,
    )
    if body["authorization_id"] != attempt.authorization_id:
        raise claim_not_current()
    if submission_store.for_attempt_or_authorization(conn, attempt.id, attempt.authorization_id) is not None:
        raise submission_fenced()
    task = task_store.get(conn, attempt.task_id)
    authorization = auth_store.get(conn, attempt.authorization_id)
    if task is None or authorization is None:
        raise claim_not_current()
    if task.version != body["expected_task_version"]:
        raise version_conflict()
    new_task = transition(TASK_TRANSITIONS, TaskState(task.state), "fence")
    expected_version = attempt.claimed_task_version + (1 if task.state == TaskState.ORDERING else 0)
    if task.version != expected_version:
        raise claim_not_current()
    if authorization.state != AuthorizationState.CLAIMED:
        raise FenceRefused("authorization_not_claimed")
    if not lease.is_live(authorization.expires_at, now):
        raise FenceRefused("authorization_expired")
    if not snapshot_matches(task, authorization):
        raise FenceRefused("snapshot_mismatch")
    check_gates(body, authorization, allowed_payment_modes)
    supervision_service.require_approval(conn, attempt, body)
    new_auth = transition(AUTHORIZATION_TRANSITIONS, AuthorizationState(authorization.state), "fence")
    at = to_wire(now)
    submission = submission_store.Submission(
        id=new_id(),
        task_id=task.id,
        authorization_id=authorization.id,
        attempt_id=attempt.id,
        device_id=device_id,
        fence_key=key,
        state=SubmissionState.FENCED.value,
        selected_color=body["selected_color"],
        selected_size=body["selected_size"],
        gate1_unit_price=body["gate1_unit_price"],
        gate2_unit_price=body["gate2_unit_price"],
        quantity_read=body["quantity_read"],
        confirm_page_amount=body["confirm_page_amount"],
        submit_control_match_count=body["submit_control_match_count"],
        observation=None,
        result_key=None,
        evidence_asset_id=None,
        reconciliation_reason=None,
        reconciled_by=None,
        reconciliation_note=None,
        created_at=at,
        result_at=None,
        reconciled_at=None,
        gate3_unit_price=body["gate3_unit_price"],
        payment_mode=body["payment_mode"],
        order_sn=None,
        observation_reason=None,
    )
    submission_store.insert(conn, submission)
    if not auth_store.set_state(
        conn, authorization.id, expected_state=authorization.state, new_state=new_auth.value, at=at
    ):
        raise StorageError("authorization changed under the write lock")
    if not task_store.set_state(
        conn, task.id, expected_version=task.version, expected_state=task.state, new_state=new_task.value, at=at
    ):
        raise StorageError("task changed under the write lock")
    audit.append(
        conn,
        at=at,
        actor_kind="device",
        actor_id=device_id,
        action="submission.fence",
        subject_kind="task",
        subject_id=task.id,
        request_id=key,
        generation=attempt.claim_generation,
        detail={
            "submission_id": submission.id,
            "attempt_id": attempt.id,
            "authorization_id": authorization.id,
            "task_version": task.version + 1,
            "gate1_unit_price": submission.gate1_unit_price,
            "gate3_unit_price": submission.gate3_unit_price,
            "confirm_page_amount": submission.confirm_page_amount,
            "payment_mode": submission.payment_mode,
            "quantity_read": submission.quantity_read,
        },
    )
    idempotency.remember(
        conn,
        device_id,
        key,
        ENDPOINT,
        payload,
        status=200,
        body=response_body(submission.id, first=False),
        at=at,
        attempt_id=attempt.id,
    )
    return FenceAnswer(200, canonical_json(response_body(submission.id, first=True)), permit=True)
