"""SQL for admin sessions (``admin_sessions``) and failed-login throttling (``admin_login_throttle``).

Only SHA-256 of a session id is ever stored or looked up (a copy of the database does not contain
live session ids). Times are canonical UTC text, so string comparison is time comparison.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass


@dataclass(frozen=True)
class SessionRow:
    """A live-or-dead session joined with its admin; ``id_hash`` is 32 bytes."""

    id_hash: bytes
    admin_id: str
    username: str
    admin_disabled: bool
    created_at: str
    last_seen_at: str
    expires_at: str
    revoked_at: str | None


@dataclass(frozen=True)
class ThrottleRow:
    """The stored record of one throttle key (rule: domain/login_throttle.py). ``failures``: guesses
    admitted since the key was last forgotten (counted before the password is checked); the column
    ``window_start`` holds the time of the last admitted guess; ``locked_until``: end of the current
    back-off or None."""

    throttle_key: str
    failures: int
    window_start: str
    locked_until: str | None


def insert(conn: sqlite3.Connection, id_hash: bytes, admin_id: str, *, created_at: str, expires_at: str) -> None:
    """Insert a new session (``last_seen_at`` = ``created_at``)."""
    conn.execute(
        "INSERT INTO admin_sessions (id_hash, admin_id, created_at, last_seen_at, expires_at) VALUES (?, ?, ?, ?, ?)",
        (id_hash, admin_id, created_at, created_at, expires_at),
    )


def get(conn: sqlite3.Connection, id_hash: bytes) -> SessionRow | None:
    """The session with this id hash (any state) joined with its admin, or None."""
    r = conn.execute(
        "SELECT s.id_hash, s.admin_id, a.username, a.disabled, s.created_at, s.last_seen_at, s.expires_at,"
        " s.revoked_at FROM admin_sessions s JOIN admins a ON a.id = s.admin_id WHERE s.id_hash = ?",
        (id_hash,),
    ).fetchone()
    if r is None:
        return None
    return SessionRow(bytes(r[0]), r[1], r[2], bool(r[3]), r[4], r[5], r[6], r[7])


def touch(conn: sqlite3.Connection, id_hash: bytes, at: str) -> None:
    """Move ``last_seen_at`` forward (never backward) on a live session."""
    conn.execute(
        "UPDATE admin_sessions SET last_seen_at = ? WHERE id_hash = ? AND revoked_at IS NULL AND last_seen_at < ?",
        (at, id_hash, at),
    )


def revoke(conn: sqlite3.Connection, id_hash: bytes, at: str) -> bool:
    """Revoke one session; False when it was unknown or already revoked."""
    cur = conn.execute(
        "UPDATE admin_sessions SET revoked_at = ? WHERE id_hash = ? AND revoked_at IS NULL", (at, id_hash)
    )
    return cur.rowcount == 1


def delete_dead(conn: sqlite3.Connection, before: str, limit: int = 500) -> int:
    """Delete up to ``limit`` sessions that expired or were revoked before ``before``; returns the count."""
    cur = conn.execute(
        "DELETE FROM admin_sessions WHERE rowid IN (SELECT rowid FROM admin_sessions WHERE expires_at < ?"
        " UNION SELECT rowid FROM admin_sessions WHERE revoked_at IS NOT NULL AND revoked_at < ? LIMIT ?)",
        (before, before, limit),
    )
    return cur.rowcount


def throttle_get(conn: sqlite3.Connection, key: str) -> ThrottleRow | None:
    """The throttle row of ``key`` or None."""
    r = conn.execute(
        "SELECT throttle_key, failures, window_start, locked_until FROM admin_login_throttle WHERE throttle_key = ?",
        (key,),
    ).fetchone()
    return None if r is None else ThrottleRow(r[0], r[1], r[2], r[3])


def throttle_put(conn: sqlite3.Connection, row: ThrottleRow) -> None:
    """Insert or replace the throttle row of ``row.throttle_key``."""
    conn.execute(
        "INSERT INTO admin_login_throttle (throttle_key, failures, window_start, locked_until) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (throttle_key) DO UPDATE SET failures = excluded.failures,"
        " window_start = excluded.window_start, locked_until = excluded.locked_until",
        (row.throttle_key, row.failures, row.window_start, row.locked_until),
    )


def throttle_clear(conn: sqlite3.Connection, key: str) -> None:
    """Forget the failures of ``key`` (after a successful login)."""
    conn.execute("DELETE FROM admin_login_throttle WHERE throttle_key = ?", (key,))


def throttle_clear_prefix(conn: sqlite3.Connection, prefix: str) -> int:
    """Delete every throttle record whose key starts with ``prefix`` (compared exactly, not as a LIKE
    pattern); returns the count."""
    cur = conn.execute("DELETE FROM admin_login_throttle WHERE substr(throttle_key, 1, ?) = ?", (len(prefix), prefix))
    return cur.rowcount


def throttle_delete_stale(conn: sqlite3.Connection, last_before: str, now: str, limit: int = 500) -> int:
    """Delete up to ``limit`` throttle records whose last guess is at or before ``last_before`` and whose
    back-off (if any) ended before ``now``; returns the count."""
    cur = conn.execute(
        "DELETE FROM admin_login_throttle WHERE rowid IN (SELECT rowid FROM admin_login_throttle"
        " WHERE window_start <= ? AND (locked_until IS NULL OR locked_until <= ?) LIMIT ?)",
        (last_before, now, limit),
    )
    return cur.rowcount
