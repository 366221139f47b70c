"""``POST /api/v1/devices/heartbeat`` (docs/api.md; design §7.1): record what the phone host reports and
answer whether its Pinduoduo version is allowed, with the server's time.

The body's ``device_id`` must be the authenticated device (checked by the route before any write).
The record is last-writer-wins on the device row; an audit row is written only when a reported fact
changes (version, serial, state, pack, allowed flag …), so a steady 10-second heartbeat does not flood
the append-only audit trail, while every change of what the server knows stays traceable.

``pack_id`` (issue 16 §6, an extension of spec 002's heartbeat) is the screen-reading pack the agent uses for
the installed app version, or ``"NO_PACK"``. A heartbeat without it (an agent older than issue 16, or a
phone whose app version is unknown: ADB offline, app missing) stores NULL = unknown: the devices page
shows "—" rather than a pack id an earlier, newer agent reported — a stale id would claim a pack that the
running agent may not have.

``paused`` and ``paced_until`` (issue 32, also extensions: absent = not paused, not paced) tell the agent why
claim-next will answer 204 for now: an administrator paused the device, or its pacing
(:mod:`cmbuyer.server.domain.pacing`) allows the next claim only at that time.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

from cmbuyer.server.clock import to_wire
from cmbuyer.server.domain import pacing
from cmbuyer.server.domain.claims import ClaimPolicy, version_allowed
from cmbuyer.server.store import devices as device_store
from cmbuyer.server.tx import audit as audit_tx
from cmbuyer.server.tx import device_tx
from cmbuyer.server.tx import supervision as supervision_tx
from cmbuyer.server.tx.common import Actor


def record_heartbeat(
    conn: sqlite3.Connection, *, device_id: str, body: dict[str, Any], now: datetime, policy: ClaimPolicy
) -> dict[str, Any]:
    """Store the heartbeat (first statement: the device-ACTIVE check) and return the response body.

    Raises :class:`device_tx.DeviceNotActive` (→ 401).
    """
    previous = device_tx.begin(conn, device_id)
    at = to_wire(now)
    allowed = version_allowed(body["pdd_version"], policy.allowed_app_versions)
    facts = {
        "client_version": body["client_version"],
        "adb_serial": body["adb_serial"],
        "android_release": body["android_release"],
        "pdd_version": body["pdd_version"],
        "pdd_version_code": body.get("pdd_version_code"),
        "reported_state": body["state"],
        "pack_id": body.get("pack_id"),
        "app_version_allowed": allowed,
    }
    # the facts are named as the device row's columns: stored as they are, then compared for the audit
    device_store.record_heartbeat(conn, device_id, at=at, **facts)
    before = {name: getattr(previous, name) for name in facts}
    if before != facts:
        audit_tx.record(
            conn,
            Actor("device", device_id),
            "device.heartbeat",
            "device",
            device_id,
            at=at,
            detail={name: value for name, value in facts.items() if before[name] != value},
        )
    return {
        "device_id": device_id,
        "app_version_allowed": allowed,
        "server_now": at,
        "heartbeat_interval_seconds": policy.heartbeat_interval,
        **supervision_tx.heartbeat_fields(conn, device_id=device_id, body=body),
        **no_work_fields(previous, now),
    }


def no_work_fields(row: pacing.PacingRow, now: datetime) -> dict[str, Any]:
    """The heartbeat answer's ``{"paused": true}`` and ``{"paced_until": <wire time>}`` for the device row
    ``row`` at ``now`` (each only when it applies, so an older agent's schema still reads the answer)."""
    work = pacing.no_new_work(row, now)
    fields: dict[str, Any] = {"paused": True} if work.paused else {}
    if work.paced_until is not None:
        fields["paced_until"] = to_wire(work.paced_until)
    return fields
