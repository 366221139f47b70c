"""The admin session of a request: the session cookie (read raw, so a planted duplicate is seen), the
session it names, the cookies' attributes, and the CSRF token a session's forms carry (docs/admin.md
"Identity and sessions"). Device ``Authorization: Bearer`` headers are never looked at here: admin identity
is the cookie only."""

from __future__ import annotations

from aiohttp import web

from cmbuyer.server.services import admin_sessions
from cmbuyer.server.services.admin_sessions import AdminSession
from cmbuyer.server.tx.common import Actor
from cmbuyer.server.web.admin import csrf
from cmbuyer.server.web.admin.render import now
from cmbuyer.server.web.edge import prove
from cmbuyer.server.web.keys import DB, SETTINGS

SESSION_COOKIE = "cmbuyer_session"
LOGIN_COOKIE = "cmbuyer_login"


def actor(session: AdminSession) -> Actor:
    """The audit actor of an admin session (:attr:`AdminSession.actor`)."""
    return session.actor


def csrf_token_for(request: web.Request, session: AdminSession) -> str:
    """The synchronizer token to embed in this session's forms (and the JS header)."""
    return csrf.session_token(request.app[SETTINGS], session.token)


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
