"""Device route of issue 4 (docs/api.md "Device API I", "Device API II"): ``POST /api/v1/purchase-attempts/{aid}/fail``
— the phone gives up an attempt before the fence.

The handler runs only after :mod:`~cmbuyer.server.web.device_auth` authenticated the request (before any
body byte), checks its path id (400), reads its body with the strict JSON reader (4096-byte cap) and runs
exactly one write job through the group-committed writer; the response is built after COMMIT. The
approval routes under the same URL prefix are in :mod:`~cmbuyer.server.web.device_api.supervision`; the
submission fence in :mod:`~cmbuyer.server.web.device_api.submissions`.
"""

from __future__ import annotations

import sqlite3

from aiohttp import web

from cmbuyer.server.services import fail_attempt as fail_service
from cmbuyer.server.tx.idempotency import Stored
from cmbuyer.server.web.device_api.common import BODY_CAP, path_id, stored_response, write
from cmbuyer.server.web.device_auth import add_device_route
from cmbuyer.server.web.jsonbody import read_json
from cmbuyer.server.web.keys import CLOCK

FAIL_PATH = "/api/v1/purchase-attempts/{attempt_id}/fail"


async def fail(request: web.Request, device_id: str) -> web.StreamResponse:
    """``POST /api/v1/purchase-attempts/{aid}/fail`` → 200 attempt_fail.response; see docs/api.md."""
    attempt_id = path_id(request, "attempt_id")
    body = await read_json(request, "attempt_fail.request", BODY_CAP)
    clock = request.app[CLOCK]

    def job(conn: sqlite3.Connection) -> Stored:
        return fail_service.fail_attempt(conn, device_id=device_id, attempt_id=attempt_id, body=body, now=clock.now())

    return stored_response(await write(request, job))


def setup(app: web.Application) -> None:
    """Register the fail route (authentication first)."""
    add_device_route(app, "POST", FAIL_PATH, fail)
