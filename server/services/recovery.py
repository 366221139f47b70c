"""Expiry sweeper and start-up recovery (recovery before dispatch: docs/api.md "Expiry and recovery").

The same job runs at start-up — a start-up step of ``lifecycle.py``, so it completes before any
device route serves — and then every ``settings.sweep_interval`` seconds. Each pass is one write job
(a bounded batch; the start-up run repeats until nothing is left):

- a FENCED submission without a result whose attempt lease ended at or before now → submission and
  task RECONCILIATION_REQUIRED (task version + 1), authorization FENCED → CONSUMED, attempt CLOSED
  (``LEASE_EXPIRED_AFTER_FENCE``). The task is never claimable again; a person reconciles it;
- an ACTIVE authorization (never claimed) whose expiry is at or before now → EXPIRED, its PENDING
  task → EXPIRED (version + 1);
- a claim whose lease expired *before* the fence is left exactly as it is: the task shows "lease
  expired — needs a person"; it is never released to another device (docs/api.md "Expiry and recovery").

Every change writes its audit row (actor ``system``) in the same transaction.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime

from cmbuyer.server.clock import to_wire
from cmbuyer.server.domain.errors import InvalidTransition
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
from cmbuyer.server.store import submissions as submission_store
from cmbuyer.server.store import tasks as task_store
from cmbuyer.server.tx import audit as audit_tx
from cmbuyer.server.tx import supervision as supervision_tx
from cmbuyer.server.tx.common import SYSTEM
from cmbuyer.server.tx.moves import set_authorization_state, set_task_state

BATCH = 200
RECONCILIATION_REASON = "LEASE_EXPIRED_NO_RESULT"


@dataclass(frozen=True)
class SweepReport:
    """What one pass changed; ``more`` is True when a batch was full (run again)."""

    submissions_to_reconciliation: int
    authorizations_expired: int
    more: bool


def _expire_fenced(conn: sqlite3.Connection, now: datetime, at: str) -> tuple[int, bool]:
    found = submission_store.fenced_with_expired_lease(conn, at, BATCH)
    changed = 0
    for sub in found:
        task = task_store.get(conn, sub.task_id)
        authorization = auth_store.get(conn, sub.authorization_id)
        attempt = attempt_store.get(conn, sub.attempt_id)
        if task is None or authorization is None or attempt is None:
            continue
        use_case = "lease_expired_after_fence"
        try:
            new_sub = transition(SUBMISSION_TRANSITIONS, SubmissionState(sub.state), use_case)
            new_task = transition(TASK_TRANSITIONS, TaskState(task.state), use_case)
        except InvalidTransition:
            continue  # an inconsistent row is left for a person; it is visible in the task detail
        if not submission_store.mark_reconciliation_required(conn, sub.id, reason=RECONCILIATION_REASON):
            continue
        if new_sub != SubmissionState.RECONCILIATION_REQUIRED:
            raise AssertionError("state table changed")
        set_task_state(conn, task, new_task.value, at=at, reason=RECONCILIATION_REASON)
        if authorization.state == AuthorizationState.FENCED:
            new_auth = transition(AUTHORIZATION_TRANSITIONS, AuthorizationState.FENCED, use_case)
            set_authorization_state(conn, authorization, new_auth.value, at=at, reason=RECONCILIATION_REASON)
        if attempt.state == AttemptState.OPEN:
            transition(ATTEMPT_TRANSITIONS, AttemptState.OPEN, "close")
            attempt_store.close(conn, attempt.id, "LEASE_EXPIRED_AFTER_FENCE", at)
            supervision_tx.void_for_attempt(conn, attempt.id, actor=SYSTEM, at=at, why="LEASE_EXPIRED_AFTER_FENCE")
        audit_tx.record(
            conn,
            SYSTEM,
            "submission.lease_expired",
            "task",
            task.id,
            at=at,
            generation=attempt.claim_generation,
            detail={
                "submission_id": sub.id,
                "attempt_id": attempt.id,
                "lease_expires_at": attempt.lease_expires_at,
                "task_version": task.version + 1,
            },
        )
        changed += 1
    # A full batch in which nothing could change (inconsistent rows left for a person) must not
    # make start-up loop forever: only a full batch that made progress asks for another pass.
    return changed, len(found) == BATCH and changed > 0


def _expire_authorizations(conn: sqlite3.Connection, at: str) -> tuple[int, bool]:
    found = auth_store.expired_active(conn, at, BATCH)
    changed = 0
    for authorization in found:
        new_auth = transition(AUTHORIZATION_TRANSITIONS, AuthorizationState(authorization.state), "expire")
        if not set_authorization_state(conn, authorization, new_auth.value, at=at, reason="authorization_expired"):
            continue
        task = task_store.get(conn, authorization.task_id)
        task_version = None
        if task is not None and task.state == TaskState.PENDING:
            new_task = transition(TASK_TRANSITIONS, TaskState.PENDING, "authorization_expired")
            if set_task_state(conn, task, new_task.value, at=at, reason="authorization_expired"):
                task_version = task.version + 1
        audit_tx.record(
            conn,
            SYSTEM,
            "authorization.expire",
            "task",
            authorization.task_id,
            at=at,
            detail={
                "authorization_id": authorization.id,
                "expires_at": authorization.expires_at,
                "task_version": task_version,
            },
        )
        changed += 1
    # A full batch in which nothing could change (inconsistent rows left for a person) must not
    # make start-up loop forever: only a full batch that made progress asks for another pass.
    return changed, len(found) == BATCH and changed > 0


def sweep(conn: sqlite3.Connection, now: datetime) -> SweepReport:
    """One bounded pass (run as a write job). Safe to run any number of times."""
    at = to_wire(now)
    fenced, more_fenced = _expire_fenced(conn, now, at)
    expired, more_expired = _expire_authorizations(conn, at)
    return SweepReport(fenced, expired, more_fenced or more_expired)
