"""Plumbing shared by every admin route group: errors, request ids, body reading, rendering,
session lookup and the ``page`` / ``action`` wrappers that put authentication, same-origin checks
and CSRF in front of every handler (docs/admin.md "Identity and sessions").

Order on an unsafe request: session (401) → Origin / Sec-Fetch-Site (403) → Content-Type and size
(415/413) → CSRF token (403) → handler. Nothing business-related runs before all of them passed.
Device ``Authorization: Bearer`` headers are never looked at here: admin identity is the cookie only.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from urllib.parse import parse_qsl

import jinja2
from aiohttp import web

from cmbuyer.schemas.strictjson import loads_strict
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import CmbuyerError, DomainError, Unavailable
from cmbuyer.server.services import admin_sessions
from cmbuyer.server.services.admin_sessions import AdminSession
from cmbuyer.server.tx.common import Actor
from cmbuyer.server.web.access_log import ADMIN_KEY as ACCESS_ADMIN
from cmbuyer.server.web.admin import csrf
from cmbuyer.server.web.admin.labels import refusal_message
from cmbuyer.server.web.client_address import request_scheme
from cmbuyer.server.web.edge import BODY_READ_TIMEOUT_S, prove, read_chunk
from cmbuyer.server.web.keys import CLOCK, DB, SETTINGS

SESSION_COOKIE = "cmbuyer_session"
LOGIN_COOKIE = "cmbuyer_login"
BODY_CAP = 256 * 1024
VIEW_HEADER = "X-CMBuyer-View"
JINJA = web.AppKey("cmbuyer_admin_jinja", jinja2.Environment)
REQUEST_ID = web.RequestKey("cmbuyer_request_id", str)
BEIJING = timezone(timedelta(hours=8), "UTC+8")
_FORM_TYPE = re.compile(r"application/x-www-form-urlencoded(?:\s*;\s*charset=\"?utf-8\"?)?", re.I | re.ASCII)
_UTC_TEXT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?Z", re.ASCII)
_JSON_TYPE = re.compile(r"application/json(?:\s*;\s*charset=\"?utf-8\"?)?", re.I | re.ASCII)


class AdminHTTPError(CmbuyerError):
    """A refusal with a status, a stable code (docs/api.md) and a Chinese message for people."""

    def __init__(self, status: int, code: str, message: str, *, retryable: bool = False) -> None:
        super().__init__(code)
        self.status = status
        self.code = code
        self.message = message
        self.retryable = retryable


def request_id(request: web.Request) -> str:
    """This request's id (a fresh UUIDv4, echoed in error bodies and ``X-Request-ID``)."""
    rid = request.get(REQUEST_ID)
    if rid is None:
        rid = str(uuid.uuid4())
        request[REQUEST_ID] = rid
    return rid


def now(request: web.Request) -> datetime:
    """The injected clock's current time (aware UTC)."""
    return request.app[CLOCK].now()


def actor(session: AdminSession) -> Actor:
    """The audit actor of an admin session (:attr:`AdminSession.actor`)."""
    return session.actor


def wants_json(request: web.Request) -> bool:
    """True for API-style callers: a JSON body, or an Accept header that asks for JSON and not HTML."""
    if _JSON_TYPE.fullmatch(request.headers.get("Content-Type", "").strip()):
        return True
    accept = request.headers.get("Accept", "")
    return "application/json" in accept and "text/html" not in accept


def json_answer(payload: Mapping[str, Any], status: int = 200) -> web.Response:
    """A JSON caller's answer to an admin action: ``payload`` with ``Cache-Control: no-store`` (the answer
    describes one write; a cache must never replay it)."""
    return web.json_response(payload, status=status, headers={"Cache-Control": "no-store"})


def error_json(request: web.Request, status: int, code: str, message: str, retryable: bool = False) -> web.Response:
    """The admin error body (docs/admin.md "Error codes of the admin routes")
    ``{"error":{code,message,retryable,request_id}}``."""
    rid = request_id(request)
    body = {"error": {"code": code, "message": message, "retryable": retryable, "request_id": rid}}
    return web.json_response(
        body,
        status=status,
        headers={"X-Request-ID": rid, "Cache-Control": "no-store"},
        dumps=lambda v: json.dumps(v, ensure_ascii=False),
    )


