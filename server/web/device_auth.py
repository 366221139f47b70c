"""Device authentication for ``/api/v1/*`` (docs/api.md "Device authentication").

Rules: ``Authorization: Bearer <64 lowercase hex>`` and ``X-CMBuyer-Device-ID: <lowercase UUIDv4>``,
each present exactly once in the *raw* headers (a proxy's comma-merged value is refused too); the
scheme is case-insensitive and followed by exactly one ASCII space; the token is checked per request
by its SHA-256 together with the device id against an ACTIVE device (no caching). Every failure is
the same empty 401 with ``WWW-Authenticate: Bearer``; a storage failure is an empty 503.

This runs before Content-Type parsing and before any body byte is read — also for
``Expect: 100-continue``: aiohttp answers "100 Continue" from the route's expect handler *before*
middlewares run, so device routes get :func:`expect_handler`, which authenticates first and only then
lets the client send its body.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from collections.abc import Awaitable, Callable

from aiohttp import hdrs, web

from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import DomainError, Unavailable
from cmbuyer.server.store import devices as device_store
from cmbuyer.server.tx.device_tx import DeviceNotActive
from cmbuyer.server.web.access_log import DEVICE_KEY as ACCESS_DEVICE
from cmbuyer.server.web.device_errors import error_response, unauthorized, unavailable
from cmbuyer.server.web.edge import close_after, identity_only, prove
from cmbuyer.server.web.keys import DB

DEVICE_ID_KEY = web.RequestKey("device_id", str)

_BEARER = re.compile(rb"[Bb][Ee][Aa][Rr][Ee][Rr] ([0-9a-f]{64})")
_UUID4 = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
_AUTH = b"authorization"
_DEVICE = b"x-cmbuyer-device-id"

DeviceHandler = Callable[[web.Request, str], Awaitable[web.StreamResponse]]


def parse_credentials(raw_headers: tuple[tuple[bytes, bytes], ...]) -> tuple[str, bytes] | None:
    """``(device_id, sha256(token bytes))`` from raw headers, or None when anything is off.

    Pure function (no I/O), so every header case is testable directly.
    """
    auth: list[bytes] = []
    dev: list[bytes] = []
    for key, value in raw_headers:  # one pass: this runs for every device request
        name = key.lower()
        if name == _AUTH:
            auth.append(value)
        elif name == _DEVICE:
            dev.append(value)
    if len(auth) != 1 or len(dev) != 1:
        return None
    m = _BEARER.fullmatch(auth[0])
    if m is None or _UUID4.fullmatch(dev[0]) is None:
        return None
    return dev[0].decode("ascii"), hashlib.sha256(bytes.fromhex(m.group(1).decode("ascii"))).digest()


async def authenticate(request: web.Request) -> web.Response | None:
    """Authenticate once per request; on success store the device id on the request and return None,
    otherwise return the 401/503 response to send."""
    if DEVICE_ID_KEY in request:
        return None
    creds = parse_credentials(request.raw_headers)
    if creds is None:
        return unauthorized()
    device_id, token_hash = creds

    def lookup(conn: sqlite3.Connection) -> bool:
        return device_store.authenticate(conn, device_id, token_hash)

    try:
        ok = await request.app[DB].read_inline(lookup)  # one indexed lookup: no thread hop
    except Unavailable:
        return unavailable()
    if not ok:
        return unauthorized()
    request[DEVICE_ID_KEY] = device_id
    request[ACCESS_DEVICE] = device_id  # the access log's "device=<prefix>"
    prove(request, "device:" + device_id)
    return None


def encoding_refusal(request: web.Request) -> web.Response | None:
    """415 ``unsupported_media_type`` for a body with a Content-Encoding other than ``identity``
    (the edge rule, :func:`cmbuyer.server.web.edge.identity_only`); checked after authentication."""
    if identity_only(request.raw_headers):
        return None
    return error_response(415, Code.UNSUPPORTED_MEDIA_TYPE)


async def expect_handler(request: web.Request) -> web.Response | None:
    """Expect handler for device routes: authenticate *before* inviting the body (no interim 100 for
    an unauthenticated request); unknown expectations → 417 after authentication."""
    failure = await authenticate(request) or encoding_refusal(request)
    if failure is not None:
        # no 100 Continue: answer, half-close and drain only briefly whatever the client sends anyway
        return await close_after(request, failure)  # type: ignore[return-value]
    expect = request.headers.get(hdrs.EXPECT, "")
    if expect.lower() != "100-continue":
        return await close_after(request, web.Response(status=417))  # type: ignore[return-value]
    if request.version >= (1, 1):
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0
    return None


def device_route(handler: DeviceHandler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """Wrap ``handler(request, device_id)`` so it only runs for an authenticated device, and map its
    errors: DeviceNotActive → the empty 401, DeviceHTTPError / DomainError → ``{"error": code}`` with
    their status, Unavailable → 503."""

    async def guarded(request: web.Request) -> web.StreamResponse:
        # The body is never read for a refusal here; the edge middleware answers, then closes after
        # a bounded linger instead of draining the upload.
        failure = await authenticate(request) or encoding_refusal(request)
        if failure is not None:
            return failure
        try:
            return await handler(request, request[DEVICE_ID_KEY])
        except DeviceNotActive:
            # revoked between authentication and the transaction's first statement: the same
            # empty 401 as any other authentication failure (docs/api.md "Device authentication")
            return unauthorized()
        except DomainError as exc:  # a service's refusal, or the edge's own (DeviceHTTPError)
            return error_response(exc.status, exc.code)
        except Unavailable:
            return unavailable()

    guarded.__name__ = getattr(handler, "__name__", "device_handler")
    guarded.__doc__ = handler.__doc__
    return guarded


def add_device_route(app: web.Application, method: str, path: str, handler: DeviceHandler) -> None:
    """Register a device route with authentication-first handling, including ``Expect: 100-continue``."""
    app.router.add_route(method, path, device_route(handler), expect_handler=expect_handler)
