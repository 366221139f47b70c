"""``GET /devices`` (last heartbeat, app version, allowed, pack (识别包), open claim, pause and pacing),
``POST /devices/{id}/revoke``, ``/pause``, ``/resume`` and ``/pacing`` — the same use-cases as
``cmbuyer-server device revoke|pause|resume|pace``.

Revoking needs an explicit confirmation field (``confirm=revoke``) besides CSRF: the page asks with a
required checkbox, which works without JavaScript. Pause and resume are undone as easily as done, so they
need only CSRF."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from aiohttp import web

from cmbuyer.schemas import is_uuid4
from cmbuyer.server.clock import from_wire, to_wire
from cmbuyer.server.domain import pacing
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import ValidationFailed, refusal
from cmbuyer.server.services import devices as device_service
from cmbuyer.server.services.admin_sessions import AdminSession
from cmbuyer.server.store import device_screens
from cmbuyer.server.store import devices as device_store
from cmbuyer.server.store.queries import admin as admin_queries
from cmbuyer.server.store.queries import supervision as supervision_queries
from cmbuyer.server.web.admin.body import Body
from cmbuyer.server.web.admin.guards import action, page
from cmbuyer.server.web.admin.render import json_answer, now, redirect, render, wants_json
from cmbuyer.server.web.admin.session import actor, csrf_token_for
from cmbuyer.server.web.keys import DB, SETTINGS

NOTICES = {
    "revoked": "设备已撤销；它的令牌不再有效。",
    "already": "设备此前已撤销。",
    "resupervised": "已重新开始人工监督：这台设备接下来的订单都要先经人工确认。",
    "paused": "设备已暂停：不再领取新任务；正在执行的任务会做完。",
    "resumed": "设备已恢复领取任务。",
    "pacing": "领取节奏已保存。",
    "unchanged": "没有变化。",
    "released": "已释放：手机在下一次心跳时解除暂停并重新领取任务。",
    "screen_requested": "已请求当前屏幕：约两次心跳内显示在下方。",
}


def age_label(seconds: float) -> str:
    """A heartbeat age for people: ``12 秒前``, ``3 分钟前``, ``2 小时前``, ``4 天前`` (rounded down)."""
    seconds = max(0, int(seconds))
    for unit, size in (("天", 86400), ("小时", 3600), ("分钟", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}前"
    return f"{seconds} 秒前"


# the device routes, declared on their handlers
ROUTES = web.RouteTableDef()


@ROUTES.get("/devices", name="admin-devices")
@page
async def list_devices(request: web.Request, session: AdminSession) -> web.StreamResponse:
    """``GET /devices``: every device with its heartbeat freshness (已失联 once older than interval × stale
    factor: never the last reported state), open claim, pause, pacing and today's counts (Beijing day)."""
    at = now(request)
    since = to_wire(pacing.day_start(at))
    db = request.app[DB]
    devices = await db.read(admin_queries.devices_with_claims)
    counts = await db.read(lambda c: admin_queries.device_day_counts(c, since))
    holds = await db.read(admin_queries.device_holds)
    screens = await db.read(lambda c: device_screens.latest(c, [d["id"] for d in devices]))
    settings = request.app[SETTINGS]
    supervision = await db.read(lambda c: supervision_queries.device_states(c, settings.supervised_orders))
    stale_after = timedelta(seconds=settings.heartbeat_interval * settings.heartbeat_stale_factor)
    for d in devices:
        beat = d["last_heartbeat_at"]
        d["heartbeat_stale"] = beat is None or at - from_wire(beat) > stale_after
        d["heartbeat_age"] = age_label((at - from_wire(beat)).total_seconds()) if beat else ""
        d["lease_expired"] = bool(d["claim_lease_expires_at"]) and from_wire(d["claim_lease_expires_at"]) <= at
        controls: dict[str, Any] = {k: d[k] for k in _CONTROL_FIELDS}
        until = pacing.paced_until(device_store.Controls(**controls), at)
        d["paced_until"] = to_wire(until) if until is not None else None
        d["today"] = counts.get(d["id"], {"claimed": 0, "failed": 0, "created": 0, "reconciliation": 0})
        d["hold"] = holds.get(d["id"])
        d["screen"] = screens.get(d["id"])
    return render(
        request,
        "devices.html",
        {
            "session": session,
            "csrf_token": csrf_token_for(request, session),
            "devices": devices,
            "notice": NOTICES.get(request.query.get("notice", ""), ""),
            "allowed_versions": settings.allowed_app_versions,
            "supervision": supervision,
            "stale_seconds": int(stale_after.total_seconds()),
        },
    )


_CONTROL_FIELDS = tuple(f.name for f in dataclasses.fields(device_store.Controls))


