"""``GET /devices`` (last heartbeat, app version, allowed, pack (识别包), open claim) and
``POST /devices/{id}/revoke`` — the same revoke use-case as ``cmbuyer-server device revoke``.

Revoking needs an explicit confirmation field (``confirm=revoke``) besides CSRF: the page asks with a
required checkbox, which works without JavaScript."""

from __future__ import annotations

from datetime import timedelta

from aiohttp import web

from cmbuyer.schemas import is_uuid4
from cmbuyer.server.clock import from_wire
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import ValidationFailed
from cmbuyer.server.services import devices as device_service
from cmbuyer.server.services import supervision_admin
from cmbuyer.server.services.admin_sessions import AdminSession
from cmbuyer.server.store.queries import admin as admin_queries
from cmbuyer.server.web.admin.common import (
    AdminHTTPError,
    Body,
    action,
    actor,
    csrf_token_for,
    now,
    page,
    redirect,
    render,
    wants_json,
)
from cmbuyer.server.web.keys import DB, SETTINGS

NOTICES = {
    "revoked": "设备已撤销；它的令牌不再有效。",
    "already": "设备此前已撤销。",
    "resupervised": "已重新开始人工监督：这台设备接下来的订单都要先经人工确认。",
}


@page
async def list_devices(request: web.Request, session: AdminSession) -> web.StreamResponse:
    """``GET /devices``: every device with its heartbeat freshness and open claim."""
    devices = await request.app[DB].read(admin_queries.devices_with_claims)
    settings = request.app[SETTINGS]
    supervision = await request.app[DB].read(
        lambda c: supervision_admin.device_states(c, supervision_admin.required_orders(settings))
    )
    at = now(request)
    stale_after = timedelta(seconds=settings.heartbeat_interval * settings.heartbeat_stale_factor)
    for d in devices:
        beat = d["last_heartbeat_at"]
        d["heartbeat_stale"] = beat is None or at - from_wire(beat) > stale_after
        d["lease_expired"] = bool(d["claim_lease_expires_at"]) and from_wire(d["claim_lease_expires_at"]) <= at
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
        },
    )


@action
async def revoke_device(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /devices/{id}/revoke`` with ``confirm=revoke``: revoke (idempotent); 404 unknown device."""
    device_id = request.match_info["device_id"]
    if not is_uuid4(device_id):
        raise AdminHTTPError(404, Code.NOT_FOUND, "设备不存在")
    confirm = body.json.get("confirm") if body.kind == "json" else body.one("confirm")
    if confirm != "revoke":
        raise ValidationFailed("confirm", "请勾选确认后再撤销设备")
    at, who = now(request), actor(session)
    changed = await request.app[DB].write(lambda c: device_service.revoke_device(c, device_id, who, at))
    if body.kind == "json" or wants_json(request):
        return web.json_response({"device_id": device_id, "revoked": True, "changed": changed})
    return redirect("/devices?notice=" + ("revoked" if changed else "already"))


def setup(app: web.Application) -> None:
    """Register the device routes."""
    app.router.add_get("/devices", list_devices, name="admin-devices")
    app.router.add_post("/devices/{device_id}/revoke", revoke_device, name="admin-device-revoke")
