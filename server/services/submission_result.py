"""``POST /api/v1/order-submissions/{sid}/result`` — the single observation after the tap (docs/api.md).

Order: conditional "device still ACTIVE" UPDATE → idempotency lookup of ``result_key`` (same request →
the stored answer) → the submission must exist *and* have been fenced by this device, else ``404
not_found`` (an unknown id and another device's submission look the same: no existence leak) → the
``attempt_id`` and claim token must be the submission's attempt's (constant-time; ``409
claim_not_current``) → a submission already holding an observation (another key) or settled by a
person → ``409 result_conflict`` → the attempt must be OPEN, or closed by the sweeper
(``LEASE_EXPIRED_AFTER_FENCE``) — the lease is **not** required: a fenced attempt may report after its
lease ran out, the observation is still worth having → the optional evidence asset must belong to
the attempt (``409 evidence_conflict``) → then:

- submission FENCED (normal case): observation recorded; ``SUBMITTED`` → submission SUBMITTED, task
  SUBMITTING → WAITING_PAYMENT; ``EXTERNAL_PAYMENT_HANDOFF`` / ``SECURITY_CHALLENGE`` / ``UNKNOWN`` →
  submission and task RECONCILIATION_REQUIRED; authorization FENCED → CONSUMED; attempt CLOSED
  (``REPORTED``);
- submission RECONCILIATION_REQUIRED because the sweeper found its lease expired without a result:
  the late observation (and asset) is recorded on the submission, but nothing changes state — a
  person decides (the attempt was already closed by the sweeper).

There is no "retry" observation; no result ever releases the fence or opens a second click.

The report's optional ``order_sn`` (read on the pending-payment order list by the read-only confirmation)
and ``observation_reason`` (why the observation is what it is, e.g. ``PAYMENT_SUSPECTED``) are stored on
the submission as reported, in both cases; they change no state — the observation alone decides that.
"""

from __future__ import annotations

import hmac
import sqlite3
from datetime import datetime
from typing import Any

from cmbuyer.server.clock import to_wire
from cmbuyer.server.domain import claim_token
from cmbuyer.server.domain.claims import claim_not_current
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import BrokenInvariant, DomainError, NotFound, refusal
from cmbuyer.server.domain.reports import awaits_result, check_asset, may_report_result, result_use_case
from cmbuyer.server.domain.states import (
    ATTEMPT_TRANSITIONS,
    AUTHORIZATION_TRANSITIONS,
    SUBMISSION_TRANSITIONS,
    TASK_TRANSITIONS,
    AttemptState,
    AuthorizationState,
    SubmissionState,
    TaskState,
    transition,
)
from cmbuyer.server.store import attempts as attempt_store
from cmbuyer.server.store import authorizations as auth_store
from cmbuyer.server.store import evidence as evidence_store
from cmbuyer.server.store import submissions as submission_store
from cmbuyer.server.store import tasks as task_store
from cmbuyer.server.tx import device_tx
from cmbuyer.server.tx.idempotency import Stored
from cmbuyer.server.tx.moves import close_attempt, move_authorization, move_task

ENDPOINT = "submission-result"


def result_conflict() -> DomainError:
    """The fixed 409 when the submission already has its one result (or a person settled it)."""
    return refusal(Code.RESULT_CONFLICT).because("result")


def not_found() -> NotFound:
    """The fixed 404 for an unknown submission *or* one fenced by another device."""
    return NotFound().because("device_submission")


def _extras(body: dict[str, Any]) -> dict[str, Any]:
    # stored as reported in both cases; they change no state (see the module docstring)
    return {"order_sn": body.get("order_sn"), "observation_reason": body.get("observation_reason")}


