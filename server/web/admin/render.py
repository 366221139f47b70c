"""The admin web's answers: a page (Jinja2, autoescaped), a JSON answer, a redirect, and a refusal as a JSON
error body or an HTML error page (docs/admin.md "Error codes of the admin routes").

A refusal is a :class:`~cmbuyer.server.domain.errors.DomainError` built the one way,
:func:`~cmbuyer.server.domain.errors.refusal` (status from the catalogue); what a person reads is
:func:`~cmbuyer.server.display.labels.refusal_message`. A storage failure (``Unavailable``) is answered as
``storage_unavailable``."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jinja2
from aiohttp import web

from cmbuyer.server.display.labels import refusal_message
from cmbuyer.server.domain.codes import RETRYABLE, Code
from cmbuyer.server.domain.errors import CmbuyerError, DomainError
from cmbuyer.server.services.admin_sessions import AdminSession
from cmbuyer.server.web.admin import csrf
from cmbuyer.server.web.admin.body import JSON_TYPE
from cmbuyer.server.web.keys import CLOCK, SETTINGS

VIEW_HEADER = "X-CMBuyer-View"
JINJA = web.AppKey("cmbuyer_admin_jinja", jinja2.Environment)
REQUEST_ID = web.RequestKey("cmbuyer_request_id", str)
STORAGE_MESSAGE = "数据库暂时不可用，请稍后再试"


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


def wants_json(request: web.Request) -> bool:
    """True for API-style callers: a JSON body, or an Accept header that asks for JSON and not HTML."""
    if JSON_TYPE.fullmatch(request.headers.get("Content-Type", "").strip()):
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
            "csrf_token": "" if session is None else csrf.session_token(request.app[SETTINGS], session.token),
        },
        status=status,
        headers={"X-Request-ID": rid},
    )


@dataclass(frozen=True)
class Refused:
    """What the caller is told about a refusal: its status and code (the catalogue's), the message a person
    reads, and whether trying again later may succeed (:data:`~cmbuyer.server.domain.codes.RETRYABLE`)."""

    status: int
    code: str
    message: str
    retryable: bool


def domain_refusal(exc: CmbuyerError) -> Refused:
    """How the admin web answers ``exc``: a :class:`DomainError` with its status and code, worded by
    :func:`refusal_message`; anything else the server raises on purpose here is a storage failure
    (``Unavailable``: 503 ``storage_unavailable``, retryable)."""
    if isinstance(exc, DomainError):
        return Refused(exc.status, exc.code, refusal_message(exc), exc.code in RETRYABLE)
    return Refused(503, Code.STORAGE_UNAVAILABLE, STORAGE_MESSAGE, True)


def refuse(request: web.Request, exc: CmbuyerError, session: AdminSession | None = None) -> web.Response:
    """Answer the refusal ``exc`` (see :func:`domain_refusal`) as JSON or as an HTML page, depending on the
    caller."""
    shown = domain_refusal(exc)
    if wants_json(request) or request.headers.get(VIEW_HEADER):
        return error_json(request, shown.status, shown.code, shown.message, shown.retryable)
    return error_page(request, shown.status, shown.code, shown.message, session)


def redirect(location: str) -> web.Response:
    """A 303 See Other to a local path (POST/redirect/GET after every successful form action)."""
    return web.Response(status=303, headers={"Location": location, "Cache-Control": "no-store"})
