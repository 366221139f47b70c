"""The ``page`` / ``action`` wrappers that put authentication, same-origin checks and CSRF in front of every
admin handler, and map its refusals to 4xx/503 — never 500 (docs/admin.md "Identity and sessions").

Order on an unsafe request: session (401) → Origin / Sec-Fetch-Site (403) → Content-Type and size
(415/413) → CSRF token (403) → handler. Nothing business-related runs before all of them passed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import DomainError, Unavailable, refusal
from cmbuyer.server.services.admin_sessions import AdminSession
from cmbuyer.server.web.access_log import ADMIN_KEY as ACCESS_ADMIN
from cmbuyer.server.web.admin import csrf
from cmbuyer.server.web.admin.body import Body, read_body
from cmbuyer.server.web.admin.render import VIEW_HEADER, refuse
from cmbuyer.server.web.admin.session import current_session
from cmbuyer.server.web.client_address import request_scheme
from cmbuyer.server.web.keys import SETTINGS

PageHandler = Callable[[web.Request, AdminSession], Awaitable[web.StreamResponse]]
ActionHandler = Callable[[web.Request, AdminSession, Body], Awaitable[web.StreamResponse]]


def own_origin(request: web.Request) -> str:
    """``scheme://host[:port]`` of this server as the browser addressed it."""
    return f"{request_scheme(request)}://{request.host}"


def same_origin(request: web.Request) -> bool:
    """False for a cross-site/same-site ``Sec-Fetch-Site``, ``Origin: null``, a foreign or repeated
    Origin. Requests with neither header (non-browser clients) pass; the CSRF token still applies."""
    origins = request.headers.getall("Origin", [])
    if len(origins) > 1:
        return False
    if origins and (origins[0] == "null" or origins[0] != own_origin(request)):
        return False
    sites = request.headers.getall("Sec-Fetch-Site", [])
    return not (len(sites) > 1 or (sites and sites[0] != "same-origin"))


def unauthenticated(request: web.Request) -> web.StreamResponse:
    """401 for API/fragment callers; a browser navigation is sent to the login page instead."""
    accept = request.headers.get("Accept", "")
    if request.method == "GET" and "text/html" in accept and not request.headers.get(VIEW_HEADER):
        raise web.HTTPSeeOther("/login")
    return refuse(request, refusal(Code.UNAUTHENTICATED, "请先登录"))


async def _guarded(
    request: web.Request, run: Callable[[AdminSession], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Require a session (401 otherwise), run ``run(session)`` and map its errors to 4xx/503 — never 500."""
    session: AdminSession | None = None
    try:
        session = await current_session(request)
        if session is None:
            return unauthenticated(request)
        request[ACCESS_ADMIN] = session.username  # the access log's "admin=<username>"
        return await run(session)
    except (DomainError, Unavailable) as exc:
        return refuse(request, exc, session)


def page(handler: PageHandler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """Wrap a safe (GET) admin handler: requires a session; maps errors to 4xx/503, never 500."""

    async def wrapper(request: web.Request) -> web.StreamResponse:
        return await _guarded(request, lambda session: handler(request, session))

    wrapper.__name__ = handler.__name__
    wrapper.__doc__ = handler.__doc__
    return wrapper


def action(handler: ActionHandler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """Wrap an unsafe admin handler: session (401), same-origin (403), body, CSRF token from the form
    field ``csrf_token`` or header ``X-CSRF-Token`` — never the query string — (403), then the handler."""

    async def checked(request: web.Request, session: AdminSession) -> web.StreamResponse:
        if not same_origin(request):
            raise refusal(Code.CROSS_SITE_REQUEST, "拒绝跨站请求")
        body = await read_body(request)
        supplied = request.headers.getall("X-CSRF-Token", [])
        form_tokens = body.form.get("csrf_token", []) if body.kind == "form" else []
        candidates = supplied + form_tokens
        if len(candidates) != 1 or not csrf.check_session_token(request.app[SETTINGS], session.token, candidates[0]):
            raise refusal(Code.CSRF_FAILED, "表单已过期或来源无效，请刷新页面后重试")
        return await handler(request, session, body)

    async def wrapper(request: web.Request) -> web.StreamResponse:
        return await _guarded(request, lambda session: checked(request, session))

    wrapper.__name__ = handler.__name__
    wrapper.__doc__ = handler.__doc__
    return wrapper
