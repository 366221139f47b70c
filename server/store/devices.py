"""SQL for devices (identity, revocation, heartbeat record). The state changes only through
:func:`set_state` (ACTIVE → REVOKED, ``DEVICE_TRANSITIONS``)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from cmbuyer.server.domain.states import DEVICE_TRANSITIONS, DeviceState, StateChanges
from cmbuyer.server.store._sql import StateTable, Table, compare_and_set, one


@dataclass(frozen=True)
class Heartbeat:
    """The device's latest heartbeat as kept on its row (all None until the first heartbeat). SQLite keeps
    ``app_version_allowed`` as 0/1: the row is read back as a bool."""

    last_heartbeat_at: str | None
    client_version: str | None
    adb_serial: str | None
    android_release: str | None
    pdd_version: str | None
    pdd_version_code: int | None
    reported_state: str | None
    app_version_allowed: bool | None
    pack_id: str | None  # last reported pack id (识别包), "NO_PACK", or None = unknown (migration 0007)

    def __post_init__(self) -> None:
        if self.app_version_allowed is not None:
            object.__setattr__(self, "app_version_allowed", bool(self.app_version_allowed))


@dataclass(frozen=True)
class Controls(Heartbeat):
    """The :class:`Heartbeat` fields and what an administrator set on the device to take it out of rotation
    or slow it down, with what pacing counts (migration 0012; rules in :mod:`cmbuyer.server.domain.pacing`).
    ``paused_by`` is the administrator (``admin:<username>`` or ``cli:<user>``); the pacing limits are None when
    off; ``claims_day`` is the Beijing day ``claims_on_day`` counts."""

    paused_at: str | None
    paused_by: str | None
    min_claim_interval_seconds: int | None
    max_claims_per_day: int | None
    last_claim_at: str | None
    claims_day: str | None
    claims_on_day: int


@dataclass(frozen=True)
class Device(Controls):
    """A device row without its token hash (which never leaves this module except for lookup): its
    identity and state, and the :class:`Controls` (heartbeat, pause, pacing) fields."""

    id: str
    name: str
    state: str
    created_at: str
    revoked_at: str | None


@dataclass(frozen=True)
class DeviceGate(Controls):
    """The device's latest heartbeat, pause and pacing as seen at the write position (returned by
    :func:`confirm_active`)."""

    supervision_off: bool = False  # an admin exempted the device from supervision (migration 0007; 0/1 in SQLite)

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "supervision_off", bool(self.supervision_off))


_TABLE = StateTable("devices", Device, StateChanges("device", DEVICE_TRANSITIONS))
_GATE = Table("devices", DeviceGate)


def insert(conn: sqlite3.Connection, device_id: str, name: str, token_hash: bytes, at: str) -> None:
    """Insert an ACTIVE device with the SHA-256 of its token."""
    conn.execute(
        "INSERT INTO devices (id, name, token_hash, state, created_at) VALUES (?, ?, ?, ?, ?)",
        (device_id, name, token_hash, DeviceState.ACTIVE, at),
    )


def get(conn: sqlite3.Connection, device_id: str) -> Device | None:
    """One device by id, or None (the token hash is not even read)."""
    return one(conn, f"SELECT {_TABLE.columns} FROM devices WHERE id = ?", (device_id,), _TABLE.row)


def list_all(conn: sqlite3.Connection) -> list[Device]:
    """Every device, oldest first."""
    return [_TABLE.row(r) for r in conn.execute(f"SELECT {_TABLE.columns} FROM devices ORDER BY created_at, id")]


def authenticate(conn: sqlite3.Connection, device_id: str, token_hash: bytes) -> bool:
    """True when an ACTIVE device has this id and token hash (docs/api.md "Device authentication": per request, no
    cache).

    The lookup is by the token hash (a unique index); the id is then compared in SQL, so timing does
    not depend on how much of a guessed token is right.
    """
    r = conn.execute(
        "SELECT 1 FROM devices WHERE token_hash = ? AND id = ? AND state = 'ACTIVE'", (token_hash, device_id)
    ).fetchone()
    return r is not None


def confirm_active(conn: sqlite3.Connection, device_id: str) -> DeviceGate | None:
    """The first business statement of every device write transaction (docs/architecture.md "Safety rules" 5,
    docs/api.md "Device authentication",
    "Linearization with revocation").

    A conditional UPDATE: it takes SQLite's write position and proves the device is still ACTIVE at
    that position, returning the heartbeat columns in the same statement. None means the device is not
    ACTIVE (revoked or unknown) at this position (rowcount 0): a revocation committed earlier.
    """
    rows = conn.execute(
        f"UPDATE devices SET write_seq = write_seq + 1 WHERE id = ? AND state = 'ACTIVE' RETURNING {_GATE.columns}",
        (device_id,),
    ).fetchall()
    return _GATE.row(rows[0]) if len(rows) == 1 else None


def set_state(conn: sqlite3.Connection, device_id: str, *, expected_state: str, new_state: str, at: str) -> bool:
    """CAS ``expected_state`` → ``new_state``; a move to REVOKED stamps ``revoked_at`` (migration 0001: set
    exactly when REVOKED). False when the device is unknown or not in ``expected_state`` (nothing written).

    Raises :class:`~cmbuyer.server.domain.states.StateChangeNotAllowed` (nothing written) for a pair no
    use-case of ``DEVICE_TRANSITIONS`` produces.
    """
    revoked_at = at if new_state == DeviceState.REVOKED else None
    return compare_and_set(
        conn,
        _TABLE,
        device_id,
        expected_state=expected_state,
        new_state=new_state,
        stamps={"revoked_at": revoked_at},
    )


def revoke(conn: sqlite3.Connection, device_id: str, at: str) -> bool:
    """ACTIVE → REVOKED (through :func:`set_state`); False when already revoked (idempotent) or unknown."""
    return set_state(conn, device_id, expected_state=DeviceState.ACTIVE, new_state=DeviceState.REVOKED, at=at)


def set_supervision_off(conn: sqlite3.Connection, device_id: str, off: bool) -> bool:
    """Set the per-device supervision exemption (migration 0007); True when the value changed."""
    cur = conn.execute(
        "UPDATE devices SET supervision_off = ? WHERE id = ? AND supervision_off != ?", (int(off), device_id, int(off))
    )
    return cur.rowcount == 1


def set_paused(conn: sqlite3.Connection, device_id: str, *, paused_at: str | None, paused_by: str | None) -> bool:
    """Pause (``paused_at``/``paused_by`` given) or resume (both None) an ACTIVE device; True when the row
    changed. False when the device is not ACTIVE or already in that pause state (nothing written)."""
    if (paused_at is None) != (paused_by is None):
        raise ValueError("paused_at and paused_by are set together")
    cur = conn.execute(
        "UPDATE devices SET paused_at = ?, paused_by = ? WHERE id = ? AND state = 'ACTIVE'"
        " AND (paused_at IS NULL) != (? IS NULL)",
        (paused_at, paused_by, device_id, paused_at),
    )
    return cur.rowcount == 1


def set_pacing(
    conn: sqlite3.Connection, device_id: str, *, min_claim_interval_seconds: int | None, max_claims_per_day: int | None
) -> bool:
    """Set the device's pacing limits (None = off); True when a value changed."""
    cur = conn.execute(
        "UPDATE devices SET min_claim_interval_seconds = ?, max_claims_per_day = ? WHERE id = ?"
        " AND (min_claim_interval_seconds IS NOT ? OR max_claims_per_day IS NOT ?)",
        (min_claim_interval_seconds, max_claims_per_day, device_id, min_claim_interval_seconds, max_claims_per_day),
    )
    return cur.rowcount == 1