def render(
    request: web.Request,
    template: str,
    context: dict[str, Any],
    *,
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """Render a Jinja2 template (autoescaped) as ``text/html; charset=utf-8``, never cached."""
    text = request.app[JINJA].get_template(template).render(**context)
    out = {"Cache-Control": "no-store"}
    out.update(headers or {})
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8", headers=out)


def error_page(
    request: web.Request, status: int, code: str, message: str, session: AdminSession | None = None
) -> web.Response:
    """An HTML error page (status as given) with a link back."""
    rid = request_id(request)
    return render(
        request,
        "error.html",
        {
            "status": status,
            "code": code,
            "message": message,
            "request_id": rid,
            "session": session,
            "csrf_token": _csrf_for(request, session),
        },
        status=status,
        headers={"X-Request-ID": rid},
    )


def refuse(request: web.Request, exc: AdminHTTPError, session: AdminSession | None = None) -> web.Response:
    """Render ``exc`` as JSON or HTML depending on the caller."""
    if wants_json(request) or request.headers.get(VIEW_HEADER):
        return error_json(request, exc.status, exc.code, exc.message, exc.retryable)
    return error_page(request, exc.status, exc.code, exc.message, session)


def redirect(location: str) -> web.Response:
    """A 303 See Other to a local path (POST/redirect/GET after every successful form action)."""
    return web.Response(status=303, headers={"Location": location, "Cache-Control": "no-store"})


def domain_refusal(exc: DomainError) -> AdminHTTPError:
    """Map a domain error to its HTTP refusal (status and code come from the error)."""
    return AdminHTTPError(exc.status, exc.code, refusal_message(exc))


STORAGE_REFUSAL = AdminHTTPError(503, Code.STORAGE_UNAVAILABLE, "数据库暂时不可用，请稍后再试", retryable=True)


def _csrf_for(request: web.Request, session: AdminSession | None) -> str:
    if session is None:
        return ""
    return csrf.session_token(request.app[SETTINGS], session.token)


def csrf_token_for(request: web.Request, session: AdminSession) -> str:
    """The synchronizer token to embed in this session's forms (and the JS header)."""
    return csrf.session_token(request.app[SETTINGS], session.token)


# -- cookies and sessions ---------------------------------------------------------------------------


def cookie_values(request: web.Request, name: str) -> list[str]:
    """Every value of cookie ``name`` across all ``Cookie`` headers (raw, so duplicates are visible)."""
    found: list[str] = []
    for key, value in request.raw_headers:
        if key.lower() != b"cookie":
            continue
        for part in value.decode("latin-1").split(";"):
            k, sep, v = part.strip().partition("=")
            if sep and k == name:
                found.append(v.strip())
    return found


def single_cookie(request: web.Request, name: str) -> str | None:
    """The cookie's value when it appears exactly once; two copies (two session cookies
    in one Cookie header) count as none, so an attacker-planted duplicate never chooses the session."""
    values = cookie_values(request, name)
    return values[0] if len(values) == 1 else None


async def current_session(request: web.Request) -> AdminSession | None:
    """The valid admin session of this request, or None. Refreshes ``last_seen_at`` at most once a
    minute (a separate small write) so idle expiry keeps moving while someone works."""
    token = single_cookie(request, SESSION_COOKIE)
    if token is None:
        return None
    settings = request.app[SETTINGS]
    at = now(request)
    db = request.app[DB]
    session = await db.read(lambda c: admin_sessions.resolve(c, token, at, settings))
    if session is not None:
        prove(request)  # an authenticated connection is never capped as "pending" (edge.py)
    if session is not None and session.needs_touch:
        await db.write(lambda c: admin_sessions.touch(c, session.id_hash, at))
    return session


def set_session_cookie(
    request: web.Request, response: web.StreamResponse, name: str, value: str, path: str = "/"
) -> None:
    """``HttpOnly; SameSite=Lax; Path=/`` (+ ``Secure`` when configured for HTTPS); no Max-Age, so the
    browser forgets it at exit while the server enforces idle and absolute expiry."""
    response.set_cookie(
        name, value, path=path, httponly=True, samesite="Lax", secure=request.app[SETTINGS].secure_cookies
    )


def clear_cookie(request: web.Request, response: web.StreamResponse, name: str, path: str = "/") -> None:
    """Expire a cookie in the browser (same attributes as when it was set)."""
    response.del_cookie(name, path=path, httponly=True, samesite="Lax", secure=request.app[SETTINGS].secure_cookies)


# -- same-origin checks ----------------------------------------------------------------------------


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


# -- bodies ---------------------------------------------------------------------------------------


@dataclass
class Body:
    """A decoded admin request body: ``kind`` is "form" or "json"; ``form`` keeps every value of each
    field (repeats are visible), ``json`` is the decoded object."""

    kind: str
    form: dict[str, list[str]] = field(default_factory=dict)
    json: dict[str, Any] = field(default_factory=dict)

    def one(self, name: str, default: str | None = None) -> str | None:
        """A single-valued form field; a repeated field is refused (400)."""
        values = self.form.get(name)
        if not values:
            return default
        if len(values) != 1:
            raise AdminHTTPError(400, Code.INVALID_REQUEST, f"字段 {name} 重复")
        return values[0]


async def _read_capped(request: web.Request) -> bytes:
    """At most BODY_CAP + 1 body bytes within BODY_READ_TIMEOUT_S (edge rule), else 400."""
    try:
        async with asyncio.timeout(BODY_READ_TIMEOUT_S):
            raw = await read_chunk(request, BODY_CAP + 1)
            while len(raw) <= BODY_CAP and not request.content.at_eof():
                chunk = await read_chunk(request, BODY_CAP + 1 - len(raw))
                if not chunk:
                    break
                raw += chunk
    except TimeoutError:
        raise AdminHTTPError(400, Code.INVALID_REQUEST, "请求体发送过慢，已放弃") from None
    except web.HTTPException:
        raise AdminHTTPError(400, Code.INVALID_REQUEST, "请求格式错误") from None
    return raw


async def read_body(request: web.Request) -> Body:
    """Read a form or JSON body of at most :data:`BODY_CAP` bytes within the edge's body time limit.
    415 for other types, 413 over the cap, 400 for a too slow body, bad UTF-8, duplicate JSON keys,
    floats/NaN or trailing data. (A Content-Encoding other than identity was refused earlier, 415.)"""
    ctype = request.headers.get("Content-Type", "").strip()
    is_form = _FORM_TYPE.fullmatch(ctype) is not None
    is_json = _JSON_TYPE.fullmatch(ctype) is not None
    if not (is_form or is_json):
        if request.content_length in (None, 0) and not request.body_exists:
            return Body("form")
        raise AdminHTTPError(415, Code.UNSUPPORTED_MEDIA_TYPE, "只接受表单或 JSON 请求")
    if request.content_length is not None and request.content_length > BODY_CAP:
        raise AdminHTTPError(413, Code.REQUEST_TOO_LARGE, "请求过大")
    raw = await _read_capped(request)
    if len(raw) > BODY_CAP:
        raise AdminHTTPError(413, Code.REQUEST_TOO_LARGE, "请求过大")
    try:
        if is_json:
            value = loads_strict(raw)
            if not isinstance(value, dict):
                raise ValueError("not an object")
            return Body("json", json=value)
        text = raw.decode("ascii")
        form: dict[str, list[str]] = {}
        for key, value in parse_qsl(
            text, keep_blank_values=True, encoding="utf-8", errors="strict", max_num_fields=2000
        ):
            form.setdefault(key, []).append(value)
        return Body("form", form=form)
    except (UnicodeError, ValueError, RecursionError):
        raise AdminHTTPError(400, Code.INVALID_REQUEST, "请求格式错误") from None


# -- handler wrappers -------------------------------------------------------------------------------

PageHandler = Callable[[web.Request, AdminSession], Awaitable[web.StreamResponse]]
ActionHandler = Callable[[web.Request, AdminSession, Body], Awaitable[web.StreamResponse]]


def unauthenticated(request: web.Request) -> web.StreamResponse:
    """401 for API/fragment callers; a browser navigation is sent to the login page instead."""
    accept = request.headers.get("Accept", "")
    if request.method == "GET" and "text/html" in accept and not request.headers.get(VIEW_HEADER):
        raise web.HTTPSeeOther("/login")
    return refuse(request, AdminHTTPError(401, Code.UNAUTHENTICATED, "请先登录"))


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
    except AdminHTTPError as exc:
        return refuse(request, exc, session)
    except DomainError as exc:
        return refuse(request, domain_refusal(exc), session)
    except Unavailable:
        return refuse(request, STORAGE_REFUSAL, session)


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
            raise AdminHTTPError(403, Code.CROSS_SITE_REQUEST, "拒绝跨站请求")
        body = await read_body(request)
        supplied = request.headers.getall("X-CSRF-Token", [])
        form_tokens = body.form.get("csrf_token", []) if body.kind == "form" else []
        candidates = supplied + form_tokens
        if len(candidates) != 1 or not csrf.check_session_token(request.app[SETTINGS], session.token, candidates[0]):
            raise AdminHTTPError(403, Code.CSRF_FAILED, "表单已过期或来源无效，请刷新页面后重试")
        return await handler(request, session, body)

    async def wrapper(request: web.Request) -> web.StreamResponse:
        return await _guarded(request, lambda session: checked(request, session))

    wrapper.__name__ = handler.__name__
    wrapper.__doc__ = handler.__doc__
    return wrapper


# -- template helpers -----------------------------------------------------------------------------


def beijing_time(value: str | None) -> str:
    """Canonical UTC text → ``YYYY-MM-DD HH:MM:SS`` in Beijing time (UTC+8, no DST); "" for None."""
    if not value:
        return ""
    try:
        when = datetime.strptime(value[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return value
    return when.astimezone(BEIJING).strftime("%Y-%m-%d %H:%M:%S")


def audit_value(value: object) -> str:
    """One audit-detail value for people: canonical UTC times in Beijing time, None as "-"."""
    if value is None:
        return "-"
    if isinstance(value, str) and _UTC_TEXT.fullmatch(value):
        return beijing_time(value)
    return str(value)
