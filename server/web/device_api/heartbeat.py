"""Device route (docs/api.md "Device API I", "Device API II"): ``POST /api/v1/devices/heartbeat``.

The handler runs only after :mod:`~cmbuyer.server.web.device_auth` authenticated the request (before
Content-Type parsing and before any body byte, ``Expect: 100-continue`` included), reads its body with the
strict reader (415/413/400) and runs exactly one write job through the group-committed writer; the server
time the job uses is read *inside* the job. The response is built from what the job returned, i.e. after
COMMIT. A device revoked between authentication and the write position gets the same empty 401 as any
authentication failure.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from aiohttp import web

from cmbuyer.server.domain.codes import Code
from cmbuyer.server.services import heartbeat as heartbeat_service
from cmbuyer.server.web.device_api.common import BODY_CAP, claim_policy, write
from cmbuyer.server.web.device_auth import add_device_route
from cmbuyer.server.web.device_errors import DeviceHTTPError, json_response
from cmbuyer.server.web.jsonbody import read_json
from cmbuyer.server.web.keys import CLOCK

HEARTBEAT_PATH = "/api/v1/devices/heartbeat"


async def heartbeat(request: web.Request, device_id: str) -> web.StreamResponse:
    """``POST /api/v1/devices/heartbeat`` → 200 heartbeat.response (see docs/api.md)."""
    body = await read_json(request, "heartbeat.request", BODY_CAP)
    if body["device_id"] != device_id:
        raise DeviceHTTPError(Code.INVALID_REQUEST)  # the body may only describe the authenticated device
    clock, policy = request.app[CLOCK], claim_policy(request.app)

    def job(conn: sqlite3.Connection) -> dict[str, Any]:
        return heartbeat_service.record_heartbeat(conn, device_id=device_id, body=body, now=clock.now(), policy=policy)

    return json_response(200, await write(request, job))


def setup(app: web.Application) -> None:
    """Register the heartbeat route (authentication first)."""
    add_device_route(app, "POST", HEARTBEAT_PATH, heartbeat)
