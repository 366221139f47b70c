"""State writes from the row a job read, each proven by its row count.

A job decides a move with :func:`cmbuyer.server.domain.states.transition` (docs/state-machines.md) on rows
it read inside its write transaction; :func:`set_task_state` and :func:`set_authorization_state` then
compare-and-set from exactly what was read and say whether it matched. The caller says what a miss means:
``409 version_conflict`` for the admin actions, a skipped row for the sweeper. In the device use-cases
(claim, events, fence, fail, result) no other writer can run between the read and the write, so a miss
means the invariants broke: :func:`move_task`, :func:`move_authorization` and :func:`close_attempt` raise
:class:`~cmbuyer.server.domain.errors.BrokenInvariant` (→ roll back, 503), never a 409.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from cmbuyer.server.domain.errors import BrokenInvariant
from cmbuyer.server.store import attempts as attempt_store
from cmbuyer.server.store import authorizations as auth_store
from cmbuyer.server.store import tasks as task_store
from cmbuyer.server.store.authorizations import Authorization
from cmbuyer.server.store.tasks import Task
from cmbuyer.server.tx import supervision as supervision_tx
from cmbuyer.server.tx.common import Actor


@dataclass(frozen=True)
class TaskRead:
    """What a job read of a task when it holds no :class:`Task` row: its id and the version and state the
    compare-and-set expects (claim-next reads them with its candidate authorization)."""

    id: str
    version: int
    state: str


def set_task_state(
    conn: sqlite3.Connection, task: Task | TaskRead, new_state: str, *, at: str, reason: str | None = None
) -> bool:
    """Compare-and-set ``task`` from exactly the version and state it was read with to ``new_state``
    (version + 1); False when the row is no longer so (nothing written). The caller says what a miss means."""
    return task_store.set_state(
        conn,
        task.id,
        expected_version=task.version,
        expected_state=task.state,
        new_state=new_state,
        at=at,
        reason=reason,
    )


def set_authorization_state(
    conn: sqlite3.Connection, authorization: Authorization, new_state: str, *, at: str, reason: str | None = None
) -> bool:
    """Compare-and-set ``authorization`` from the state it was read with to ``new_state``; False when it is no
    longer in that state (nothing written). The caller says what a miss means."""
    return auth_store.set_state(
        conn, authorization.id, expected_state=authorization.state, new_state=new_state, at=at, reason=reason
    )


def move_task(
    conn: sqlite3.Connection, task: Task | TaskRead, new_state: str, *, at: str, reason: str | None = None
) -> int:
    """:func:`set_task_state` in a device job; returns the new version (+ 1).

    Raises BrokenInvariant when the row changed under the write lock."""
    if not set_task_state(conn, task, new_state, at=at, reason=reason):
        raise BrokenInvariant("task changed under the write lock")
    return task.version + 1


def move_authorization(
    conn: sqlite3.Connection, authorization: Authorization, new_state: str, *, at: str, reason: str | None = None
) -> None:
    """:func:`set_authorization_state` in a device job; raises BrokenInvariant when the row changed under
    the write lock."""
    if not set_authorization_state(conn, authorization, new_state, at=at, reason=reason):
        raise BrokenInvariant("authorization changed under the write lock")


def close_attempt(conn: sqlite3.Connection, attempt_id: str, reason: str, *, actor: Actor, at: str) -> None:
    """Close the OPEN attempt with ``reason`` and void its live approval request in the same transaction
    (a closed attempt never keeps a WAITING or APPROVED request, see
    :func:`cmbuyer.server.tx.supervision.void_for_attempt`). Raises BrokenInvariant when it was not OPEN."""
    if not attempt_store.close(conn, attempt_id, reason, at):
        raise BrokenInvariant("attempt changed under the write lock")
    supervision_tx.void_for_attempt(conn, attempt_id, actor=actor, at=at, why=reason)
