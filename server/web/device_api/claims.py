"""Device routes of issue 3 (spec 002 §二): heartbeat, claim-next, lease renew.

Each handler runs only after :mod:`device_auth` authenticated the request (before Content-Type
parsing and before any body byte, ``Expect: 100-continue`` included), reads its body with the strict
reader (415/413/400) and runs exactly one write job through the group-committed writer. The server
time used by a job is read *inside* the job, at the transaction's write position. Responses are built
from what the job returned, i.e. after COMMIT. A device revoked between authentication and the write
position gets the same empty 401 as any authentication failure.

Start-up: :func:`check_claim_secret` is registered in ``app[STARTUP_CHECKS]`` — a claim-token secret
that does not rebuild existing claims refuses start-up.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from aiohttp import web

from cmbuyer.schemas import is_uuid4
from cmbuyer.server.app import STARTUP_CHECKS, StartupRefused
from cmbuyer.server.config import SettingsError
from cmbuyer.server.db import StorageError
from cmbuyer.server.services import claim_next as claim_service
from cmbuyer.server.services import heartbeat as heartbeat_service
from cmbuyer.server.services import renew_lease as renew_service
from cmbuyer.server.services.claim_next import ClaimPolicy
from cmbuyer.server.services.claim_secret import SecretMismatch, verify_secret
from cmbuyer.server.services.idempotency import Stored
from cmbuyer.server.web.device_auth import add_device_route
from cmbuyer.server.web.device_errors import DeviceHTTPError, json_body_response, json_response
from cmbuyer.server.web.jsonbody import read_json
from cmbuyer.server.web.keys import CLOCK, DB, SETTINGS

HEARTBEAT_PATH = "/api/v1/devices/heartbeat"
CLAIM_NEXT_PATH = "/api/v1/tasks/claim-next"
RENEW_PATH = "/api/v1/tasks/{task_id}/lease/renew"
BODY_CAP = 4096  # spec 002: claim/renew bodies are capped at 4096 bytes (heartbeat too)

POLICY = web.AppKey("claim_policy", ClaimPolicy)


def _policy(app: web.Application) -> ClaimPolicy:
    policy = app.get(POLICY)
    if policy is None:
        try:
            policy = ClaimPolicy.from_settings(app[SETTINGS])
        except SettingsError:
            raise StorageError("claim token secret is not configured") from None
    return policy


async def heartbeat(request: web.Request, device_id: str) -> web.StreamResponse:
    """``POST /api/v1/devices/heartbeat`` → 200 heartbeat.response (see docs/api.md)."""
    body = await read_json(request, "heartbeat.request", BODY_CAP)
    if body["device_id"] != device_id:
        raise DeviceHTTPError(400, "invalid_request")  # the body may only describe the authenticated device
    clock, policy = request.app[CLOCK], _policy(request.app)

    def job(conn: sqlite3.Connection) -> dict[str, Any]:
        return heartbeat_service.record_heartbeat(conn, device_id=device_id, body=body, now=clock.now(), policy=policy)

    result = await request.app[DB].write(job, short=True)
    return json_response(200, result)


async def claim_next(request: web.Request, device_id: str) -> web.StreamResponse:
    """``POST /api/v1/tasks/claim-next`` → 200 claim (or same-session resume), 204 EMPTY, 409 …"""
    body = await read_json(request, "claim_next.request", BODY_CAP)
    clock, policy = request.app[CLOCK], _policy(request.app)

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

    stored = await request.app[DB].write(job, short=True)
    return json_body_response(stored.status, stored.body)


async def renew(request: web.Request, device_id: str) -> web.StreamResponse:
    """``POST /api/v1/tasks/{id}/lease/renew`` → 200 new lease, 409 claim_not_current / idempotency_conflict."""
    task_id = request.match_info["task_id"]
    if not is_uuid4(task_id):
        raise DeviceHTTPError(400, "invalid_request")
    body = await read_json(request, "lease_renew.request", BODY_CAP)
    clock, policy = request.app[CLOCK], _policy(request.app)

    def job(conn: sqlite3.Connection) -> Stored:
        return renew_service.renew_lease(
            conn, device_id=device_id, task_id=task_id, body=body, now=clock.now(), policy=policy
        )

    stored = await request.app[DB].write(job, short=True)
    return json_body_response(stored.status, stored.body)


async def check_claim_secret(app: web.Application) -> None:
    """Start-up check: the configured claim-token secret must rebuild existing claims (fail closed)."""
    try:
        policy = ClaimPolicy.from_settings(app[SETTINGS])
    except SettingsError as exc:
        raise StartupRefused(str(exc)) from None
    try:
        await app[DB].read(lambda conn: verify_secret(conn, policy.secret))
    except SecretMismatch as exc:
        raise StartupRefused(str(exc)) from None
    except StorageError:
        raise StartupRefused("cannot read existing claims to verify CMBUYER_CLAIM_TOKEN_SECRET") from None


def setup(app: web.Application) -> None:
    """Register heartbeat, claim-next and lease renew (authentication first) and the secret check."""
    add_device_route(app, "POST", HEARTBEAT_PATH, heartbeat)
    add_device_route(app, "POST", CLAIM_NEXT_PATH, claim_next)
    add_device_route(app, "POST", RENEW_PATH, renew)
    app[STARTUP_CHECKS].append(check_claim_secret)
    try:
        app[POLICY] = ClaimPolicy.from_settings(app[SETTINGS])
    except SettingsError:
        pass  # no secret: the start-up check refuses to serve; handlers would answer 503
