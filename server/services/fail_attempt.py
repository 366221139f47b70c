"""``POST /api/v1/purchase-attempts/{aid}/fail`` as one write-transaction job (docs/api.md).

Order: conditional "device still ACTIVE" UPDATE → idempotency lookup of ``fail_key`` → the claim must
be this device's OPEN attempt with this generation and token (the lease is *not* required: an agent
that lost its lease should still say why it stopped; failing releases nothing to anyone) → no
submission may exist for the attempt (after the fence only ``result`` may speak: ``409
submission_fenced``) → the optional evidence asset must belong to this attempt → summary check →
attempt CLOSED (``FAILED``), authorization CLAIMED → CLOSED, task CLAIMED/ORDERING → FAILED
(version + 1, ``state_reason`` = reason code) → request record + audit row (reason, summary, asset).
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

from cmbuyer.server.clock import to_wire
from cmbuyer.server.domain.claims import claim_not_current, in_progress_before_fence
from cmbuyer.server.domain.reports import check_asset, check_summary
from cmbuyer.server.domain.states import (
    ATTEMPT_TRANSITIONS,
    AUTHORIZATION_TRANSITIONS,
    TASK_TRANSITIONS,
    AttemptState,
    AuthorizationState,
    TaskState,
    transition,
)
from cmbuyer.server.store import evidence as evidence_store
from cmbuyer.server.tx import device_tx
from cmbuyer.server.tx.claim_check import check_unfenced, claim_rows
from cmbuyer.server.tx.idempotency import Stored
from cmbuyer.server.tx.moves import close_attempt, move_authorization, move_task

ENDPOINT = "fail"


def fail_attempt(
    conn: sqlite3.Connection, *, device_id: str, attempt_id: str, body: dict[str, Any], now: datetime
) -> Stored:
    """Close the attempt as failed; returns the 200 response. Raises DeviceNotActive (→ 401),
    ValidationFailed (→ 400), Conflict ``idempotency_conflict`` / ``claim_not_current`` /
    ``submission_fenced`` / ``evidence_conflict`` (→ 409)."""
    req = device_tx.open_claim_write(
        conn, device_id, body, key=body["fail_key"], endpoint=ENDPOINT, attempt_id=attempt_id
    )
    stored = req.replay()
    if stored is not None:
        return stored
    attempt = req.claim(body, attempt_id=attempt_id, now=now, require_lease=False)
    check_unfenced(conn, attempt)
    asset_id: str | None = body["evidence_asset_id"]
    check_asset(asset_id, None if asset_id is None else evidence_store.get(conn, asset_id), attempt.id)
    summary = check_summary(body["summary"])
    task, authorization = claim_rows(conn, attempt)
    if not in_progress_before_fence(task, authorization):
        raise claim_not_current()
    at = to_wire(now)
    reason: str = body["reason_code"]
    transition(ATTEMPT_TRANSITIONS, AttemptState(attempt.state), "close")
    new_auth = transition(AUTHORIZATION_TRANSITIONS, AuthorizationState(authorization.state), "close")
    new_task = transition(TASK_TRANSITIONS, TaskState(task.state), "device_fail")
    close_attempt(conn, attempt.id, "FAILED", actor=req.actor, at=at)
    move_authorization(conn, authorization, new_auth, at=at, reason=f"device_fail:{reason}")
    version = move_task(conn, task, new_task, at=at, reason=reason)
    result = {
        "task_id": task.id,
        "attempt_id": attempt.id,
        "task_state": new_task.value,
        "task_version": version,
        "reason_code": reason,
    }
    req.audit(
        attempt,
        "attempt.fail",
        at=at,
        detail={
            "attempt_id": attempt.id,
            "authorization_id": authorization.id,
            "reason_code": reason,
            "summary": summary,
            "evidence_asset_id": body["evidence_asset_id"],
            "task_version": version,
        },
    )
    return req.remember(result, at=at, attempt_id=attempt.id)
