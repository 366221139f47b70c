"""Device identity use-cases: issue a token (shown once), list, revoke (docs/api.md "Device authentication")."""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
from dataclasses import dataclass
from datetime import datetime

from cmbuyer.schemas import is_uuid4
from cmbuyer.server.clock import to_wire
from cmbuyer.server.domain import values
from cmbuyer.server.domain.errors import NotFound, ValidationFailed
from cmbuyer.server.store import devices as device_store
from cmbuyer.server.tx import audit as audit_tx
from cmbuyer.server.tx.common import Actor, new_id

TOKEN_BYTES = 32


@dataclass(frozen=True)
class IssuedDevice:
    """A new device: its id and the token hex, which exists only in this object and is shown once."""

    device_id: str
    token: str

    def __repr__(self) -> str:
        return f"IssuedDevice(device_id={self.device_id!r}, token=***)"


def token_hash(token_hex: str) -> bytes:
    """SHA-256 of the token's 32 raw bytes (what the DB stores; docs/api.md "Device authentication": a 32-byte BLOB)."""
    return hashlib.sha256(bytes.fromhex(token_hex)).digest()


def add_device(conn: sqlite3.Connection, name: str, actor: Actor, now: datetime) -> IssuedDevice:
    """Create an ACTIVE device with a fresh 32-byte random token; only SHA-256(token) is stored.

    Raises ValidationFailed("name", …) for a name that is empty, longer than 64 characters, or holds
    control, bidi or invisible characters (values.check_text) or other unprintable ones; nothing is
    written then."""
    values.check_text("name", "设备名称", name)
    name = name.strip()
    if not name or len(name) > 64 or not name.isprintable():
        raise ValidationFailed("name", "设备名称为 1–64 个可打印字符")
    device_id = new_id()
    token = secrets.token_bytes(TOKEN_BYTES).hex()
    at = to_wire(now)
    device_store.insert(conn, device_id, name, token_hash(token), at)
    audit_tx.record(conn, actor, "device.add", "device", device_id, at=at, detail={"name": name})
    return IssuedDevice(device_id, token)


def revoke_device(conn: sqlite3.Connection, device_id: str, actor: Actor, now: datetime) -> bool:
    """Revoke a device (idempotent; returns True when this call revoked it). NotFound when unknown.

    Linearized with claims through the write lock: a revocation committed first makes later device
    requests fail; a claim committed first stays (no automatic release; docs/api.md "Device authentication",
    "Linearization with revocation").
    """
    if not is_uuid4(device_id) or device_store.get(conn, device_id) is None:
        raise NotFound("设备不存在")
    at = to_wire(now)
    changed = device_store.revoke(conn, device_id, at)
    if changed:
        audit_tx.record(conn, actor, "device.revoke", "device", device_id, at=at)
    return changed


def set_supervision(conn: sqlite3.Connection, device_id: str, *, off: bool, actor: Actor, now: datetime) -> bool:
    """Exempt a device from supervised first orders (``off=True``) or put it back under the global rule
    (issue 17; ``CMBUYER_SUPERVISED_ORDERS``). Idempotent: returns True when this call changed the
    setting, and only a change writes an audit row (``device.supervision``). NotFound when unknown.

    The exemption is for phones a team has already proven (and for the demo's second phone); it does not
    clear a held device–pack pair — that is the admin's 重新人工监督 on the devices page.
    """
    if not is_uuid4(device_id) or device_store.get(conn, device_id) is None:
        raise NotFound("设备不存在")
    changed = device_store.set_supervision_off(conn, device_id, off)
    if changed:
        audit_tx.record(
            conn,
            actor,
            "device.supervision",
            "device",
            device_id,
            at=to_wire(now),
            detail={"supervision": "off" if off else "on"},
        )
    return changed
