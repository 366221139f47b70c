"""SQL for device idempotency records (docs/api.md "Conventions": a key belongs to the device that first used it;
endpoint
stored). ``request_key`` is the primary key: the same key from another device is refused before anything is
stored (``tx.device_tx.replay_scoped``), so it is unique across devices."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceRequest:
    """A stored device request outcome. ``response_json`` is None for a 204."""

    device_id: str
    request_key: str
    endpoint: str
    request_hash: str
    status: int
    attempt_id: str | None
    response_json: str | None
    created_at: str


def _row(r: sqlite3.Row) -> DeviceRequest:
    return DeviceRequest(*(r[k] for k in DeviceRequest.__dataclass_fields__))


def for_key(conn: sqlite3.Connection, request_key: str) -> list[DeviceRequest]:
    """The record stored under ``request_key``, whichever device stored it (primary key: 0 or 1 rows)."""
    return [_row(r) for r in conn.execute("SELECT * FROM device_requests WHERE request_key = ?", (request_key,))]


def insert(conn: sqlite3.Connection, rec: DeviceRequest) -> None:
    """Store a new record (primary key ``request_key``; a key already stored raises IntegrityError)."""
    conn.execute(
        "INSERT INTO device_requests (device_id, request_key, endpoint, request_hash, status, attempt_id,"
        " response_json, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            rec.device_id,
            rec.request_key,
            rec.endpoint,
            rec.request_hash,
            rec.status,
            rec.attempt_id,
            rec.response_json,
            rec.created_at,
        ),
    )
