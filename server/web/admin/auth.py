"""``GET/POST /login`` and ``POST /logout`` (docs/admin.md "Routes", "Identity and sessions").

Login form fields: ``username``, ``password``, ``csrf_token``. The CSRF token before login is bound
to the pre-login cookie (``cmbuyer_login``, path ``/login``), whose values only this server issues
(prelogin.py: a value the client chose is replaced on ``GET`` and refused on ``POST``). A successful
login always issues a brand-new session id (``cmbuyer_session``), revokes any session id the browser
presented, spends the pre-login value it used and sets a fresh one, so no id known before login is
ever valid after it.

Order of checks on ``POST /login``: origin and CSRF, then the throttle gate (one write transaction that
decides and counts the guess — services/admin_sessions.admit_guess), and only then argon2.
"""

from __future__ import annotations

import asyncio
import logging
import re

from aiohttp import web

from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import DomainError, Unavailable, refusal
from cmbuyer.server.services import admin_sessions
from cmbuyer.server.services.admin_sessions import AdminSession
from cmbuyer.server.services.admins import verify_password
from cmbuyer.server.store import admins as admin_store
from cmbuyer.server.web.admin import csrf
from cmbuyer.server.web.admin.body import Body, read_body
from cmbuyer.server.web.admin.guards import action, same_origin
from cmbuyer.server.web.admin.prelogin import PRELOGIN, PreloginBook
from cmbuyer.server.web.admin.render import error_json, json_answer, now, redirect, refuse, render, wants_json
from cmbuyer.server.web.admin.session import (
    LOGIN_COOKIE,
    SESSION_COOKIE,
    clear_cookie,
    set_session_cookie,
    single_cookie,
)
from cmbuyer.server.web.client_address import client_address
from cmbuyer.server.web.keys import DB, SETTINGS

# failed and successful logins and lockouts (docs/operations.md "Logs"); never a password or a cookie
auth_log = logging.getLogger("cmbuyer.auth")

LOGIN_PATH = "/login"
_NEXT = re.compile(r"/(?:tasks|devices)(?:/[0-9a-f-]{36})?", re.ASCII)
NOTICES = {"logged_out": "已退出登录。", "expired": "登录已过期，请重新登录。"}


def _safe_next(value: str | None) -> str:
    """Only our own task/device pages are valid redirect targets after login (no open redirect)."""
    return value if value and _NEXT.fullmatch(value) else "/tasks"


def _login_page(
    request: web.Request,
    prelogin: str,
    *,
    status: int = 200,
    error: str = "",
    username: str = "",
    next_path: str = "/tasks",
) -> web.Response:
    token = csrf.login_token(request.app[SETTINGS], prelogin)
    notice = NOTICES.get(request.query.get("notice", ""), "")
    response = render(
        request,
        "login.html",
        {
            "csrf_token": token,
            "error": error,
            "username": username,
            "notice": notice,
            "next": next_path,
            "session": None,
        },
        status=status,
    )
    set_session_cookie(request, response, LOGIN_COOKIE, prelogin, path=LOGIN_PATH)
    return response


def _own_prelogin(request: web.Request) -> str | None:
    """The request's pre-login cookie when this process issued it and it is still usable, else None."""
    value = single_cookie(request, LOGIN_COOKIE)
    return value if request.app[PRELOGIN].valid(value, now(request)) else None


async def login_form(request: web.Request) -> web.StreamResponse:
    """``GET /login``: the form. It is shown even to a logged-in browser (logging in again simply
    replaces that session with a new one). A pre-login cookie this server did not issue (or that
    expired or was spent) is replaced by a fresh one."""
    prelogin = _own_prelogin(request) or request.app[PRELOGIN].issue(now(request))
    return _login_page(request, prelogin, next_path=_safe_next(request.query.get("next")))