@ROUTES.post("/devices/{device_id}/revoke", name="admin-device-revoke")
@action
async def revoke_device(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /devices/{id}/revoke`` with ``confirm=revoke``: revoke (idempotent); 404 unknown device."""
    device_id = request.match_info["device_id"]
    if not is_uuid4(device_id):
        raise refusal(Code.NOT_FOUND, "设备不存在")
    confirm = body.json.get("confirm") if body.kind == "json" else body.one("confirm")
    if confirm != "revoke":
        raise ValidationFailed("confirm", "请勾选确认后再撤销设备")
    at, who = now(request), actor(session)
    changed = await request.app[DB].write(lambda c: device_service.revoke_device(c, device_id, who, at))
    if body.kind == "json" or wants_json(request):
        return web.json_response({"device_id": device_id, "revoked": True, "changed": changed})
    return redirect("/devices?notice=" + ("revoked" if changed else "already"))


def _device_id(request: web.Request) -> str:
    device_id = request.match_info["device_id"]
    if not is_uuid4(device_id):
        raise refusal(Code.NOT_FOUND, "设备不存在")
    return device_id


def _answer(request: web.Request, body: Body, payload: dict[str, Any], notice: str) -> web.StreamResponse:
    if body.kind == "json" or wants_json(request):
        return json_answer(payload)
    return redirect("/devices?notice=" + (notice if payload["changed"] else "unchanged"))


async def _set_paused(request: web.Request, session: AdminSession, body: Body, paused: bool) -> web.StreamResponse:
    device_id = _device_id(request)
    at, who = now(request), actor(session)
    changed = await request.app[DB].write(
        lambda c: device_service.set_paused(c, device_id, paused=paused, actor=who, now=at)
    )
    payload = {"device_id": device_id, "paused": paused, "changed": changed}
    return _answer(request, body, payload, "paused" if paused else "resumed")


@ROUTES.post("/devices/{device_id}/pause", name="admin-device-pause")
@action
async def pause_device(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /devices/{id}/pause``: no new task for the device until it is resumed (its open claim runs to
    its end); 404 unknown, 409 ``invalid_state`` revoked."""
    return await _set_paused(request, session, body, True)


@ROUTES.post("/devices/{device_id}/resume", name="admin-device-resume")
@action
async def resume_device(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /devices/{id}/resume``: the device claims again; 404 unknown, 409 ``invalid_state`` revoked."""
    return await _set_paused(request, session, body, False)


def _limit(body: Body, name: str) -> int | None:
    """A pacing field: empty or absent = off (None); else a plain decimal integer (range checked by the
    service). Raises ValidationFailed for anything else."""
    raw = body.json.get(name) if body.kind == "json" else body.one(name)
    if raw is None or raw == "":
        return None
    if type(raw) is int:
        return raw
    if isinstance(raw, str) and raw.strip().isascii() and raw.strip().isdigit() and len(raw.strip()) <= 6:
        return int(raw.strip())
    raise ValidationFailed(name, "最短领取间隔和每日最多领取填整数，留空表示不限")


@ROUTES.post("/devices/{device_id}/pacing", name="admin-device-pacing")
@action
async def pace_device(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /devices/{id}/pacing`` with ``min_claim_interval_seconds`` and ``max_claims_per_day`` (empty or
    absent = off): the device's pacing; 400 out of range, 404 unknown, 409 ``invalid_state`` revoked."""
    device_id = _device_id(request)
    interval, per_day = _limit(body, "min_claim_interval_seconds"), _limit(body, "max_claims_per_day")
    at, who = now(request), actor(session)
    changed = await request.app[DB].write(
        lambda c: device_service.set_pacing(
            c, device_id, min_claim_interval_seconds=interval, max_claims_per_day=per_day, actor=who, now=at
        )
    )
    payload = {
        "device_id": device_id,
        "min_claim_interval_seconds": interval,
        "max_claims_per_day": per_day,
        "changed": changed,
    }
    return _answer(request, body, payload, "pacing")


@ROUTES.post("/devices/{device_id}/release-hold", name="admin-device-release-hold")
@action
async def release_hold(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /devices/{id}/release-hold`` with a required ``note``: 释放 the phone's hold (audited); 400 no note,
    404 unknown, 409 ``invalid_state`` revoked or not held."""
    device_id = _device_id(request)
    note = body.json.get("note") if body.kind == "json" else body.one("note")
    if not isinstance(note, str):
        raise ValidationFailed("note", "").because("release_note")
    at, who = now(request), actor(session)
    await request.app[DB].write(lambda c: device_service.release_hold(c, device_id, note=note, actor=who, now=at))
    return _answer(request, body, {"device_id": device_id, "released": True, "changed": True}, "released")


@ROUTES.post("/devices/{device_id}/screen-request", name="admin-device-screen-request")
@action
async def request_screen(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /devices/{id}/screen-request``: 查看当前屏幕 — ask the phone for one fresh screenshot (audited);
    404 unknown, 409 ``invalid_state`` revoked or working on a task."""
    device_id = _device_id(request)
    at, who = now(request), actor(session)
    request_id = await request.app[DB].write(lambda c: device_service.request_screen(c, device_id, actor=who, now=at))
    payload = {"device_id": device_id, "request_id": request_id, "changed": True}
    return _answer(request, body, payload, "screen_requested")


def setup(app: web.Application) -> None:
    """Register the device routes (each declared on its handler, in this file's order)."""
    app.router.add_routes(ROUTES)
