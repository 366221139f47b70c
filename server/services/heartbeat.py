"""``POST /api/v1/devices/heartbeat`` (docs/api.md): record what the phone host reports and
answer whether its Pinduoduo version is allowed, with the server's time.

The body's ``device_id`` must be the authenticated device (checked by the route before any write).
The record is last-writer-wins on the device row; an audit row is written only when a reported fact
changes (version, serial, state, pack, allowed flag …), so a steady 10-second heartbeat does not flood
the append-only audit trail, while every change of what the server knows stays traceable.

``pack_id`` (docs/api.md "POST /api/v1/devices/heartbeat") is the screen-reading pack the agent uses for
the installed app version, or ``"NO_PACK"``. A heartbeat without it (an agent that does not report packs, or a
phone whose app version is unknown: ADB offline, app missing) stores NULL = unknown: the devices page
shows "—" rather than a pack id an earlier, newer agent reported — a stale id would claim a pack that the
running agent may not have.

``paused`` and ``paced_until`` (also extensions: absent = not paused, not paced) tell the agent why
claim-next will answer 204 for now: an administrator paused the device, or its pacing
(:mod:`cmbuyer.server.domain.pacing`) allows the next claim only at that time. The agent's local hold
(``hold``) is stored on the device (audit ``device.hold`` when a new one is seen, ``device.hold_cleared``
when it ends); an administrator's 释放 of it comes back as ``hold_released``; a pending 查看当前屏幕 as
``screenshot_request`` (answered by the screenshot upload, or by ``screen`` when another app was in
front). Each answer field is sent only to an agent that lists its ``features`` (an older agent's schema
would refuse an unknown field).
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
from cmbuyer.server.tx import screens as screens_tx
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
    features = set(body.get("features", ()))
    answer: dict[str, Any] = {
        "device_id": device_id,
        "app_version_allowed": allowed,
        "server_now": at,
        "heartbeat_interval_seconds": policy.heartbeat_interval,
        **supervision_tx.heartbeat_fields(conn, device_id=device_id, body=body),
    }
    if "pause" in features:
        answer.update(no_work_fields(previous, now))
    answer.update(_hold_and_screen(conn, device_id, body, at=at, features=features))
    return answer


def _hold_and_screen(
    conn: sqlite3.Connection, device_id: str, body: dict[str, Any], *, at: str, features: set[str]
) -> dict[str, Any]:
    """Store the reported hold (or its end), answer a pending 释放 of it, take the ``screen``
    answer and repeat a pending 查看当前屏幕; returns the answer fields the agent's ``features`` allow."""
    before = device_store.hold_state(conn, device_id)
    assert before is not None  # device_tx.begin proved the row
    fields: dict[str, Any] = {}
    hold = body.get("hold")
    actor = Actor("device", device_id)
    if hold is None:
        if device_store.clear_hold(conn, device_id) and before.hold_seen_at is not None:
            audit_tx.record(conn, actor, "device.hold_cleared", "device", device_id, at=at)
    else:
        device_store.report_hold(
            conn, device_id, code=hold["code"], reason=hold["reason"], attempt_id=hold["attempt_id"], at=at
        )
        now_state = device_store.hold_state(conn, device_id)
        assert now_state is not None
        if now_state.hold_seen_at == at and before.hold_seen_at != at:
            audit_tx.record(
                conn,
                actor,
                "device.hold",
                "device",
                device_id,
                at=at,
                detail={"code": hold["code"], "reason": hold["reason"], "attempt_id": hold["attempt_id"]},
            )
        # a release covers the hold it was given for: one first seen at or before it, never a newer one
        seen, released_at = now_state.hold_seen_at, now_state.hold_release_at
        released = seen is not None and released_at is not None and seen <= released_at
        if released and "hold_release" in features:
            fields["hold_released"] = {
                "by": now_state.hold_release_by,
                "at": now_state.hold_release_at,
                "note": now_state.hold_release_note,
            }
    screen = body.get("screen")
    pending = before.screen_request_id
    if screen is not None:
        screens_tx.record_answer(
            conn, device_id, screen["request_id"], image=None, package=screen["foreground_package"], at=at
        )
        if screen["request_id"] == pending:
            pending = None
    if pending is not None and "screenshot" in features:
        fields["screenshot_request"] = pending
    return fields


def no_work_fields(row: pacing.PacingRow, now: datetime) -> dict[str, Any]:
    """The heartbeat answer's ``{"paused": true}`` and ``{"paced_until": <wire time>}`` for the device row
    ``row`` at ``now`` (each only when it applies, so an older agent's schema still reads the answer)."""
    work = pacing.no_new_work(row, now)
    fields: dict[str, Any] = {"paused": True} if work.paused else {}
    if work.paced_until is not None:
        fields["paced_until"] = to_wire(work.paced_until)
    return fields
