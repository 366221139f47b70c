"""SQL for step events (append-only per attempt; sequence numbers come from ``attempts.next_event_seq``)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass


@dataclass(frozen=True)
class NewEvent:
    """One validated event of a batch (docs/api.md "POST /api/v1/tasks/{id}/events": fixed step/outcome/reason_code +
    short summary)."""

    step: str
    outcome: str
    reason_code: str | None
    summary: str
    occurred_at: str


def append(
    conn: sqlite3.Connection,
    *,
    task_id: str,
    attempt_id: str,
    batch_key: str,
    first_seq: int,
    events: list[NewEvent],
    received_at: str,
) -> None:
    """Insert ``events`` with consecutive sequence numbers starting at ``first_seq``."""
    conn.executemany(
        "INSERT INTO events (task_id, attempt_id, seq, batch_key, step, outcome, reason_code, summary, occurred_at,"
        " received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                task_id,
                attempt_id,
                first_seq + i,
                batch_key,
                e.step,
                e.outcome,
                e.reason_code,
                e.summary,
                e.occurred_at,
                received_at,
            )
            for i, e in enumerate(events)
        ],
    )