def _record(
    conn: sqlite3.Connection,
    submission: submission_store.Submission,
    new_state: str,
    *,
    key: str,
    body: dict[str, Any],
    at: str,
) -> None:
    """Record the one observation (and asset, extras) on ``submission`` as read, moving it to ``new_state``
    (its own state for a late result); a miss means the row changed under the write lock (→ 503)."""
    if not submission_store.record_result(
        conn,
        submission.id,
        expected_state=submission.state,
        new_state=new_state,
        observation=body["observation"],
        result_key=key,
        evidence_asset_id=body["evidence_asset_id"],
        at=at,
        **_extras(body),
    ):
        raise BrokenInvariant("submission changed under the write lock")


def report_result(
    conn: sqlite3.Connection, *, device_id: str, submission_id: str, body: dict[str, Any], now: datetime
) -> Stored:
    """Record the observation; returns the 200 response. Raises DeviceNotActive (→ 401), NotFound
    (→ 404), Conflict ``idempotency_conflict`` / ``claim_not_current`` / ``result_conflict`` /
    ``evidence_conflict`` (→ 409)."""
    req = device_tx.open_claim_write(
        conn, device_id, body, key=body["result_key"], endpoint=ENDPOINT, submission_id=submission_id
    )
    stored = req.replay()
    if stored is not None:
        return stored
    submission = submission_store.get(conn, submission_id)
    if submission is None or not hmac.compare_digest(submission.device_id, device_id):
        raise not_found()
    attempt = attempt_store.get(conn, submission.attempt_id)
    if attempt is None:
        raise BrokenInvariant("submission without its attempt")
    token_ok = claim_token.matches(attempt.token_hash, body["claim_token"])
    if not (token_ok and body["attempt_id"] == attempt.id and attempt.device_id == device_id):
        raise claim_not_current()
    if not awaits_result(submission):
        raise result_conflict()
    if not may_report_result(attempt):
        raise claim_not_current()
    asset_id: str | None = body["evidence_asset_id"]
    check_asset(asset_id, None if asset_id is None else evidence_store.get(conn, asset_id), attempt.id)
    observation: str = body["observation"]
    at = to_wire(now)
    task = task_store.get(conn, submission.task_id)
    if task is None:
        raise BrokenInvariant("submission without its task")
    if submission.state == SubmissionState.FENCED:
        use_case = result_use_case(observation)
        new_sub = transition(SUBMISSION_TRANSITIONS, SubmissionState.FENCED, use_case)
        new_task = transition(TASK_TRANSITIONS, TaskState(task.state), use_case)
        authorization = auth_store.get(conn, submission.authorization_id)
        if authorization is None:
            raise BrokenInvariant("submission without its authorization")
        new_auth = transition(AUTHORIZATION_TRANSITIONS, AuthorizationState(authorization.state), "result")
        transition(ATTEMPT_TRANSITIONS, AttemptState(attempt.state), "close")
        _record(conn, submission, new_sub.value, key=req.key, body=body, at=at)
        move_task(conn, task, new_task.value, at=at, reason=f"result:{observation}")
        move_authorization(conn, authorization, new_auth.value, at=at, reason=f"result:{observation}")
        close_attempt(conn, attempt.id, "REPORTED", actor=req.actor, at=at)
        sub_state, task_state, task_version, late = new_sub.value, new_task.value, task.version + 1, False
    else:
        # Late: the sweeper already moved it to RECONCILIATION_REQUIRED. Record, change no state.
        _record(conn, submission, submission.state, key=req.key, body=body, at=at)
        sub_state, task_state, task_version, late = submission.state, task.state, task.version, True
    result = {
        "submission_id": submission.id,
        "observation": observation,
        "submission_status": sub_state,
        "task_state": task_state,
        "task_version": task_version,
    }
    req.audit(
        attempt,
        "submission.result",
        at=at,
        detail={
            "submission_id": submission.id,
            "observation": observation,
            "late": late,
            "evidence_asset_id": body["evidence_asset_id"],
            "task_state": task_state,
            **{k: v for k, v in _extras(body).items() if v is not None},
        },
    )
    return req.remember(result, at=at, attempt_id=attempt.id)
