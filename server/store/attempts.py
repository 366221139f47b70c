"""SQL for attempts (each carries its claim: device, session, generation, nonce, token hash, lease).

The state changes only through :func:`set_state` (OPEN → CLOSED is the one transition; :func:`close`
and :func:`close_open_for_task` are its named uses), so the statement that closes an attempt exists once.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from cmbuyer.server.domain.states import ATTEMPT_TRANSITIONS, AttemptState, StateChanges
from cmbuyer.server.store._sql import StateTable, compare_and_set


@dataclass(frozen=True)
class Attempt:
    """An attempt row. ``nonce``/``token_hash`` are secrets-adjacent: never log or render them."""

    id: str
    task_id: str
    authorization_id: str
    device_id: str
    session_id: str
    claim_generation: int
    nonce: bytes
    token_hash: bytes
    claimed_task_version: int
    lease_expires_at: str
    state: str
    close_reason: str | None
    response_json: str
    next_event_seq: int
    created_at: str
    closed_at: str | None
    # migration 0007: the device–pack pair the attempt ran under and whether it needs a person's
    # approval before the fence (1) — decided once, at claim time. NULL/0 on attempts older than 0007.
    pack_key: str | None = None
    supervised: int = 0

    def __repr__(self) -> str:
        return f"Attempt(id={self.id!r}, task_id={self.task_id!r}, state={self.state!r})"


_TABLE = StateTable("attempts", Attempt, StateChanges("attempt", ATTEMPT_TRANSITIONS))
_row = _TABLE.row


# a new OPEN attempt (unique per authorization; one OPEN per device — both by index)
insert = _TABLE.insert


get = _TABLE.get  # one attempt by id, or None


def open_for_device(conn: sqlite3.Connection, device_id: str) -> Attempt | None:
    """The device's OPEN attempt (at most one, by a partial unique index), or None."""
    return _TABLE.first(conn, "device_id = ? AND state = 'OPEN'", (device_id,))


def open_for_task(conn: sqlite3.Connection, task_id: str) -> Attempt | None:
    """The task's OPEN attempt, or None."""
    return _TABLE.first(conn, "task_id = ? AND state = 'OPEN'", (task_id,))


def set_lease(conn: sqlite3.Connection, attempt_id: str, *, expected: str, new: str) -> bool:
    """CAS the lease end from exactly ``expected`` to ``new`` on an OPEN attempt (docs/api.md
    "POST /api/v1/tasks/{task_id}/lease/renew")."""
    cur = conn.execute(
        "UPDATE attempts SET lease_expires_at = ? WHERE id = ? AND state = 'OPEN' AND lease_expires_at = ?",
        (new, attempt_id, expected),
    )
    return cur.rowcount == 1


def set_state(
    conn: sqlite3.Connection, attempt_id: str, *, expected_state: str, new_state: str, reason: str, at: str
) -> bool:
    """CAS ``expected_state`` → ``new_state``, stamping ``close_reason``/``closed_at`` (migration 0002: a
    CLOSED attempt has both). False when the attempt was not in ``expected_state`` (nothing written).

    Raises :class:`~cmbuyer.server.domain.states.StateChangeNotAllowed` (nothing written) for a pair no
    use-case of ``ATTEMPT_TRANSITIONS`` produces.
    """
    return compare_and_set(
        conn,
        _TABLE,
        attempt_id,
        expected_state=expected_state,
        new_state=new_state,
        stamps={"close_reason": reason, "closed_at": at},
    )


def close(conn: sqlite3.Connection, attempt_id: str, reason: str, at: str) -> bool:
    """OPEN → CLOSED with a reason (through :func:`set_state`); False when it was not OPEN."""
    return set_state(
        conn, attempt_id, expected_state=AttemptState.OPEN, new_state=AttemptState.CLOSED, reason=reason, at=at
    )


def close_open_for_task(conn: sqlite3.Connection, task_id: str, reason: str, at: str) -> str | None:
    """Close the task's OPEN attempt (claim) with ``reason`` (admin reset, cancel, reconcile); returns its id,
    or None when none was open (nothing written)."""
    attempt = open_for_task(conn, task_id)
    if attempt is None:
        return None
    close(conn, attempt.id, reason, at)
    return attempt.id


def take_event_seqs(conn: sqlite3.Connection, attempt_id: str, count: int) -> int:
    """Reserve ``count`` consecutive event sequence numbers; returns the first."""
    r = conn.execute(
        "UPDATE attempts SET next_event_seq = next_event_seq + ? WHERE id = ? RETURNING next_event_seq - ?",
        (count, attempt_id, count),
    ).fetchone()
    return int(r[0])


def for_secret_check(conn: sqlite3.Connection, newest: int = 3) -> list[Attempt]:
    """Every OPEN attempt plus the ``newest`` others: the claims whose tokens a restarted server must be
    able to rebuild (start-up secret check, docs/api.md "Start-up")."""
    rows = conn.execute(
        "SELECT * FROM attempts WHERE state = 'OPEN'"
        " UNION SELECT * FROM (SELECT * FROM attempts ORDER BY created_at DESC, id DESC LIMIT ?)",
        (newest,),
    )
    return [_row(r) for r in rows]
