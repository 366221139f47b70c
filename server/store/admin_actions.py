"""Writes used only by the admin use-cases (services/admin_actions.py): closing a task's open attempt
on reset/cancel and recording a human reconciliation on an order submission. Each UPDATE is a
compare-and-set on the current state, so a lost race writes nothing and returns False."""

from __future__ import annotations

import sqlite3


def close_open_attempt_of_task(conn: sqlite3.Connection, task_id: str, reason: str, at: str) -> str | None:
    """Close the task's OPEN attempt (claim) with ``reason``; returns its id, or None when none was open."""
    r = conn.execute("SELECT id FROM attempts WHERE task_id = ? AND state = 'OPEN'", (task_id,)).fetchone()
    if r is None:
        return None
    conn.execute(
        "UPDATE attempts SET state = 'CLOSED', close_reason = ?, closed_at = ? WHERE id = ? AND state = 'OPEN'",
        (reason, at, r[0]),
    )
    return str(r[0])


def reconcile_submission(
    conn: sqlite3.Connection,
    submission_id: str,
    *,
    expected_state: str,
    new_state: str,
    reconciled_by: str,
    note: str,
    at: str,
) -> bool:
    """CAS the submission from ``expected_state`` to ``new_state`` and stamp who/when/note."""
    cur = conn.execute(
        "UPDATE order_submissions SET state = ?, reconciled_by = ?, reconciliation_note = ?, reconciled_at = ?"
        " WHERE id = ? AND state = ?",
        (new_state, reconciled_by, note, at, submission_id, expected_state),
    )
    return cur.rowcount == 1
