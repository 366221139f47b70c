"""SQL of the admin side of supervised first orders (issue 17; migration 0007): the approval request a
person decides in the task drawer, the verdict on a supervised order, the device–pack pairs shown and
reset on the devices page, and the "等待人工确认" badges.

Writes are compare-and-set (a lost race writes nothing and reports False) and run inside the caller's
transaction (services/supervision_admin.py). Reads return plain dicts of stored columns; never claim
tokens or hashes of secrets.
"""

from __future__ import annotations

import sqlite3
from typing import Any

_APPROVAL_COLUMNS = (
    "r.id, r.attempt_id, r.task_id, r.device_id, r.approval_key, r.readings_json, r.readings_hash,"
    " r.screenshot_asset_id, r.state, r.decided_by, r.decided_at, r.created_at"
)


def approval(conn: sqlite3.Connection, approval_id: str) -> dict[str, Any] | None:
    """One approval request with its attempt's ``attempt_state``, ``authorization_id``, ``pack_key`` and
    ``supervised``; None when unknown."""
    r = conn.execute(
        f"SELECT {_APPROVAL_COLUMNS}, a.state AS attempt_state, a.authorization_id, a.pack_key, a.supervised"
        " FROM approval_requests r JOIN attempts a ON a.id = r.attempt_id WHERE r.id = ?",
        (approval_id,),
    ).fetchone()
    return None if r is None else dict(r)


def live_approval_of_open_attempt(conn: sqlite3.Connection, task_id: str) -> dict[str, Any] | None:
    """The WAITING or APPROVED request of the task's OPEN attempt (at most one: migration 0007's partial
    unique index and at most one OPEN attempt per task), joined like :func:`approval`; None otherwise."""
    r = conn.execute(
        f"SELECT {_APPROVAL_COLUMNS}, a.state AS attempt_state, a.authorization_id, a.pack_key, a.supervised"
        " FROM attempts a JOIN approval_requests r ON r.attempt_id = a.id"
        " WHERE a.task_id = ? AND a.state = 'OPEN' AND r.state IN ('WAITING', 'APPROVED')",
        (task_id,),
    ).fetchone()
    return None if r is None else dict(r)


def decide_approval(conn: sqlite3.Connection, approval_id: str, *, new_state: str, decided_by: str, at: str) -> bool:
    """CAS WAITING → ``new_state`` (APPROVED/REJECTED) with who and when, only while the request's attempt is
    still OPEN. False when either changed meanwhile (nothing written)."""
    cur = conn.execute(
        "UPDATE approval_requests SET state = ?, decided_by = ?, decided_at = ?"
        " WHERE id = ? AND state = 'WAITING'"
        " AND EXISTS (SELECT 1 FROM attempts a WHERE a.id = approval_requests.attempt_id AND a.state = 'OPEN')",
        (new_state, decided_by, at, approval_id),
    )
    return cur.rowcount == 1


def waiting_task_ids(conn: sqlite3.Connection, task_ids: list[str]) -> set[str]:
    """Those of ``task_ids`` whose OPEN attempt has a WAITING approval request (the list badge)."""
    if not task_ids:
        return set()
    marks = ",".join("?" * len(task_ids))
    return {
        r[0]
        for r in conn.execute(
            "SELECT r.task_id FROM approval_requests r JOIN attempts a ON a.id = r.attempt_id"
            f" WHERE r.state = 'WAITING' AND a.state = 'OPEN' AND r.task_id IN ({marks})",
            task_ids,
        )
    }


def waiting_device_ids(conn: sqlite3.Connection) -> set[str]:
    """Devices whose OPEN attempt has a WAITING approval request (index ``approval_requests_waiting``)."""
    return {
        r[0]
        for r in conn.execute(
            "SELECT r.device_id FROM approval_requests r JOIN attempts a ON a.id = r.attempt_id"
            " WHERE r.state = 'WAITING' AND a.state = 'OPEN'"
        )
    }


def submission_for_verdict(conn: sqlite3.Connection, submission_id: str) -> dict[str, Any] | None:
    """The submission's ``id, task_id, attempt_id, device_id, state`` with its attempt's ``supervised`` and
    ``pack_key``; None when unknown."""
    r = conn.execute(
        "SELECT s.id, s.task_id, s.attempt_id, s.device_id, s.state, a.supervised, a.pack_key"
        " FROM order_submissions s JOIN attempts a ON a.id = s.attempt_id WHERE s.id = ?",
        (submission_id,),
    ).fetchone()
    return None if r is None else dict(r)


