"""``POST /api/v1/purchase-attempts/{aid}/fail`` as one write-transaction job (docs/api.md, design §3).

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
from cmbuyer.server.domain.errors import BrokenInvariant
from cmbuyer.server.domain.fence import submission_fenced
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
from cmbuyer.server.store import attempts as attempt_store
from cmbuyer.server.store import audit
from cmbuyer.server.store import authorizations as auth_store
from cmbuyer.server.store import evidence as evidence_store
from cmbuyer.server.store import submissions as submission_store
from cmbuyer.server.store import tasks as task_store
from cmbuyer.server.tx import device_tx, idempotency
from cmbuyer.server.tx import supervision as supervision_tx
from cmbuyer.server.tx.claim_check import current_claim
from cmbuyer.server.tx.common import Actor
from cmbuyer.server.tx.idempotency import Stored

ENDPOINT = "fail"


def request_payload(attempt_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """Idempotency comparison form: body + URL attempt id, token replaced by its SHA-256 hex."""
    return idempotency.claim_request_form(body, attempt_id=attempt_id)


def fail_attempt(
    conn: sqlite3.Connection, *, device_id: str, attempt_id: str, body: dict[str, Any], now: datetime
) -> Stored:
    """Close the attempt as failed; returns the 200 response. Raises DeviceNotActive (→ 401),
    ValidationFailed (→ 400), Conflict ``idempotency_conflict`` / ``claim_not_current`` /
    ``submission_fenced`` / ``evidence_conflict`` (→ 409)."""
    device_tx.begin(conn, device_id)
    key: str = body["fail_key"]
    payload = request_payload(attempt_id, body)
    stored = device_tx.replay_scoped(conn, device_id, key, ENDPOINT, payload)
    if stored is not None:
        return stored
    attempt = current_claim(
        conn,
        device_id=device_id,
        attempt_id=attempt_id,
        token=body["claim_token"],
        now=now,
        generation=body["claim_generation"],
        require_lease=False,
    )
    if submission_store.for_attempt_or_authorization(conn, attempt.id, attempt.authorization_id) is not None:
        raise submission_fenced()
    asset_id: str | None = body["evidence_asset_id"]
    check_asset(asset_id, None if asset_id is None else evidence_store.get(conn, asset_id), attempt.id)
    summary = check_summary(body["summary"])
    task = task_store.get(conn, attempt.task_id)
    authorization = auth_store.get(conn, attempt.authorization_id)
    if task is None or authorization is None or not in_progress_before_fence(task, authorization):
        raise claim_not_current()
    at = to_wire(now)
    reason: str = body["reason_code"]
    transition(ATTEMPT_TRANSITIONS, AttemptState(attempt.state), "close")
    new_auth = transition(AUTHORIZATION_TRANSITIONS, AuthorizationState(authorization.state), "close")
    new_task = transition(TASK_TRANSITIONS, TaskState(task.state), "device_fail")
    if not attempt_store.close(conn, attempt.id, "FAILED", at):
        raise BrokenInvariant("attempt changed under the write lock")
    supervision_tx.void_for_attempt(conn, attempt.id, actor=Actor("device", device_id), at=at, why="FAILED")
    if not auth_store.set_state(
        conn,
        authorization.id,
        expected_state=authorization.state,
        new_state=new_auth,
        at=at,
        reason=f"device_fail:{reason}",
    ):
        raise BrokenInvariant("authorization changed under the write lock")
    if not task_store.set_state(
        conn,
        task.id,
        expected_version=task.version,
        expected_state=task.state,
        new_state=new_task,
        at=at,
        reason=reason,
    ):
        raise BrokenInvariant("task changed under the write lock")
    version = task.version + 1
    result = {
        "task_id": task.id,
        "attempt_id": attempt.id,
        "task_state": new_task.value,
        "task_version": version,
        "reason_code": reason,
    }
    audit.append(
        conn,
        at=at,
        actor_kind="device",
        actor_id=device_id,
        action="attempt.fail",
        subject_kind="task",
        subject_id=task.id,
        request_id=key,
        generation=attempt.claim_generation,
        detail={
            "attempt_id": attempt.id,
            "authorization_id": authorization.id,
            "reason_code": reason,
            "summary": summary,
            "evidence_asset_id": body["evidence_asset_id"],
            "task_version": version,
        },
    )
    return idempotency.remember(
        conn, device_id, key, ENDPOINT, payload, status=200, body=result, at=at, attempt_id=attempt.id
    )
