"""SQL for supervised first orders (migration 0007): supervision pairs, approval requests and
verdicts — what the phone creates and polls, claim-next and the heartbeat read, and what a person's
approve/reject, verdict and resupervise write. The admin pages' read models live in
``store/queries/supervision.py``. Every function runs inside the caller's transaction (or read snapshot)
and decides nothing; an approval request's state changes only through :func:`set_state`."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from cmbuyer.server.domain.states import StateChanges
from cmbuyer.server.domain.supervision import APPROVAL_TRANSITIONS
from cmbuyer.server.store._sql import StateTable, compare_and_set, one


@dataclass(frozen=True)
class Pair:
    """A ``supervision_pairs`` row: one device running one pack (``pack_key``)."""

    device_id: str
    pack_key: str
    confirmed_orders: int
    held: bool
    held_reason: str | None
    updated_at: str


@dataclass(frozen=True)
class Approval:
    """An ``approval_requests`` row. ``readings_json`` is the canonical JSON of the readings as the phone sent
    them; ``readings_hash`` the hash of their canonical form (``domain.supervision.readings_hash``)."""

    id: str
    attempt_id: str
    task_id: str
    device_id: str
    approval_key: str
    readings_json: str
    readings_hash: str
    screenshot_asset_id: str
    state: str
    decided_by: str | None
    decided_at: str | None
    created_at: str


_APPROVALS = StateTable("approval_requests", Approval, StateChanges("approval request", APPROVAL_TRANSITIONS))
APPROVAL_FIELDS = _APPROVALS.fields  # the columns of approval_requests, in order (read models select them too)
_APPROVAL_COLUMNS = _APPROVALS.columns
_approval = _APPROVALS.row


def get_pair(conn: sqlite3.Connection, device_id: str, pack_key: str) -> Pair | None:
    """The pair row (primary key lookup), or None when the pair was never supervised."""
    r = conn.execute(
        "SELECT device_id, pack_key, confirmed_orders, held, held_reason, updated_at"
        " FROM supervision_pairs WHERE device_id = ? AND pack_key = ?",
        (device_id, pack_key),
    ).fetchone()
    return None if r is None else Pair(r[0], r[1], int(r[2]), bool(r[3]), r[4], r[5])


def ensure_pair(conn: sqlite3.Connection, device_id: str, pack_key: str, at: str) -> None:
    """Create the pair row (0 confirmed, not held) if it does not exist yet; an existing row is kept as is."""
    conn.execute(
        "INSERT INTO supervision_pairs (device_id, pack_key, confirmed_orders, held, held_reason, updated_at)"
        " VALUES (?, ?, 0, 0, NULL, ?) ON CONFLICT (device_id, pack_key) DO NOTHING",
        (device_id, pack_key, at),
    )


def put_pair(conn: sqlite3.Connection, pair: Pair) -> None:
    """Insert or overwrite a pair's counters as given (tools and tests set up a pair's history with it; the
    admin verdicts change pairs through their own statements)."""
    conn.execute(
        "INSERT INTO supervision_pairs (device_id, pack_key, confirmed_orders, held, held_reason, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (device_id, pack_key) DO UPDATE SET"
        " confirmed_orders = excluded.confirmed_orders, held = excluded.held,"
        " held_reason = excluded.held_reason, updated_at = excluded.updated_at",
        (pair.device_id, pair.pack_key, pair.confirmed_orders, int(pair.held), pair.held_reason, pair.updated_at),
    )


def insert_approval(conn: sqlite3.Connection, approval: Approval) -> None:
    """Insert a request. The partial unique index ``approval_requests_one_live_per_attempt`` refuses a second
    WAITING/APPROVED request of an attempt (IntegrityError): the caller voids the old one first."""
    _APPROVALS.insert(conn, approval)


def get_approval(conn: sqlite3.Connection, approval_id: str) -> Approval | None:
    """One request by id, or None."""
    return one(conn, f"SELECT {_APPROVAL_COLUMNS} FROM approval_requests WHERE id = ?", (approval_id,), _approval)


def live_approval(conn: sqlite3.Connection, attempt_id: str) -> Approval | None:
    """The attempt's WAITING or APPROVED request (at most one; read through the partial unique index)."""
    return one(
        conn,
        f"SELECT {_APPROVAL_COLUMNS} FROM approval_requests WHERE attempt_id = ? AND state IN ('WAITING', 'APPROVED')",
        (attempt_id,),
        _approval,
    )


def rejected_approval(conn: sqlite3.Connection, attempt_id: str) -> Approval | None:
    """The attempt's first REJECTED request, or None. No index covers it (migration 0007 indexes live and
    waiting requests only); it runs only when a supervised phone asks for approval, over a table that
    holds one or two rows per supervised attempt."""
    return one(
        conn,
        f"SELECT {_APPROVAL_COLUMNS} FROM approval_requests WHERE attempt_id = ?"
        " AND state = 'REJECTED' ORDER BY created_at, id LIMIT 1",
        (attempt_id,),
        _approval,
    )


_ATTEMPT_OPEN = "EXISTS (SELECT 1 FROM attempts a WHERE a.id = approval_requests.attempt_id AND a.state = 'OPEN')"


def set_state(
    conn: sqlite3.Connection,
    approval_id: str,
    *,
    expected_state: str,
    new_state: str,
    decided_by: str | None = None,
    decided_at: str | None = None,
    while_attempt_open: bool = False,
) -> bool:
    """Compare-and-set the state; ``decided_by``/``decided_at`` are written when given (a person's decision)
    and kept otherwise (a decided request keeps who decided when it is voided). With ``while_attempt_open``
    the change also needs the request's attempt still OPEN (a person's approve/reject). False when the
    request was not in ``expected_state`` or its attempt had closed (nothing written).

    Raises :class:`~cmbuyer.server.domain.states.StateChangeNotAllowed` (nothing written) for a pair no
    use-case of ``APPROVAL_TRANSITIONS`` produces.
    """
    return compare_and_set(
        conn,
        _APPROVALS,
        approval_id,
        expected_state=expected_state,
        new_state=new_state,
        given={"decided_by": decided_by, "decided_at": decided_at},
        where=_ATTEMPT_OPEN if while_attempt_open else "",
    )


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


def set_wait_until(conn: sqlite3.Connection, approval_id: str, wait_until: str) -> None:
    """When the phone gives up waiting on this request (migration 0012): the task table's countdown."""
    conn.execute("UPDATE approval_requests SET wait_until = ? WHERE id = ?", (wait_until, approval_id))
