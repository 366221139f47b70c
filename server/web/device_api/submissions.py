"""Device routes (docs/api.md "Device API I", "Device API II"): the order submission — its fence
(``POST /api/v1/purchase-attempts/{aid}/submission-fence``) and its result
(``POST /api/v1/order-submissions/{sid}/result``).

Each handler runs only after :mod:`~cmbuyer.server.web.device_auth` authenticated the request (before any
body byte), checks its path id (fence: 400 ``invalid_request``; result: 404 ``not_found``), reads its body
with the strict JSON reader (4096-byte cap) and runs exactly one write job through the group-committed
writer; responses are built after COMMIT. The expiry of a fenced submission without a result is the
sweeper's (:func:`cmbuyer.server.lifecycle.run_sweep`).
"""

from __future__ import annotations

import functools
import logging
import sqlite3

from aiohttp import web

from cmbuyer.schemas import is_uuid4
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.fence import FenceRefused
from cmbuyer.server.services import fence as fence_service
from cmbuyer.server.services import submission_result as result_service
from cmbuyer.server.tx.idempotency import Stored
from cmbuyer.server.web.device_api.common import BODY_CAP, attempt_job, stored_response, write
from cmbuyer.server.web.device_auth import add_device_route
from cmbuyer.server.web.device_errors import DeviceHTTPError, json_body_response, json_response
from cmbuyer.server.web.jsonbody import read_json
from cmbuyer.server.web.keys import CLOCK, SETTINGS

log = logging.getLogger(__name__)

FENCE_PATH = "/api/v1/purchase-attempts/{attempt_id}/submission-fence"
RESULT_PATH = "/api/v1/order-submissions/{submission_id}/result"


async def fence(request: web.Request, device_id: str) -> web.StreamResponse:
    """``POST /api/v1/purchase-attempts/{aid}/submission-fence`` → 200 (first: permit; replay: none)."""
    modes = request.app[SETTINGS].allowed_payment_modes
    service = functools.partial(fence_service.create_fence, allowed_payment_modes=modes)
    job = await attempt_job(request, device_id, "submission_fence.request", service)
    try:
        answer = await write(request, job)
    except FenceRefused as exc:
        return json_response(409, {"error": exc.code, "detail": exc.detail})
    if answer.permit:
        log.info("submission fence granted for attempt %s", request.match_info["attempt_id"])  # checked above
    return json_body_response(answer.status, answer.body)


async def result(request: web.Request, device_id: str) -> web.StreamResponse:
    """``POST /api/v1/order-submissions/{sid}/result`` → 200 submission_result.response."""
    submission_id = request.match_info["submission_id"]
    if not is_uuid4(submission_id):
        raise DeviceHTTPError(Code.NOT_FOUND)
    body = await read_json(request, "submission_result.request", BODY_CAP)
    clock = request.app[CLOCK]

    def job(conn: sqlite3.Connection) -> Stored:
        return result_service.report_result(
            conn, device_id=device_id, submission_id=submission_id, body=body, now=clock.now()
        )

    return stored_response(await write(request, job))


def setup(app: web.Application) -> None:
    """Register the submission fence and the submission result (authentication first)."""
    add_device_route(app, "POST", FENCE_PATH, fence)
    add_device_route(app, "POST", RESULT_PATH, result)
