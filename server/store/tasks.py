"""SQL for tasks. Version checks are part of each UPDATE (compare-and-set on ``version``); the state
changes only through :func:`set_state`."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from cmbuyer.server.domain.states import TASK_TRANSITIONS, StateChanges

_CHANGES = StateChanges("task", TASK_TRANSITIONS)


@dataclass(frozen=True)
class Task:
    """A task row. ``max_total_price`` is canonical decimal text; times are canonical UTC text."""

    id: str
    create_key: str
    create_hash: str
    title: str
    product_url: str
    goods_id: str
    sku_color: str
    sku_size: str | None  # None: one-dimension goods (migration 0006)
    quantity: int
    max_total_price: str
    state: str
    version: int
    state_reason: str | None
    created_by: str
    created_at: str
    updated_at: str


def from_row(r: sqlite3.Row) -> Task:
    """A ``tasks`` row (``SELECT *``) as a :class:`Task`."""
    return Task(
        r["id"],
        r["create_key"],
        r["create_hash"],
        r["title"],
        r["product_url"],
        r["goods_id"],
        r["sku_color"],
        r["sku_size"],
        r["quantity"],
        r["max_total_price"],
        r["state"],
        r["version"],
        r["state_reason"],
        r["created_by"],
        r["created_at"],
        r["updated_at"],
    )


def insert(conn: sqlite3.Connection, task: Task) -> None:
    """Insert a new task row (state DRAFT, version 1 by the caller)."""
    conn.execute(
        "INSERT INTO tasks (id, create_key, create_hash, title, product_url, goods_id, sku_color, sku_size,"
        " quantity, max_total_price, state, version, state_reason, created_by, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            task.id,
            task.create_key,
            task.create_hash,
            task.title,
            task.product_url,
            task.goods_id,
            task.sku_color,
            task.sku_size,
            task.quantity,
            task.max_total_price,
            task.state,
            task.version,
            task.state_reason,
            task.created_by,
            task.created_at,
            task.updated_at,
        ),
    )


def get(conn: sqlite3.Connection, task_id: str) -> Task | None:
    """One task by id, or None."""
    r = conn.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone()
    return None if r is None else from_row(r)


def by_create_key(conn: sqlite3.Connection, create_key: str) -> Task | None:
    """The task created with ``create_key``, or None."""
    r = conn.execute("SELECT * FROM tasks WHERE create_key = ?", (create_key,)).fetchone()
    return None if r is None else from_row(r)


def set_state(
    conn: sqlite3.Connection,
    task_id: str,
    *,
    expected_version: int,
    expected_state: str,
    new_state: str,
    at: str,
    reason: str | None = None,
) -> bool:
    """CAS: move the task to ``new_state`` and bump the version when both version and state still match.

    Returns False (nothing written) when another writer got there first. Raises
    :class:`~cmbuyer.server.domain.states.StateChangeNotAllowed` (nothing written) when no use-case of
    ``TASK_TRANSITIONS`` moves ``expected_state`` to ``new_state``.
    """
    _CHANGES.check(expected_state, new_state)
    cur = conn.execute(
        "UPDATE tasks SET state = ?, version = version + 1, state_reason = ?, updated_at = ?"
        " WHERE id = ? AND version = ? AND state = ?",
        (new_state, reason, at, task_id, expected_version, expected_state),
    )
    return cur.rowcount == 1
