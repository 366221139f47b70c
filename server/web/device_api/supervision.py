"""Device routes of supervised first orders (docs/api.md "Supervised first orders: approval before the fence"): the
phone asks
a person to approve what it read before the fence, and polls the answer.

- ``POST /api/v1/purchase-attempts/{aid}/approval`` — one write job (device ACTIVE, ``approval_key``
  idempotency, the fence's claim checks), :func:`cmbuyer.server.services.supervision.request_approval`;
- ``POST /api/v1/purchase-attempts/{aid}/approval/status`` — read-only, no key,
  :func:`cmbuyer.server.services.supervision.approval_status`.

Both authenticate before any body byte (``add_device_route``), check the path id (``400 invalid_request``) and
read the body with the strict JSON reader (4096 bytes) and its schema.
"""

from __future__ import annotations

from aiohttp import web

from cmbuyer.server.services import supervision as supervision_service
from cmbuyer.server.web.device_api.common import attempt_job, stored_response, write
from cmbuyer.server.web.device_auth import add_device_route
from cmbuyer.server.web.device_errors import json_response
from cmbuyer.server.web.keys import DB

APPROVAL_PATH = "/api/v1/purchase-attempts/{attempt_id}/approval"
STATUS_PATH = "/api/v1/purchase-attempts/{attempt_id}/approval/status"


async def approval(request: web.Request, device_id: str) -> web.StreamResponse:
    """``POST …/approval`` → 200 approval.response (first answer or its byte-identical replay)."""
    job = await attempt_job(request, device_id, "approval.request", supervision_service.request_approval)
    return stored_response(await write(request, job))


async def approval_status(request: web.Request, device_id: str) -> web.StreamResponse:
    """``POST …/approval/status`` → 200 approval.response; 404 when the request is not one of this attempt."""
    job = await attempt_job(request, device_id, "approval_status.request", supervision_service.approval_status)
    result = await request.app[DB].read(job, snapshot=True)
    return json_response(200, result)


def setup(app: web.Application) -> None:
    """Register the two approval routes."""
    add_device_route(app, "POST", APPROVAL_PATH, approval)
    add_device_route(app, "POST", STATUS_PATH, approval_status)