def verdict(conn: sqlite3.Connection, submission_id: str) -> dict[str, Any] | None:
    """The verdict recorded on a submission, or None."""
    r = conn.execute("SELECT * FROM supervision_verdicts WHERE submission_id = ?", (submission_id,)).fetchone()
    return None if r is None else dict(r)


def insert_verdict(
    conn: sqlite3.Connection,
    *,
    submission_id: str,
    device_id: str,
    pack_key: str,
    verdict: str,
    admin_id: str,
    note: str | None,
    at: str,
) -> bool:
    """Record the one verdict of a submission; False when one exists already (nothing written)."""
    cur = conn.execute(
        "INSERT INTO supervision_verdicts (submission_id, device_id, pack_key, verdict, admin_id, note, at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (submission_id) DO NOTHING",
        (submission_id, device_id, pack_key, verdict, admin_id, note, at),
    )
    return cur.rowcount == 1


def count_confirmed(conn: sqlite3.Connection, device_id: str, pack_key: str, at: str) -> None:
    """One more confirmed-right order for the pair (the row is created at 1 when the pair has none)."""
    conn.execute(
        "INSERT INTO supervision_pairs (device_id, pack_key, confirmed_orders, held, held_reason, updated_at)"
        " VALUES (?, ?, 1, 0, NULL, ?) ON CONFLICT (device_id, pack_key)"
        " DO UPDATE SET confirmed_orders = confirmed_orders + 1, updated_at = excluded.updated_at",
        (device_id, pack_key, at),
    )


def hold(conn: sqlite3.Connection, device_id: str, pack_key: str, reason: str, at: str) -> None:
    """Put the pair on hold with ``reason`` (created held when the pair has no row); the count is kept."""
    conn.execute(
        "INSERT INTO supervision_pairs (device_id, pack_key, confirmed_orders, held, held_reason, updated_at)"
        " VALUES (?, ?, 0, 1, ?, ?) ON CONFLICT (device_id, pack_key)"
        " DO UPDATE SET held = 1, held_reason = excluded.held_reason, updated_at = excluded.updated_at",
        (device_id, pack_key, reason, at),
    )


def pair(conn: sqlite3.Connection, device_id: str, pack_key: str) -> dict[str, Any] | None:
    """One supervision pair row, or None."""
    r = conn.execute(
        "SELECT * FROM supervision_pairs WHERE device_id = ? AND pack_key = ?", (device_id, pack_key)
    ).fetchone()
    return None if r is None else dict(r)


def reset_pairs(conn: sqlite3.Connection, device_id: str, at: str) -> list[dict[str, Any]]:
    """Every pair of the device back to confirmed 0, not held; returns the rows as they were before."""
    before = [
        dict(r)
        for r in conn.execute(
            "SELECT pack_key, confirmed_orders, held, held_reason FROM supervision_pairs WHERE device_id = ?"
            " ORDER BY pack_key",
            (device_id,),
        )
    ]
    conn.execute(
        "UPDATE supervision_pairs SET confirmed_orders = 0, held = 0, held_reason = NULL, updated_at = ?"
        " WHERE device_id = ?",
        (at, device_id),
    )
    return before


def device_exists(conn: sqlite3.Connection, device_id: str) -> bool:
    """True for a known device id (revoked ones included)."""
    return conn.execute("SELECT 1 FROM devices WHERE id = ?", (device_id,)).fetchone() is not None


def devices_for_supervision(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every device's ``id, pack_id, pdd_version, pdd_version_code`` (what the pair key is built from) and its
    ``supervision_off`` exemption."""
    return [
        dict(r) for r in conn.execute("SELECT id, pack_id, pdd_version, pdd_version_code, supervision_off FROM devices")
    ]


def all_pairs(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every supervision pair row, by device then pack key."""
    return [dict(r) for r in conn.execute("SELECT * FROM supervision_pairs ORDER BY device_id, pack_key")]


def latest_submission_for_task(conn: sqlite3.Connection, task_id: str) -> dict[str, Any] | None:
    """The task's newest order submission (``id, state``) with its attempt's ``supervised``, or None."""
    r = conn.execute(
        "SELECT s.id, s.state, a.supervised FROM order_submissions s JOIN attempts a ON a.id = s.attempt_id"
        " WHERE s.task_id = ? ORDER BY s.created_at DESC, s.id DESC LIMIT 1",
        (task_id,),
    ).fetchone()
    return None if r is None else dict(r)
