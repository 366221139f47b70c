"""SQL used by claim-next, lease renew and heartbeat (spec 000, spec 002) that the per-aggregate modules
do not already provide. Every function runs inside the caller's write transaction."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from cmbuyer.server.store.attempts import Attempt
from cmbuyer.server.store.authorizations import Authorization
from cmbuyer.server.store.device_requests import DeviceRequest


@dataclass(frozen=True)
class DeviceGate:
    """The device's latest heartbeat as seen at the write position (returned by :func:`confirm_active`)."""

    last_heartbeat_at: str | None
    client_version: str | None
    adb_serial: str | None
    android_release: str | None
    pdd_version: str | None
    pdd_version_code: int | None
    reported_state: str | None
    app_version_allowed: bool | None
    pack_id: str | None  # reported pack id, "NO_PACK", or None = not reported (migration 0007)
    supervision_off: bool = False  # an admin exempted the device from supervision (migration 0007)


def confirm_active(conn: sqlite3.Connection, device_id: str) -> DeviceGate | None:
    """Same conditional UPDATE as :func:`cmbuyer.server.store.devices.confirm_active` (takes the write
    position, proves the device ACTIVE there), returning the heartbeat columns in the same statement.

    None means the device is not ACTIVE (revoked or unknown) at this position: rowcount 0.
    """
    rows = conn.execute(
        "UPDATE devices SET write_seq = write_seq + 1 WHERE id = ? AND state = 'ACTIVE'"
        " RETURNING last_heartbeat_at, client_version, adb_serial, android_release, pdd_version,"
        " pdd_version_code, reported_state, app_version_allowed, pack_id, supervision_off",
        (device_id,),
    ).fetchall()
    if len(rows) != 1:
        return None
    r = rows[0]
    allowed = r[7]
    return DeviceGate(
        r[0], r[1], r[2], r[3], r[4], r[5], r[6], None if allowed is None else bool(allowed), r[8], bool(r[9])
    )


def requests_for_key(conn: sqlite3.Connection, request_key: str) -> list[DeviceRequest]:
    """The record stored under ``request_key``, whichever device stored it (primary key: 0 or 1 rows)."""
    return [
        DeviceRequest(*(r[k] for k in DeviceRequest.__dataclass_fields__))
        for r in conn.execute("SELECT * FROM device_requests WHERE request_key = ?", (request_key,))
    ]


@dataclass(frozen=True)
class Candidate:
    """A claimable authorization and the current version of its task (equal to the snapshot's)."""

    authorization: Authorization
    task_version: int


_AUTH_COLUMNS = ", ".join(f"a.{f}" for f in Authorization.__dataclass_fields__)


def next_candidate(conn: sqlite3.Connection, now: str) -> Candidate | None:
    """The oldest claimable authorization (spec 000 §5): ACTIVE, ``expires_at > now`` (strict), its task
    PENDING at exactly the snapshot's version, and every snapshot field equal to the task's current
    field. Rows whose snapshot no longer matches are skipped (fail closed), never claimed. ``sku_size`` is
    compared with ``IS``: a task without a size (NULL, migration 0006) matches a snapshot without one.

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
        " AND t.sku_color = a.sku_color AND t.sku_size IS a.sku_size AND t.quantity = a.quantity"
        " AND t.max_total_price = a.max_total_price"
        " ORDER BY a.created_at, a.id LIMIT 1",
        (now,),
    ).fetchone()
    if r is None:
        return None
    values = tuple(r)  # positional: the SELECT lists the dataclass fields in order, then the task version
    return Candidate(Authorization(*values[:-1]), int(values[-1]))


def attempts_for_secret_check(conn: sqlite3.Connection, newest: int = 3) -> list[Attempt]:
    """Every OPEN attempt plus the ``newest`` others: the claims whose tokens a restarted server must be
    able to rebuild (start-up secret check, spec 000 §2)."""
    rows = conn.execute(
        "SELECT * FROM attempts WHERE state = 'OPEN'"
        " UNION SELECT * FROM (SELECT * FROM attempts ORDER BY created_at DESC, id DESC LIMIT ?)",
        (newest,),
    )
    return [Attempt(*(r[k] for k in Attempt.__dataclass_fields__)) for r in rows]
