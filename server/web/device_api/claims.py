"""Device routes (docs/api.md "Device API I"): claim-next and lease renew — the claim resource.

Each handler runs only after :mod:`~cmbuyer.server.web.device_auth` authenticated the request (before
Content-Type parsing and before any body byte, ``Expect: 100-continue`` included), reads its body with the
strict reader (415/413/400) and runs exactly one write job through the group-committed writer. The server
time used by a job is read *inside* the job, at the transaction's write position. Responses are built
from what the job returned, i.e. after COMMIT. A device revoked between authentication and the write
position gets the same empty 401 as any authentication failure.

The claim-token secret is checked against existing claims before serving by
:func:`cmbuyer.server.lifecycle.check_claim_secret` (listed in the lifecycle module, not here).
"""

from __future__ import annotations

import sqlite3

from aiohttp import web

from cmbuyer.server.services import claim_next as claim_service
from cmbuyer.server.services import renew_lease as renew_service
from cmbuyer.server.tx.idempotency import Stored
from cmbuyer.server.web.device_api.common import BODY_CAP, claim_policy, path_id, stored_response, write
from cmbuyer.server.web.device_auth import add_device_route
from cmbuyer.server.web.jsonbody import read_json
from cmbuyer.server.web.keys import CLOCK

CLAIM_NEXT_PATH = "/api/v1/tasks/claim-next"
RENEW_PATH = "/api/v1/tasks/{task_id}/lease/renew"


async def claim_next(request: web.Request, device_id: str) -> web.StreamResponse:
    """``POST /api/v1/tasks/claim-next`` → 200 claim (or same-session resume), 204 EMPTY, 409 …"""
    body = await read_json(request, "claim_next.request", BODY_CAP)
    clock, policy = request.app[CLOCK], claim_policy(request.app)

    def job(conn: sqlite3.Connection) -> Stored:
        return claim_service.claim_next(
            conn,
            device_id=device_id,
            session_id=body["session_id"],
            claim_request_id=body["claim_request_id"],
            now=clock.now(),
            policy=policy,
            pack_id=body.get("pack_id"),
        )

    return stored_response(await write(request, job))


async def renew(request: web.Request, device_id: str) -> web.StreamResponse:
    """``POST /api/v1/tasks/{id}/lease/renew`` → 200 new lease, 409 claim_not_current / idempotency_conflict."""
    task_id = path_id(request, "task_id")
    body = await read_json(request, "lease_renew.request", BODY_CAP)
    clock, policy = request.app[CLOCK], claim_policy(request.app)

    def job(conn: sqlite3.Connection) -> Stored:
        return renew_service.renew_lease(
            conn, device_id=device_id, task_id=task_id, body=body, now=clock.now(), policy=policy
        )

    return stored_response(await write(request, job))


def setup(app: web.Application) -> None:
    """Register claim-next and lease renew (authentication first)."""
    add_device_route(app, "POST", CLAIM_NEXT_PATH, claim_next)
    add_device_route(app, "POST", RENEW_PATH, renew)
