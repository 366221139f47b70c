"""Device route (docs/api.md "Device API I", "Device API II"): ``POST /api/v1/purchase-attempts/{aid}/fail``
— the phone gives up an attempt before the fence.

The handler runs only after :mod:`~cmbuyer.server.web.device_auth` authenticated the request (before any
body byte), checks its path id (400), reads its body with the strict JSON reader (4096-byte cap) and runs
exactly one write job through the group-committed writer; the response is built after COMMIT. The
approval routes under the same URL prefix are in :mod:`~cmbuyer.server.web.device_api.supervision`; the
submission fence in :mod:`~cmbuyer.server.web.device_api.submissions`.
"""

from __future__ import annotations

from aiohttp import web

from cmbuyer.server.services import fail_attempt as fail_service
from cmbuyer.server.web.device_api.common import attempt_job, stored_response, write
from cmbuyer.server.web.device_auth import add_device_route

FAIL_PATH = "/api/v1/purchase-attempts/{attempt_id}/fail"


async def fail(request: web.Request, device_id: str) -> web.StreamResponse:
    """``POST /api/v1/purchase-attempts/{aid}/fail`` → 200 attempt_fail.response; see docs/api.md."""
    job = await attempt_job(request, device_id, "attempt_fail.request", fail_service.fail_attempt)
    return stored_response(await write(request, job))


def setup(app: web.Application) -> None:
    """Register the fail route (authentication first)."""
    add_device_route(app, "POST", FAIL_PATH, fail)
