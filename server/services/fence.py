"""``POST /api/v1/purchase-attempts/{aid}/submission-fence`` — the one-time fence (docs/api.md).

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
6. authorization CLAIMED (not yet consumed), strictly unexpired, snapshot equal to the task's fields
   (:func:`cmbuyer.server.domain.fence.check_authorization`);
7. the gates, re-checked on the values the agent READ on the screen (``409 fence_refused`` with a
   ``detail`` word, see :func:`cmbuyer.server.domain.fence.check_gates`): colour and size as read,
   quantity read, the three unit prices, the total read from ``提交订单 ¥<total>``, the payment mode
   read beside it, the number of submit controls; then, for an attempt supervised at claim time,
   a person's approval of exactly these readings (``409 approval_required``,
   :func:`cmbuyer.server.tx.supervision.require_approval`);
8. insert the submission (FENCED), authorization CLAIMED → FENCED, task → SUBMITTING (version + 1),
   audit row, replay record.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cmbuyer.schemas.sku import options_text
from cmbuyer.server.clock import to_wire
from cmbuyer.server.domain.claims import claim_not_current, task_at_claim
from cmbuyer.server.domain.fence import check_authorization, check_gates, version_conflict
from cmbuyer.server.domain.sku_readings import reported_as_read
from cmbuyer.server.domain.states import (
    AUTHORIZATION_TRANSITIONS,
    TASK_TRANSITIONS,
    AuthorizationState,
    SubmissionState,
    TaskState,
    transition,
)
from cmbuyer.server.domain.supervision import READING_KEYS
from cmbuyer.server.store import submissions as submission_store
from cmbuyer.server.tx import device_tx
from cmbuyer.server.tx import supervision as supervision_tx
from cmbuyer.server.tx.claim_check import claim_rows, unfenced_claim
from cmbuyer.server.tx.common import canonical_json, new_id
from cmbuyer.server.tx.moves import move_authorization, move_task

ENDPOINT = "submission-fence"
SUBMIT_TEXT = "提交订单"
# What the submission stores as the agent read it: every value the fence re-checks (the readings a
# supervised attempt's approval is bound to) and the number of submit controls.
# The options are stored as canonical text as read (a colour/size report as its options, migration 0011).
FENCE_READINGS = tuple(k for k in (*READING_KEYS, "submit_control_match_count") if k != "selected_options")


@dataclass(frozen=True)
class FenceAnswer:
    """What to send: ``status`` and the exact body text. ``permit`` is True only for the one job that
    created the submission (the first response)."""

    status: int
    body: str
    permit: bool


def response_body(submission_id: str, *, first: bool) -> dict[str, Any]:
    """The fence response: the first one permits the click, every replay requires reconciliation."""
    return {
        "submission_id": submission_id,
        "status": SubmissionState.FENCED.value,
        "click_permitted": first,
        "reconciliation_required": not first,
        "submit_text": SUBMIT_TEXT,
    }


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
    req = device_tx.open_claim_write(
        conn, device_id, body, key=body["fence_key"], endpoint=ENDPOINT, attempt_id=attempt_id
    )
    stored = req.replay()
    if stored is not None and stored.body is not None:
        return FenceAnswer(stored.status, stored.body, permit=False)
    attempt = unfenced_claim(conn, device_id=device_id, attempt_id=attempt_id, body=body, now=now)
    task, authorization = claim_rows(conn, attempt)
    if task.version != body["expected_task_version"]:
        raise version_conflict()
    new_task = transition(TASK_TRANSITIONS, TaskState(task.state), "fence")  # CLAIMED or ORDERING, else 409
    if not task_at_claim(task, attempt.claimed_task_version):
        raise claim_not_current()
    check_authorization(authorization, task, now)
    check_gates(body, authorization, allowed_payment_modes)
    supervision_tx.require_approval(conn, attempt, body)
    new_auth = transition(AUTHORIZATION_TRANSITIONS, AuthorizationState(authorization.state), "fence")
    at = to_wire(now)
    submission = submission_store.Submission(
        id=new_id(),
        task_id=task.id,
        authorization_id=authorization.id,
        attempt_id=attempt.id,
        device_id=device_id,
        fence_key=req.key,
        state=SubmissionState.FENCED.value,
        selected_options=options_text(reported_as_read(body)),  # as read; check_gates accepted them
        **{key: body[key] for key in FENCE_READINGS},
        observation=None,
        result_key=None,
        evidence_asset_id=None,
        reconciliation_reason=None,
        reconciled_by=None,
        reconciliation_note=None,
        created_at=at,
        result_at=None,
        reconciled_at=None,
        order_sn=None,
        observation_reason=None,
    )
    submission_store.insert(conn, submission)
    move_authorization(conn, authorization, new_auth.value, at=at)
    move_task(conn, task, new_task.value, at=at)
    req.audit(
        attempt,
        "submission.fence",
        at=at,
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
    req.remember(response_body(submission.id, first=False), at=at, attempt_id=attempt.id)
    return FenceAnswer(200, canonical_json(response_body(submission.id, first=True)), permit=True)
