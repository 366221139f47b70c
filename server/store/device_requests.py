"""SQL for device idempotency records (design §4: keys scoped to the device; endpoint stored)."""

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


def get(conn: sqlite3.Connection, device_id: str, request_key: str) -> DeviceRequest | None:
    """The record for ``(device, key)``, or None."""
    r = conn.execute("SELECT * FROM device_requests WHERE device_id = ? AND request_key = ?",
                     (device_id, request_key)).fetchone()
    return None if r is None else DeviceRequest(*(r[k] for k in DeviceRequest.__dataclass_fields__))


def insert(conn: sqlite3.Connection, rec: DeviceRequest) -> None:
    """Store a new record (primary key ``(device_id, request_key)``)."""
    conn.execute("INSERT INTO device_requests (device_id, request_key, endpoint, request_hash, status, attempt_id,"
                 " response_json, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                 (rec.device_id, rec.request_key, rec.endpoint, rec.request_hash, rec.status, rec.attempt_id,
                  rec.response_json, rec.created_at))
