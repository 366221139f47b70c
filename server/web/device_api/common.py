"""Request helpers every device route shares: the path-id check, the job of an attempt route, the one
write job per request, the stored-answer response, the 4096-byte body cap — and the device API's state
built once from the settings (the claim policy and the per-attempt budget; settings do not change while
serving).

A route module imports from here and from :mod:`cmbuyer.server.web.device_auth`,
:mod:`~cmbuyer.server.web.jsonbody` and :mod:`~cmbuyer.server.web.device_errors`; it never registers
start-up checks or periodic jobs (those are listed in :mod:`cmbuyer.server.lifecycle`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol, TypeVar

from aiohttp import web

from cmbuyer.schemas import is_uuid4
from cmbuyer.server.domain.claims import ClaimPolicy
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import BrokenInvariant, SettingsError
from cmbuyer.server.domain.limits import AttemptBudget
from cmbuyer.server.tx.idempotency import Stored
from cmbuyer.server.web.device_errors import DeviceHTTPError, json_body_response
from cmbuyer.server.web.jsonbody import read_json
from cmbuyer.server.web.keys import CLOCK, DB, SETTINGS

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

BODY_CAP = 4096  # every device JSON body is capped at 4096 bytes unless its route says otherwise (docs/api.md)

POLICY = web.AppKey("claim_policy", ClaimPolicy)
# The per-attempt caps from the settings, built once at set-up.
BUDGET = web.AppKey("attempt_budget", AttemptBudget)


def path_id(request: web.Request, name: str) -> str:
    """The UUIDv4 path parameter ``name``; raises ``DeviceHTTPError(Code.INVALID_REQUEST)`` otherwise."""
    value = request.match_info[name]
    if not is_uuid4(value):
        raise DeviceHTTPError(Code.INVALID_REQUEST)
    return value


class AttemptService(Protocol[T_co]):
    """A service of a ``/api/v1/purchase-attempts/{attempt_id}/…`` route: one job over the device, the
    attempt, the schema-valid body and the server time."""

    def __call__(
        self, conn: sqlite3.Connection, *, device_id: str, attempt_id: str, body: dict[str, Any], now: datetime
    ) -> T_co: ...


async def attempt_job(
    request: web.Request, device_id: str, schema: str, service: AttemptService[T]
) -> Callable[[sqlite3.Connection], T]:
    """The job of an attempt route (docs/api.md "Device API I", "Device API II"): checks the ``attempt_id`` path
    parameter (400 ``invalid_request``) before reading the body with the strict reader against ``schema`` (4096-byte
    cap; 415/413/400), then returns the job that runs ``service``. The job reads the server time itself,
    at its transaction's position (not when the request arrived)."""
    attempt_id = path_id(request, "attempt_id")
    body = await read_json(request, schema, BODY_CAP)
    clock = request.app[CLOCK]

    def job(conn: sqlite3.Connection) -> T:
        return service(conn, device_id=device_id, attempt_id=attempt_id, body=body, now=clock.now())

    return job


async def write(request: web.Request, job: Callable[[sqlite3.Connection], T]) -> T:
    """Run one write job through the group-committed writer and return its value (answered after COMMIT).

    Every device job is short — one attempt's rows by index, at most 20 events — so it may run on the
    loop thread. Raises :class:`Unavailable` on storage failure (503)."""
    return await request.app[DB].write(job, short=True)


def stored_response(stored: Stored) -> web.Response:
    """The response of a stored (idempotent) answer: its status and its exact body bytes."""
    return json_body_response(stored.status, stored.body)


def claim_policy(app: web.Application) -> ClaimPolicy:
    """The claim policy built at set-up; raises :class:`Unavailable` (503) when the claim-token secret is
    not configured (the start-up check refuses to serve in that case, so only a test app gets here)."""
    policy = app.get(POLICY)
    if policy is None:
        try:
            policy = ClaimPolicy.from_settings(app[SETTINGS])
        except SettingsError:
            raise BrokenInvariant("claim token secret is not configured") from None
    return policy


def setup_state(app: web.Application) -> None:
    """Build the device API's state from ``app[SETTINGS]``: the per-attempt budget and, when the claim-token
    secret is set, the claim policy."""
    settings = app[SETTINGS]
    app[BUDGET] = AttemptBudget(
        events=settings.events_per_attempt,
        evidence_files=settings.evidence_per_attempt,
        evidence_bytes=settings.evidence_bytes_per_attempt,
    )
    try:
        app[POLICY] = ClaimPolicy.from_settings(app[SETTINGS])
    except SettingsError:
        pass  # no secret: the start-up check refuses to serve; handlers would answer 503
