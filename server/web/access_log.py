"""The server's access log: one line per request on the ``cmbuyer.access`` logger, at INFO.

What a line carries: the method, the **route template** (``/api/v1/tasks/{task_id}/events``, never the
path with its ids, and never the query string — a query may carry anything a client typed), the status,
the time to the response in milliseconds, and who: ``device=<first 8 characters of the device id>`` once
the device was authenticated, ``admin=<username>`` for a request with a valid admin session, else ``-``.
It never carries a header value, a cookie, a token or a body. In JSON mode (``CMBUYER_LOG_FORMAT=json``)
the same facts are fields: ``method``, ``route``, ``status``, ``ms``, ``device``/``admin``.

The idle polling of a healthy fleet — a heartbeat answered 200, a claim-next answered 204, ``GET /healthz``
answered 200 — is logged at DEBUG (``CMBUYER_LOG_LEVEL=DEBUG`` shows it): every phone sends one of them each
second while the queue is empty, which would bury every other line. Any other answer to them (401, 409,
503 …) and every other request are INFO.

A request that matched no route logs ``route`` as ``-`` (so a scan of random paths does not write them
into the log either). The middleware sits outermost, so refusals answered by inner middlewares and
handlers (401, 413, 415, 503 …) are logged with their real status; an exception that escapes every
handler is logged as 500 and re-raised unchanged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

access_log = logging.getLogger("cmbuyer.access")

#: set by the device authentication (device id) and the admin session check (username)
DEVICE_KEY = web.RequestKey("access_device", str)
ADMIN_KEY = web.RequestKey("access_admin", str)
#: callables ``(method, route template, status, seconds)`` told about every request (the metrics' latency
#: histogram); the list is created with the app (:func:`setup`)
OBSERVERS = web.AppKey("request_observers", list)
DEVICE_PREFIX = 8  # enough to tell a fleet's phones apart, not the whole id
#: (method, route template, status) of the idle polls logged at DEBUG
QUIET = frozenset(
    {
        ("POST", "/api/v1/devices/heartbeat", 200),
        ("POST", "/api/v1/tasks/claim-next", 204),
        ("GET", "/healthz", 200),
    }
)


def route_template(request: web.Request) -> str:
    """The matched route's template (``/tasks/{task_id}``), or ``-`` when no route matched."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "-"


def who(request: web.Request) -> dict[str, str]:
    """``{"device": <id prefix>}``, ``{"admin": <username>}`` or ``{}`` for this request."""
    device = request.get(DEVICE_KEY)
    if device:
        return {"device": device[:DEVICE_PREFIX]}
    admin = request.get(ADMIN_KEY)
    return {"admin": admin} if admin else {}


@web.middleware
async def access_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Time the request and log one access line after the handler answered (or raised)."""
    observers = request.app[OBSERVERS]
    if not observers and not access_log.isEnabledFor(logging.DEBUG):
        return await handler(request)
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        seconds = time.perf_counter() - started
        ms = round(seconds * 1000, 1)
        fields: dict[str, object] = {
            "method": request.method,
            "route": route_template(request),
            "status": status,
            "ms": ms,
            **who(request),
        }
        actor = " ".join(f"{k}={v}" for k, v in who(request).items()) or "-"
        route = str(fields["route"])
        for observe in observers:
            observe(request.method, route, status, seconds)
        level = logging.DEBUG if (request.method, route, status) in QUIET else logging.INFO
        access_log.log(
            level, "%s %s %d %.1fms %s", request.method, fields["route"], status, ms, actor, extra={"fields": fields}
        )


def setup(app: web.Application) -> None:
    """Give the app its (empty) list of request observers; the metrics module adds one when enabled."""
    app[OBSERVERS] = []
