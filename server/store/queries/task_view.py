"""Read-only SQL for task detail views (admin pages, ``cmbuyer-server task show``).

Returns plain dicts of stored columns; never token hashes, nonces or claim tokens.
"""

from __future__ import annotations

import sqlite3
from typing import Any

_ATTEMPT_COLUMNS = (
    "id, task_id, authorization_id, device_id, session_id, claim_generation, claimed_task_version,"
    " lease_expires_at, state, close_reason, created_at, closed_at"
)


def attempts_for_task(conn: sqlite3.Connection, task_id: str) -> list[dict[str, Any]]:
    """The task's attempts with their claim/lease columns (no secrets), oldest first."""
    return [
        dict(r)
        for r in conn.execute(
            f"SELECT {_ATTEMPT_COLUMNS} FROM attempts WHERE task_id = ? ORDER BY created_at, id", (task_id,)
        )
    ]


def submissions_for_task(conn: sqlite3.Connection, task_id: str) -> list[dict[str, Any]]:
    """The task's order submissions (fence rows), oldest first."""
    return [
        dict(r)
        for r in conn.execute("SELECT * FROM order_submissions WHERE task_id = ? ORDER BY created_at, id", (task_id,))
    ]


def events_for_task(conn: sqlite3.Connection, task_id: str, limit: int = 500) -> list[dict[str, Any]]:
    """The task's step events in arrival order."""
    return [
        dict(r)
        for r in conn.execute(
            "SELECT attempt_id, seq, step, outcome, reason_code, summary, occurred_at, received_at FROM events"
            " WHERE task_id = ? ORDER BY id LIMIT ?",
            (task_id, limit),
        )
    ]


def evidence_for_task(conn: sqlite3.Connection, task_id: str) -> list[dict[str, Any]]:
    """The task's evidence assets (metadata only), oldest first."""
    return [
        dict(r)
        for r in conn.execute(
            "SELECT id, attempt_id, kind, sha256, byte_size, width, height, captured_at, created_at"
            " FROM evidence_assets WHERE task_id = ? ORDER BY created_at, id",
            (task_id,),
        )
    ]
