"""SQL for one-time authorizations and start-purchases request records."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from cmbuyer.server.domain.states import AUTHORIZATION_TRANSITIONS, AuthorizationState, StateChanges
from cmbuyer.server.store._sql import StateTable, compare_and_set

# Moves into these states stamp closed_at/close_reason (migration 0005: closed_at IS NULL exactly while live).
_TERMINAL = frozenset({AuthorizationState.CLOSED, AuthorizationState.EXPIRED, AuthorizationState.CONSUMED})


@dataclass(frozen=True)
class Authorization:
    """An authorization: the task snapshot frozen at start-purchases, its state and expiry."""

    id: str
    task_id: str
    task_version: int
    title: str
    product_url: str
    goods_id: str
    sku_options: str  # canonical JSON of [[dimension, value], ...] (migration 0011, cmbuyer.schemas.sku)
    quantity: int
    max_total_price: str
    state: str
    start_key: str
    created_by: str
    created_at: str
    expires_at: str
    closed_at: str | None
    close_reason: str | None


_TABLE = StateTable("authorizations", Authorization, StateChanges("authorization", AUTHORIZATION_TRANSITIONS))
_row = _TABLE.row


insert = _TABLE.insert  # a new authorization (state ACTIVE by the caller)


get = _TABLE.get  # one authorization by id, or None


def live_for_task(conn: sqlite3.Connection, task_id: str) -> Authorization | None:
    """The task's ACTIVE/CLAIMED/FENCED authorization, if any (at most one by a unique index)."""
    return _TABLE.first(conn, "task_id = ? AND state IN ('ACTIVE','CLAIMED','FENCED')", (task_id,))


def latest_for_task(conn: sqlite3.Connection, task_id: str) -> Authorization | None:
    """The task's newest authorization in any state, or None."""
    return _TABLE.first(conn, "task_id = ? ORDER BY created_at DESC, id DESC LIMIT 1", (task_id,))


def for_task(conn: sqlite3.Connection, task_id: str) -> list[Authorization]:
    """Every authorization of a task, oldest first."""
    return [
        _row(r)
        for r in conn.execute("SELECT * FROM authorizations WHERE task_id = ? ORDER BY created_at, id", (task_id,))
    ]


def set_state(
    conn: sqlite3.Connection,
    authorization_id: str,
    *,
    expected_state: str,
    new_state: str,
    at: str,
    reason: str | None = None,
) -> bool:
    """CAS on state; terminal moves also stamp ``closed_at``/``close_reason``. False when it lost the race
    (nothing written). Raises :class:`~cmbuyer.server.domain.states.StateChangeNotAllowed` (nothing
    written) for a pair no use-case of ``AUTHORIZATION_TRANSITIONS`` produces."""
    # claim and fence move only the state (the leaner statement; claim-next runs it every time)
    terminal = new_state in _TERMINAL
    return compare_and_set(
        conn,
        _TABLE,
        authorization_id,
        expected_state=expected_state,
        new_state=new_state,
        stamps={"closed_at": at, "close_reason": reason} if terminal else None,
    )


def expired_active(conn: sqlite3.Connection, now: str, limit: int = 500) -> list[Authorization]:
    """ACTIVE authorizations whose expiry is at or before ``now`` (equal = expired, docs/api.md
    "Expiry and recovery")."""
    return [
        _row(r)
        for r in conn.execute(
            "SELECT * FROM authorizations WHERE state = 'ACTIVE' AND expires_at <= ? ORDER BY expires_at LIMIT ?",
            (now, limit),
        )
    ]


@dataclass(frozen=True)
class Candidate:
    """A claimable authorization and the current version of its task (equal to the snapshot's)."""

    authorization: Authorization
    task_version: int


_AUTH_COLUMNS = ", ".join(f"a.{f}" for f in _TABLE.fields)


def next_candidate(conn: sqlite3.Connection, now: str) -> Candidate | None:
    """The oldest claimable authorization (docs/api.md "POST /api/v1/tasks/claim-next"): ACTIVE, ``expires_at > now``
    (strict), its task PENDING at exactly the snapshot's version, and every snapshot field equal to the task's current
    field. Rows whose snapshot no longer matches are skipped (fail closed), never claimed. ``sku_options`` is
    canonical text (migration 0011), so equal options are equal strings.

    Order: ``authorizations.created_at, id`` — stable. ``INDEXED BY`` pins the walk to the partial index
    ``authorizations_active`` (already in that order, so the first matching row ends the search);
    without it the planner prefers ``tasks_state_created`` plus a sort of every PENDING task, which
    measured ~7 ms instead of ~0.01 ms at 2,000 pending tasks.
    """
    r = conn.execute(
        f"SELECT {_AUTH_COLUMNS}, t.version AS current_task_version"
        " FROM authorizations a INDEXED BY authorizations_active JOIN tasks t ON t.id = a.task_id"
        " WHERE a.state = 'ACTIVE' AND a.expires_at > ? AND t.state = 'PENDING' AND t.version = a.task_version"
        " AND t.title = a.title AND t.product_url = a.product_url AND t.goods_id = a.goods_id"
        " AND t.sku_options = a.sku_options AND t.quantity = a.quantity"
        " AND t.max_total_price = a.max_total_price"
        " ORDER BY a.created_at, a.id LIMIT 1",
        (now,),
    ).fetchone()
    if r is None:
        return None
    values = tuple(r)  # positional: the SELECT lists the dataclass fields in order, then the task version
    return Candidate(Authorization(*values[:-1]), int(values[-1]))


def start_request(conn: sqlite3.Connection, start_key: str) -> tuple[str, str] | None:
    """``(request_hash, response_json)`` stored for ``start_key``, or None."""
    r = conn.execute(
        "SELECT request_hash, response_json FROM start_requests WHERE start_key = ?", (start_key,)
    ).fetchone()
    return None if r is None else (r[0], r[1])


def record_start_request(
    conn: sqlite3.Connection, start_key: str, actor: str, request_hash: str, response_json: str, at: str
) -> None:
    """Store a successful start-purchases response for replay."""
    conn.execute(
        "INSERT INTO start_requests (start_key, admin_actor, request_hash, response_json, created_at)"
        " VALUES (?, ?, ?, ?, ?)",
        (start_key, actor, request_hash, response_json, at),
    )