def count_claim(conn: sqlite3.Connection, device_id: str, *, at: str, day: str) -> None:
    """A new claim of the device at ``at`` on the Beijing ``day``: remember its time and count it on that day
    (the counter restarts at 1 on a new day). One statement on the row claim-next has already locked."""
    conn.execute(
        "UPDATE devices SET last_claim_at = ?, claims_on_day = CASE WHEN claims_day = ? THEN claims_on_day + 1"
        " ELSE 1 END, claims_day = ? WHERE id = ?",
        (at, day, day, device_id),
    )


@dataclass(frozen=True)
class HoldState:
    """The device's reported hold, a pending 释放 and a pending 查看当前屏幕 (migration 0012; all None when
    there is none). ``hold_seen_at`` is the server time the server first saw this hold."""

    hold_code: str | None
    hold_reason: str | None
    hold_attempt_id: str | None
    hold_seen_at: str | None
    hold_release_at: str | None
    hold_release_by: str | None
    hold_release_note: str | None
    screen_request_id: str | None
    screen_requested_at: str | None


_HOLD = Table("devices", HoldState)


def hold_state(conn: sqlite3.Connection, device_id: str) -> HoldState | None:
    """The :class:`HoldState` of a device, or None when it does not exist."""
    return one(conn, f"SELECT {_HOLD.columns} FROM devices WHERE id = ?", (device_id,), _HOLD.row)


