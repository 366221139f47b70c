"""Admin routes of supervised first orders (docs/admin.md "Supervised first orders"):

- ``POST /approvals/{approval_id}/approve`` and ``/reject`` — the buttons 批准 / 驳回 of the task drawer;
- ``POST /order-submissions/{sid}/supervision-verdict`` — ``verdict`` = ``right`` | ``wrong``, optional
  ``note`` (核对无误 / 有误 on the task page);
- ``POST /devices/{device_id}/resupervise`` — 重新人工监督 on the devices page.

All behind the usual session → same-origin → body → CSRF wrapper (:func:`common.action`). Forms get a
303 to the page they came from; a refusal re-renders the task page with the Chinese message and the
real 4xx status (nothing changed); JSON callers get the error bodies of docs/admin.md "Error codes of the admin routes".
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from cmbuyer.schemas import is_uuid4
from cmbuyer.server.domain.errors import DomainError
from cmbuyer.server.services import supervision_admin as service
from cmbuyer.server.services.admin_sessions import AdminSession
from cmbuyer.server.store.queries import supervision as store
from cmbuyer.server.web.admin.body import Body
from cmbuyer.server.web.admin.guards import action
from cmbuyer.server.web.admin.render import json_answer, now, redirect, request_id, wants_json
from cmbuyer.server.web.admin.session import actor

# a refused form gets the task page again, rendered exactly as GET /tasks/{id} does
from cmbuyer.server.web.admin.tasks import back_to, refused_on_task
from cmbuyer.server.web.keys import DB


def _json(request: web.Request, body: Body) -> bool:
    return body.kind == "json" or wants_json(request)


def _field(body: Body, name: str) -> Any:
    return body.json.get(name) if body.kind == "json" else body.one(name)


def _answer(request: web.Request, body: Body, payload: dict[str, Any], location: str) -> web.Response:
    """JSON callers get ``payload``; a form gets a 303 to ``location``."""
    return json_answer(payload) if _json(request, body) else redirect(location)


async def _decide(request: web.Request, session: AdminSession, body: Body, kind: str) -> web.StreamResponse:
    approval_id = request.match_info["approval_id"]
    at, who, rid = now(request), actor(session), request_id(request)
    try:
        decision = await request.app[DB].write(lambda c: service.decide_approval(c, approval_id, kind, who, at, rid))
    except DomainError as exc:
        row = None if exc.status == 404 else await request.app[DB].read(lambda c: store.approval(c, approval_id))
        return await refused_on_task(request, session, body, exc, row["task_id"] if row else None)
    notice = (
        ("approved" if kind == "approve" else "rejected")
        if decision.changed
        else ("already_approved" if kind == "approve" else "already_rejected")
    )
    payload = {
        "approval_id": decision.approval_id,
        "task_id": decision.task_id,
        "state": decision.state,
        "changed": decision.changed,
    }
    return _answer(request, body, payload, back_to(body, decision.task_id, notice))


@action
async def approve(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /approvals/{approval_id}/approve``: WAITING → APPROVED (the phone may then ask the fence)."""
    return await _decide(request, session, body, "approve")


@action
async def reject(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /approvals/{approval_id}/reject``: WAITING → REJECTED (the phone fails the attempt before the
    fence with ``REJECTED_BY_REVIEWER``)."""
    return await _decide(request, session, body, "reject")


@action
async def supervision_verdict(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /order-submissions/{sid}/supervision-verdict`` with ``verdict`` = ``right`` | ``wrong`` and an
    optional ``note`` (≤ 500): right counts towards N, wrong holds the device–pack pair."""
    sid = request.match_info["sid"]
    at, who, rid = now(request), actor(session), request_id(request)
    try:
        verdict, note = service.parse_verdict({"verdict": _field(body, "verdict"), "note": _field(body, "note")})
        result = await request.app[DB].write(lambda c: service.record_verdict(c, sid, verdict, note, who, at, rid))
    except DomainError as exc:
        sub = None
        if exc.status != 404 and is_uuid4(sid):
            sub = await request.app[DB].read(lambda c: store.submission_for_verdict(c, sid))
        return await refused_on_task(request, session, body, exc, sub["task_id"] if sub else None)
    payload = {
        "submission_id": result.submission_id,
        "verdict": result.verdict,
        "device_id": result.device_id,
        "pack_key": result.pack_key,
        "confirmed_orders": result.confirmed_orders,
        "held": result.held,
    }
    notice = "verdict_right" if verdict == "RIGHT" else "verdict_wrong"
    return _answer(request, body, payload, f"/tasks/{result.task_id}?notice={notice}")


@action
async def resupervise(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /devices/{device_id}/resupervise``: every pair of the device → 0 confirmed, not held."""
    device_id = request.match_info["device_id"]
    at, who, rid = now(request), actor(session), request_id(request)
    pairs = await request.app[DB].write(lambda c: service.resupervise(c, device_id, who, at, rid))
    return _answer(request, body, {"device_id": device_id, "pairs_reset": pairs}, "/devices?notice=resupervised")


def setup(app: web.Application) -> None:
    """Register the supervision routes."""
    app.router.add_post("/approvals/{approval_id}/approve", approve, name="admin-approval-approve")
    app.router.add_post("/approvals/{approval_id}/reject", reject, name="admin-approval-reject")
    app.router.add_post(
        "/order-submissions/{sid}/supervision-verdict", supervision_verdict, name="admin-supervision-verdict"
    )
    app.router.add_post("/devices/{device_id}/resupervise", resupervise, name="admin-device-resupervise")