async def login_submit(request: web.Request) -> web.StreamResponse:
    """``POST /login``: same-origin and CSRF first, then the throttle gate, then the password (argon2,
    off the event loop). 403 bad origin/token · 429 throttled (``Retry-After``) · 401 wrong
    credentials · 303 on success."""
    settings = request.app[SETTINGS]
    db = request.app[DB]
    prelogin: str | None = None
    retry_after = 0
    response: web.StreamResponse
    try:
        if not same_origin(request):
            raise refusal(Code.CROSS_SITE_REQUEST, "拒绝跨站请求")
        prelogin = _own_prelogin(request)
        body: Body = await read_body(request)
        if body.kind == "json":
            username, password = body.json.get("username"), body.json.get("password")
            supplied = request.headers.getall("X-CSRF-Token", [])
            next_path = "/tasks"
        else:
            username, password = body.one("username", ""), body.one("password", "")
            supplied = request.headers.getall("X-CSRF-Token", []) + body.form.get("csrf_token", [])
            next_path = _safe_next(body.one("next"))
        if prelogin is None or len(supplied) != 1 or not csrf.check_login_token(settings, prelogin, supplied[0]):
            raise refusal(Code.CSRF_FAILED, "登录表单已过期，请刷新页面后重试")
        if (
            not isinstance(username, str)
            or not isinstance(password, str)
            or not 1 <= len(username) <= 64
            or len(password) > 1024
        ):
            username, password = str(username or "")[:64], ""
        at = now(request)
        keys = admin_sessions.throttle_keys(username, client_address(request))
        # The gate is decided and the guess counted before any password is hashed.
        admission = await db.write(lambda c: admin_sessions.admit_guess(c, keys, username, at))
        if not admission.admitted:
            retry_after = admission.retry_after_s
            auth_log.warning("登录限流：来自 %s，%d 秒后再试", request.remote, retry_after)
            raise refusal(Code.LOGIN_THROTTLED, throttled_message(retry_after))
        admin = await db.read(lambda c: admin_store.by_username(c, username)) if username else None
        stored = admin.password_hash if admin is not None and not admin.disabled else None
        ok = await asyncio.get_running_loop().run_in_executor(None, verify_password, stored, password)
        if not ok or admin is None:
            # an unknown name is not echoed: it may be a password typed into the wrong field
            auth_log.warning("登录失败：%s，来自 %s", f"用户 {username!r}" if admin else "未知的用户名", request.remote)
            await db.write(lambda c: admin_sessions.record_failure(c, username, at))
            if body.kind == "json" or wants_json(request):
                return error_json(request, 401, Code.LOGIN_FAILED, "用户名或密码错误")
            return _login_page(
                request, prelogin, status=401, error="用户名或密码错误", username=username, next_path=next_path
            )
        previous = single_cookie(request, SESSION_COOKIE)
        previous_hash = admin_sessions.token_hash(previous) if previous else None
        admin_id = admin.id
        token = await db.write(lambda c: admin_sessions.login(c, admin_id, keys, previous_hash, at, settings))
        auth_log.info("登录：用户 %r，来自 %s", username, request.remote)
    except DomainError as exc:
        if exc.status == 429 and not wants_json(request) and prelogin is not None:
            response = _login_page(request, prelogin, status=429, error=exc.message)
        else:
            response = refuse(request, exc)
        if retry_after:
            response.headers["Retry-After"] = str(retry_after)
        return response
    except Unavailable as exc:
        return refuse(request, exc)
    if body.kind == "json":
        response = json_answer({"ok": True})
    else:
        response = redirect(next_path)
    set_session_cookie(request, response, SESSION_COOKIE, token)
    book: PreloginBook = request.app[PRELOGIN]
    assert prelogin is not None  # checked with the CSRF token above
    book.spend(prelogin, at)
    set_session_cookie(request, response, LOGIN_COOKIE, book.issue(at), path=LOGIN_PATH)
    return response


def throttled_message(retry_after_s: int) -> str:
    """The Chinese refusal shown for a throttled login (429)."""
    return f"登录尝试过于频繁，请 {retry_after_s} 秒后再试"


@action
async def logout(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /logout``: revoke the session server-side, expire the cookie, back to the login page."""
    at = now(request)
    await request.app[DB].write(lambda c: admin_sessions.logout(c, session, at))
    response: web.StreamResponse
    if body.kind == "json" or wants_json(request):
        response = json_answer({"ok": True})
    else:
        response = redirect("/login?notice=logged_out")
    clear_cookie(request, response, SESSION_COOKIE)
    return response


def setup(app: web.Application) -> None:
    """Register the login/logout routes."""
    app[PRELOGIN] = PreloginBook()
    app.router.add_get("/login", login_form, name="admin-login")
    app.router.add_post("/login", login_submit, name="admin-login-submit")
    app.router.add_post("/logout", logout, name="admin-logout")