def report_hold(
    conn: sqlite3.Connection, device_id: str, *, code: str, reason: str, attempt_id: str | None, at: str
) -> None:
    """A heartbeat reported this hold: kept as it is when it is the hold already stored, else stored as a new
    hold first seen at ``at`` (a pending release stays: it is compared with ``hold_seen_at``)."""
    conn.execute(
        "UPDATE devices SET hold_code = ?, hold_reason = ?, hold_attempt_id = ?, hold_seen_at = ? WHERE id = ?"
        " AND (hold_seen_at IS NULL OR hold_code IS NOT ? OR hold_reason IS NOT ? OR hold_attempt_id IS NOT ?)",
        (code, reason, attempt_id, at, device_id, code, reason, attempt_id),
    )


def clear_hold(conn: sqlite3.Connection, device_id: str) -> bool:
    """A heartbeat reported no hold: forget the stored hold and any release of it. True when one was stored."""
    cur = conn.execute(
        "UPDATE devices SET hold_code = NULL, hold_reason = NULL, hold_attempt_id = NULL, hold_seen_at = NULL,"
        " hold_release_at = NULL, hold_release_by = NULL, hold_release_note = NULL"
        " WHERE id = ? AND (hold_seen_at IS NOT NULL OR hold_release_at IS NOT NULL)",
        (device_id,),
    )
    return cur.rowcount == 1


def release_hold(conn: sqlite3.Connection, device_id: str, *, at: str, by: str, note: str) -> bool:
    """Record an administrator's 释放 of the device's stored hold; False when no hold is stored."""
    cur = conn.execute(
        "UPDATE devices SET hold_release_at = ?, hold_release_by = ?, hold_release_note = ?"
        " WHERE id = ? AND hold_seen_at IS NOT NULL",
        (at, by, note, device_id),
    )
    return cur.rowcount == 1


def request_screen(conn: sqlite3.Connection, device_id: str, *, request_id: str, at: str) -> None:
    """Ask the device for one fresh screenshot (replaces a request not answered yet)."""
    conn.execute(
        "UPDATE devices SET screen_request_id = ?, screen_requested_at = ? WHERE id = ?", (request_id, at, device_id)
    )


def answer_screen(conn: sqlite3.Connection, device_id: str, request_id: str) -> bool:
    """The device answered ``request_id``: the request is no longer pending. False when it is not the pending
    one (answered already, or replaced by a newer request)."""
    cur = conn.execute(
        "UPDATE devices SET screen_request_id = NULL, screen_requested_at = NULL"
        " WHERE id = ? AND screen_request_id = ?",
        (device_id, request_id),
    )
    return cur.rowcount == 1


def record_heartbeat(
    conn: sqlite3.Connection,
    device_id: str,
    *,
    at: str,
    client_version: str,
    adb_serial: str,
    android_release: str,
    pdd_version: str | None,
    pdd_version_code: int | None,
    reported_state: str,
    pack_id: str | None,
    app_version_allowed: bool,
) -> None:
    """Store the latest heartbeat on the device row (every reported fact replaced, ``pack_id`` None → NULL)."""
    conn.execute(
        "UPDATE devices SET last_heartbeat_at = ?, client_version = ?, adb_serial = ?, android_release = ?,"
        " pdd_version = ?, pdd_version_code = ?, reported_state = ?, pack_id = ?, app_version_allowed = ?"
        " WHERE id = ?",
        (
            at,
            client_version,
            adb_serial,
            android_release,
            pdd_version,
            pdd_version_code,
            reported_state,
            pack_id,
            int(app_version_allowed),
            device_id,
        ),
    )
