"""Human use-cases on tasks after start-purchases (docs/admin.md "Human actions").

Each function is one synchronous job run inside one write transaction (``Database.write``); it
checks the expected task version, computes the new states only through
:func:`cmbuyer.server.domain.states.transition`, and writes its audit row in the same transaction.

Check order (so the most important refusal wins): unknown task → 404 ``not_found``; a fence row
exists → 409 ``submission_fenced`` (reset/cancel); stale version or authorization → 409
``version_conflict``; state does not allow the use-case → 409 ``invalid_state``.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from cmbuyer.server.clock import to_wire
from cmbuyer.server.domain import values
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import DomainError, NotFound, ValidationFailed, refusal
from cmbuyer.server.domain.states import (
    AUTHORIZATION_TRANSITIONS,
    FENCED_TASK_STATES,
    SUBMISSION_TRANSITIONS,
    TASK_TRANSITIONS,
    AuthorizationState,
    SubmissionState,
    TaskState,
    transition,
)
from cmbuyer.server.store import attempts as attempt_store
from cmbuyer.server.store import authorizations as auth_store
from cmbuyer.server.store import submissions as submission_store
from cmbuyer.server.store import tasks as task_store
from cmbuyer.server.store.queries import admin as admin_queries
from cmbuyer.server.tx import audit as audit_tx
from cmbuyer.server.tx import supervision as supervision_tx
from cmbuyer.server.tx.common import Actor, load
from cmbuyer.server.tx.moves import set_authorization_state, set_task_state

NOTE_MAX = 500
RECONCILE_OUTCOMES = {"created": "reconcile_created", "not_created": "reconcile_not_created"}
# use-case of a human action before the fence → the close reason of its authorization and attempt
CLOSE_REASONS = {"reset_to_draft": "RESET", "cancel": "CANCELLED", "release": "RESET"}


@dataclass(frozen=True)
class ActionResult:
    """What an admin action did: the task id, its new state and version."""

    task_id: str
    state: str
    version: int


def _stale() -> DomainError:
    return refusal(Code.VERSION_CONFLICT).because("task_changed")


def _load(conn: sqlite3.Connection, task_id: str) -> task_store.Task:
    return load(conn, task_store.get, task_id, NotFound().because("task"))


def _move(
    conn: sqlite3.Connection,
    task: task_store.Task,
    new_state: str,
    *,
    action: str,
    reason: str,
    actor: Actor,
    at: str,
    request_id: str | None,
    detail: dict[str, Any],
) -> ActionResult:
    """The last step of every action here: move ``task`` (as read: its version and state) to ``new_state``
    with ``reason`` — a miss is ``409 version_conflict`` — and write the action's audit row, whose detail
    always names ``from``, ``to`` and the new ``task_version`` besides ``detail``."""
    if not set_task_state(conn, task, new_state, at=at, reason=reason):
        raise _stale()
    audit_tx.record(
        conn,
        actor,
        action,
        "task",
        task.id,
        at=at,
        request_id=request_id,
        detail={"from": task.state, "to": new_state, "task_version": task.version + 1, **detail},
    )
    return ActionResult(task.id, new_state, task.version + 1)


def close_before_fence(
    conn: sqlite3.Connection,
    task_id: str,
    expected_version: int,
    expected_authorization_id: str | None,
    actor: Actor,
    now: datetime,
    request_id: str | None = None,
    *,
    use_case: str,
) -> ActionResult:
    """The human actions before the fence, ``use_case`` a key of :data:`CLOSE_REASONS` (called as
    :data:`reset_to_draft` and :data:`cancel`): ``POST /tasks/{id}/reset-to-draft`` (``"reset_to_draft"``:
    PENDING|CLAIMED|ORDERING|FAILED|EXPIRED → DRAFT) and ``POST /tasks/{id}/cancel`` (``"cancel"``: the same
    and DRAFT → CANCELLED).

    Closes the live authorization (ACTIVE/CLAIMED → CLOSED) and any OPEN attempt, both with the use-case's
    reason (RESET, CANCELLED). ``expected_authorization_id``, when given, must be the task's newest
    authorization (docs/admin.md "Human actions": reset checks version, authorization id and "no order_submission").
    Raises NotFound, Conflict(``submission_fenced``/``version_conflict``), InvalidTransition.
    """
    reason = CLOSE_REASONS[use_case]
    task = _load(conn, task_id)
    if TaskState(task.state) in FENCED_TASK_STATES or admin_queries.submission_exists_for_task(conn, task.id):
        raise refusal(Code.SUBMISSION_FENCED).because("reconcile_only")
    if task.version != expected_version:
        raise _stale()
    latest = auth_store.latest_for_task(conn, task.id)
    if expected_authorization_id is not None and (latest is None or latest.id != expected_authorization_id):
        raise _stale()
    new_state = transition(TASK_TRANSITIONS, TaskState(task.state), use_case)
    at = to_wire(now)
    closed_auth: str | None = None
    live = auth_store.live_for_task(conn, task.id)
    if live is not None:
        next_auth = transition(AUTHORIZATION_TRANSITIONS, AuthorizationState(live.state), "close")
        if not set_authorization_state(conn, live, next_auth, at=at, reason=reason):
            raise _stale()
        closed_auth = live.id
    closed_attempt = attempt_store.close_open_for_task(conn, task.id, reason, at)
    if closed_attempt is not None:
        supervision_tx.void_for_attempt(conn, closed_attempt, actor=actor, at=at, why=reason)
    return _move(
        conn,
        task,
        new_state,
        action=f"task.{use_case}",
        reason=reason,
        actor=actor,
        at=at,
        request_id=request_id,
        detail={"closed_authorization_id": closed_auth, "closed_attempt_id": closed_attempt},
    )


reset_to_draft = partial(close_before_fence, use_case="reset_to_draft")  # POST /tasks/{id}/reset-to-draft


def release_held(
    conn: sqlite3.Connection,
    task_id: str,
    expected_version: int,
    actor: Actor,
    now: datetime,
    request_id: str | None = None,
) -> ActionResult:
    """放行 on the held-tasks page (``POST /held/release``): a person checked a HELD task against
    the phones' journals. Without a replicated fence it goes back to DRAFT like a reset (its claim and
    authorization closed, reason RESET; audit ``task.release``) and must be started again; with one, back to
    SUBMITTING (audit ``task.release_fenced``), where the sweeper moves it to reconciliation once its lease
    has ended. Raises NotFound, Conflict(``version_conflict``), InvalidTransition (not HELD)."""
    task = _load(conn, task_id)
    if task.version != expected_version:
        raise _stale()
    if TaskState(task.state) != TaskState.HELD:
        transition(TASK_TRANSITIONS, TaskState(task.state), "release")  # raises: only HELD is released
    if not admin_queries.submission_exists_for_task(conn, task.id):
        return close_before_fence(conn, task_id, expected_version, None, actor, now, request_id, use_case="release")
    new_state = transition(TASK_TRANSITIONS, TaskState.HELD, "release_fenced")
    return _move(
        conn,
        task,
        new_state,
        action="task.release_fenced",
        reason="released_after_restore",
        actor=actor,
        at=to_wire(now),
        request_id=request_id,
        detail={},
    )


cancel = partial(close_before_fence, use_case="cancel")  # POST /tasks/{id}/cancel


def mark_paid(
    conn: sqlite3.Connection,
    task_id: str,
    expected_version: int,
    actor: Actor,
    now: datetime,
    request_id: str | None = None,
) -> ActionResult:
    """``POST /tasks/{id}/mark-paid``: WAITING_PAYMENT → PAID after a person paid in the app.
    Raises NotFound, Conflict(``version_conflict``), InvalidTransition (``invalid_state``)."""
    task = _load(conn, task_id)
    if task.version != expected_version:
        raise _stale()
    new_state = transition(TASK_TRANSITIONS, TaskState(task.state), "mark_paid")
    at = to_wire(now)
    return _move(
        conn,
        task,
        new_state,
        action="task.mark_paid",
        reason="PAID_BY_PERSON",
        actor=actor,
        at=at,
        request_id=request_id,
        detail={},
    )


def parse_reconcile(raw: dict[str, Any]) -> tuple[str, str, int]:
    """Validate ``{"outcome": "created"|"not_created", "note": str, "expected_task_version": int}``;
    returns ``(outcome, note, version)``. The note (1–500 characters) is what the person checked."""
    outcome = raw.get("outcome")
    if outcome not in RECONCILE_OUTCOMES:
        raise ValidationFailed("outcome", "").because("reconcile_outcome")
    note = raw.get("note")
    if not isinstance(note, str) or not note.strip() or len(note) > NOTE_MAX:
        raise ValidationFailed("note", "").because("reconcile_note", max=str(NOTE_MAX))
    values.check_text("note", "核对说明", note, multiline=True)
    version = raw.get("expected_task_version")
    if type(version) is not int or version < 1:
        raise ValidationFailed("expected_task_version", "").because("task_version")
    return str(outcome), note.strip(), version


def reconcile(
    conn: sqlite3.Connection,
    submission_id: str,
    outcome: str,
    note: str,
    expected_version: int,
    actor: Actor,
    now: datetime,
    request_id: str | None = None,
) -> ActionResult:
    """``POST /order-submissions/{sid}/reconcile``: a person records whether the pending-payment order
    exists. Submission RECONCILIATION_REQUIRED → CREATED (task → WAITING_PAYMENT) or NOT_CREATED
    (task → CLOSED_NOT_CREATED). The authorization ends CONSUMED; an attempt still OPEN is closed
    (RECONCILED). It never re-opens the fence, issues an authorization or contacts a device.
    Raises NotFound, Conflict(``version_conflict``), InvalidTransition (``invalid_state``).
    """
    sub = load(conn, admin_queries.submission, submission_id, NotFound().because("submission"))
    task = _load(conn, sub["task_id"])
    if task.version != expected_version:
        raise _stale()
    use_case = RECONCILE_OUTCOMES[outcome]
    new_sub = transition(SUBMISSION_TRANSITIONS, SubmissionState(sub["state"]), use_case)
    new_task = transition(TASK_TRANSITIONS, TaskState(task.state), use_case)
    at = to_wire(now)
    who = f"{actor.kind}:{actor.id}"
    if not submission_store.reconcile(
        conn, sub["id"], expected_state=sub["state"], new_state=new_sub, reconciled_by=who, note=note, at=at
    ):
        raise _stale()
    authorization = auth_store.get(conn, sub["authorization_id"])
    if authorization is not None and authorization.state == AuthorizationState.FENCED:
        consumed = transition(AUTHORIZATION_TRANSITIONS, AuthorizationState.FENCED, "reconcile")
        set_authorization_state(conn, authorization, consumed, at=at, reason="RECONCILED")
    closed_attempt = attempt_store.close_open_for_task(conn, task.id, "RECONCILED", at)
    if closed_attempt is not None:
        supervision_tx.void_for_attempt(conn, closed_attempt, actor=actor, at=at, why="RECONCILED")
    return _move(
        conn,
        task,
        new_task,
        action="submission.reconcile",
        reason=f"RECONCILED_{outcome.upper()}",
        actor=actor,
        at=at,
        request_id=request_id,
        detail={"submission_id": sub["id"], "outcome": outcome, "submission_state": new_sub, "note": note},
    )
