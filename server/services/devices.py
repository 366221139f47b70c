"""Device use-cases: issue a token (shown once), list, revoke (docs/api.md "Device authentication"); pause,
resume and pacing (rules in :mod:`cmbuyer.server.domain.pacing`)."""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
from dataclasses import dataclass
from datetime import datetime

from cmbuyer.schemas import is_uuid4
from cmbuyer.server.clock import to_wire
from cmbuyer.server.domain import pacing, values
from cmbuyer.server.domain.errors import InvalidTransition, NotFound, ValidationFailed
from cmbuyer.server.domain.states import DeviceState
from cmbuyer.server.store import devices as device_store
from cmbuyer.server.tx import audit as audit_tx
from cmbuyer.server.tx.common import Actor, load, new_id

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
        raise ValidationFailed("name", "").because("device_name")
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
        raise NotFound().because("device")
    at = to_wire(now)
    changed = device_store.revoke(conn, device_id, at)
    if changed:
        audit_tx.record(conn, actor, "device.revoke", "device", device_id, at=at)
    return changed


def _existing(conn: sqlite3.Connection, device_id: str) -> device_store.Device:
    return load(conn, device_store.get, device_id, NotFound().because("device"))


def set_paused(conn: sqlite3.Connection, device_id: str, *, paused: bool, actor: Actor, now: datetime) -> bool:
    """Pause (``paused=True``) or resume a device. A paused device keeps its token and its open
    claim, if any, runs to its end, but claim-next gives it no new task (204) and its heartbeat answer says
    ``paused``. Idempotent: True when this call changed it, and only a change writes an audit row
    (``device.pause`` / ``device.resume``).

    Raises NotFound (unknown device) and InvalidTransition (409 ``invalid_state``) for a revoked device (a
    revoked device can never work again, so pausing or resuming it would only suggest otherwise); nothing is
    written then.
    """
    device = _existing(conn, device_id)
    if device.state != DeviceState.ACTIVE:
        raise InvalidTransition().because("revoked_pause")
    at = to_wire(now)
    who = f"{actor.kind}:{actor.id}"[:100]
    changed = device_store.set_paused(
        conn, device_id, paused_at=at if paused else None, paused_by=who if paused else None
    )
    if changed:
        audit_tx.record(conn, actor, "device.pause" if paused else "device.resume", "device", device_id, at=at)
    return changed


def set_pacing(
    conn: sqlite3.Connection,
    device_id: str,
    *,
    min_claim_interval_seconds: int | None,
    max_claims_per_day: int | None,
    actor: Actor,
    now: datetime,
) -> bool:
    """Set a device's pacing: the least seconds between two of its claims and the most claims
    per Beijing day; None turns a limit off. True when a value changed; only a change writes an audit row
    (``device.pacing`` with both values).

    Raises ValidationFailed for a value out of range (1–86400 s, 1–10000 per day), NotFound for an unknown
    device and InvalidTransition (409 ``invalid_state``) for a revoked one; nothing is written then.
    """
    try:
        pacing.check_pacing(min_claim_interval_seconds, max_claims_per_day)
    except ValueError:
        raise ValidationFailed("pacing", "").because("pacing") from None
    if _existing(conn, device_id).state != DeviceState.ACTIVE:
        raise InvalidTransition().because("revoked_pacing")
    changed = device_store.set_pacing(
        conn, device_id, min_claim_interval_seconds=min_claim_interval_seconds, max_claims_per_day=max_claims_per_day
    )
    if changed:
        audit_tx.record(
            conn,
            actor,
            "device.pacing",
            "device",
            device_id,
            at=to_wire(now),
            detail={"min_claim_interval_seconds": min_claim_interval_seconds, "max_claims_per_day": max_claims_per_day},
        )
    return changed


RELEASE_NOTE_MAX = 500


def release_hold(conn: sqlite3.Connection, device_id: str, *, note: str, actor: Actor, now: datetime) -> bool:
    """释放: a person checked the held phone and lets it work again. The release is stored on the
    device and goes out in the heartbeat answer (``hold_released``) while the agent still reports that hold;
    the agent then clears its local hold and claims again. The phone-host command
    ``cmbuyer-agent journal --clear-hold`` keeps working the same. Audited (``device.hold_release`` with the
    note and the hold's code). Returns True (a release written).

    Raises ValidationFailed (note empty, longer than 500, or with control/bidi characters), NotFound,
    InvalidTransition (409 ``invalid_state``) for a revoked device or one whose heartbeat reports no hold."""
    values.check_text("note", "说明", note)
    note = note.strip()
    if not 1 <= len(note) <= RELEASE_NOTE_MAX:
        raise ValidationFailed("note", "").because("release_note")
    if _existing(conn, device_id).state != DeviceState.ACTIVE:
        raise InvalidTransition().because("revoked")
    held = device_store.hold_state(conn, device_id)
    at = to_wire(now)
    who = f"{actor.kind}:{actor.id}"[:100]
    if held is None or not device_store.release_hold(conn, device_id, at=at, by=who, note=note):
        raise InvalidTransition().because("no_hold")
    audit_tx.record(
        conn, actor, "device.hold_release", "device", device_id, at=at, detail={"note": note, "code": held.hold_code}
    )
    return True


def request_screen(conn: sqlite3.Connection, device_id: str, *, actor: Actor, now: datetime) -> str:
    """查看当前屏幕: ask the phone for one fresh screenshot through its next heartbeat answer; returns
    the request id. A newer request replaces one not answered yet. Audited (``device.screen_request``).

    Raises NotFound, InvalidTransition (409 ``invalid_state``) for a revoked device or one working on a task
    (its last heartbeat said BUSY: the flow owns the screen then)."""
    device = _existing(conn, device_id)
    if device.state != DeviceState.ACTIVE:
        raise InvalidTransition().because("revoked")
    if device.reported_state == "BUSY":
        raise InvalidTransition().because("busy_screen")
    request_id, at = new_id(), to_wire(now)
    device_store.request_screen(conn, device_id, request_id=request_id, at=at)
    audit_tx.record(conn, actor, "device.screen_request", "device", device_id, at=at, detail={"request_id": request_id})
    return request_id


def set_supervision(conn: sqlite3.Connection, device_id: str, *, off: bool, actor: Actor, now: datetime) -> bool:
    """Exempt a device from supervised first orders (``off=True``) or put it back under the global rule
    (``CMBUYER_SUPERVISED_ORDERS``). Idempotent: returns True when this call changed the
    setting, and only a change writes an audit row (``device.supervision``). NotFound when unknown.

    The exemption is for phones a team has already proven (and for the demo's second phone); it does not
    clear a held device–pack pair — that is the admin's 重新人工监督 on the devices page.
    """
    if not is_uuid4(device_id) or device_store.get(conn, device_id) is None:
        raise NotFound().because("device")
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
