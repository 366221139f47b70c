"""Login, logout and sessions (docs/admin.md "Identity and sessions"). Throttling:
test_login_throttle.py; the pre-login cookie: test_prelogin.py."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
from http.cookies import SimpleCookie
from typing import Any

import pytest

from cmbuyer.server.app import create_app
from cmbuyer.server.services import admin_sessions

from .conftest import ADMIN_PASSWORD, ADMIN_USER, FOREIGN_ORIGINS, PRODUCTION_HASH_FN, add_admin, csrf_from, login


def set_cookies(resp: Any) -> dict[str, Any]:
    """Parsed Set-Cookie headers of a response, by name."""
    jar: SimpleCookie = SimpleCookie()
    for header in resp.headers.getall("Set-Cookie", []):
        jar.load(header)
    return {name: jar[name] for name in jar}


async def get_as(client: Any, token: str, path: str = "/tasks") -> Any:
    """GET ``path`` presenting exactly ``cmbuyer_session=<token>`` (the cookie jar is emptied first)."""
    client.session.cookie_jar.clear()
    return await client.get(path, headers={"Cookie": f"cmbuyer_session={token}", "Accept": "application/json"})


def session_token(client: Any) -> str:
    """The session cookie value the client currently holds."""
    return next(c.value for c in client.session.cookie_jar if c.key == "cmbuyer_session")


def raw_set_cookie(resp: Any, name: str) -> str:
    """The raw Set-Cookie header that sets ``name``."""
    return next(h for h in resp.headers.getall("Set-Cookie", []) if h.startswith(name + "="))


async def test_login_page_renders_form_with_csrf(server_client: Any, admin: str) -> None:
    resp = await server_client.get("/login")
    assert resp.status == 200
    html = await resp.text()
    assert "管理员登录" in html and 'name="username"' in html and 'name="password"' in html
    csrf_from(html)
    pre = raw_set_cookie(resp, "cmbuyer_login")
    assert "HttpOnly" in pre and "SameSite=Lax" in pre and "Path=/login" in pre


async def test_login_success_sets_session_cookie_flags(server_client: Any, admin: str, sync_conn: Any) -> None:
    resp = await login(server_client)
    assert resp.status == 303 and resp.headers["Location"] == "/tasks"
    header = raw_set_cookie(resp, "cmbuyer_session")
    assert "HttpOnly" in header and "SameSite=Lax" in header and "Path=/" in header
    assert "Secure" not in header  # not configured for HTTPS
    token = set_cookies(resp)["cmbuyer_session"].value
    raw = base64.urlsafe_b64decode(token + "=")
    assert len(raw) == 32  # 256-bit random id
    stored = [bytes(r[0]) for r in sync_conn.execute("SELECT id_hash FROM admin_sessions")]
    assert stored == [hashlib.sha256(raw).digest()]  # only the hash is stored
    assert token.encode() not in b"".join(stored)
    page = await server_client.get("/tasks")
    assert page.status == 200 and ADMIN_USER in await page.text()


async def test_secure_flag_when_configured(aiohttp_client: Any, settings: Any, clock: Any, admin: str) -> None:
    client = await aiohttp_client(create_app(dataclasses.replace(settings, cookie_secure=True), clock))
    page = await client.get("/login")
    assert "Secure" in raw_set_cookie(page, "cmbuyer_login")
    pre = set_cookies(page)["cmbuyer_login"].value
    # the test client talks plain HTTP, so it would not send a Secure cookie back: send it by hand
    resp = await client.post(
        "/login",
        data={"username": ADMIN_USER, "password": ADMIN_PASSWORD, "csrf_token": csrf_from(await page.text())},
        headers={"Cookie": f"cmbuyer_login={pre}"},
        allow_redirects=False,
    )
    assert resp.status == 303
    assert "Secure" in raw_set_cookie(resp, "cmbuyer_session")


async def test_wrong_password_and_unknown_user_are_401_and_audited(
    server_client: Any, admin: str, sync_conn: Any
) -> None:
    resp = await login(server_client, password="wrong password!")
    assert resp.status == 401
    assert "用户名或密码错误" in await resp.text()
    assert "cmbuyer_session" not in set_cookies(resp)
    resp = await login(server_client, username="nobody")
    assert resp.status == 401
    actions = [r[0] for r in sync_conn.execute("SELECT action FROM audit_log ORDER BY id")]
    assert actions.count("admin.login_failed") == 2
    details = " ".join(r[0] for r in sync_conn.execute("SELECT detail_json FROM audit_log"))
    assert "wrong password" not in details


async def test_login_with_a_production_cost_hash(server_client: Any, sync_conn: Any, clock: Any) -> None:
    add_admin(sync_conn, clock, username="prod", password_hash=PRODUCTION_HASH_FN("another long password"))
    assert (await login(server_client, "prod", "another long password")).status == 303


async def test_login_json_variant(server_client: Any, admin: str) -> None:
    page = await server_client.get("/login")
    token = csrf_from(await page.text())
    resp = await server_client.post(
        "/login", json={"username": ADMIN_USER, "password": ADMIN_PASSWORD}, headers={"X-CSRF-Token": token}
    )
    assert resp.status == 200 and await resp.json() == {"ok": True}
    server_client.session.cookie_jar.clear()  # login dropped the pre-login cookie: start over
    token = csrf_from(await (await server_client.get("/login")).text())
    resp = await server_client.post(
        "/login", json={"username": ADMIN_USER, "password": "nope-nope-nope"}, headers={"X-CSRF-Token": token}
    )
    assert resp.status == 401
    assert (await resp.json())["error"]["code"] == "login_failed"


@pytest.mark.parametrize(
    "case", ["missing", "wrong", "no_cookie", "query", "origin_null", "cross_origin", "cross_site_fetch"]
)
async def test_login_csrf_and_origin(server_client: Any, admin: str, sync_conn: Any, case: str) -> None:
    page = await server_client.get("/login")
    token = csrf_from(await page.text())
    data = {"username": ADMIN_USER, "password": ADMIN_PASSWORD, "csrf_token": token}
    headers: dict[str, str] = {}
    path = "/login"
    if case == "missing":
        del data["csrf_token"]
    elif case == "wrong":
        data["csrf_token"] = "0" * 64
    elif case == "no_cookie":
        server_client.session.cookie_jar.clear()
    elif case == "query":
        del data["csrf_token"]
        path = f"/login?csrf_token={token}"
    headers.update(FOREIGN_ORIGINS.get(case, {}))
    resp = await server_client.post(path, data=data, headers=headers, allow_redirects=False)
    assert resp.status == 403
    assert "cmbuyer_session" not in set_cookies(resp)
    assert sync_conn.execute("SELECT count(*) FROM admin_sessions").fetchone()[0] == 0


async def test_new_session_id_on_login_and_presented_id_revoked(server_client: Any, admin: str) -> None:
    """Fixation: an id known before login (even a valid one) is never the id after login."""
    first = set_cookies(await login(server_client))["cmbuyer_session"].value
    second_resp = await login(server_client)  # browser still presents `first`
    second = set_cookies(second_resp)["cmbuyer_session"].value
    assert second != first
    assert (await get_as(server_client, first)).status == 401  # the id presented at login was revoked
    assert (await get_as(server_client, second)).status == 200


async def test_planted_session_id_is_not_adopted(server_client: Any, admin: str) -> None:
    planted = admin_sessions.new_token()
    server_client.session.cookie_jar.update_cookies({"cmbuyer_session": planted})
    resp = await login(server_client)
    issued = set_cookies(resp)["cmbuyer_session"].value
    assert issued != planted
    assert (await get_as(server_client, planted)).status == 401
    assert (await get_as(server_client, issued)).status == 200


async def test_prelogin_cookie_is_not_a_session(server_client: Any, admin: str) -> None:
    page = await server_client.get("/login")
    pre = set_cookies(page)["cmbuyer_login"].value
    assert (await get_as(server_client, pre)).status == 401
    resp = await login(server_client)
    assert set_cookies(resp)["cmbuyer_login"].value != pre  # rotated at login (test_prelogin.py)
    assert (await get_as(server_client, pre)).status == 401


async def test_logout_invalidates_server_side(admin_client: Any, sync_conn: Any) -> None:
    client = admin_client.client
    token = session_token(client)
    resp = await admin_client.post_form("/logout", {})
    assert resp.status == 303 and resp.headers["Location"].startswith("/login")
    assert (
        "Max-Age=0" in raw_set_cookie(resp, "cmbuyer_session")
        or "expires" in raw_set_cookie(resp, "cmbuyer_session").lower()
    )
    assert (await get_as(client, token)).status == 401  # replaying the old cookie
    assert sync_conn.execute("SELECT count(*) FROM admin_sessions WHERE revoked_at IS NOT NULL").fetchone()[0] == 1


async def test_idle_expiry(admin_client: Any, clock: Any, settings: Any) -> None:
    client = admin_client.client
    clock.advance(settings.session_idle_ttl - 1)
    assert (await client.get("/tasks")).status == 200  # activity moves the idle deadline
    clock.advance(settings.session_idle_ttl - 1)
    assert (await client.get("/tasks")).status == 200
    clock.advance(settings.session_idle_ttl)  # exactly at the idle deadline: expired
    resp = await client.get("/tasks", headers={"Accept": "application/json"})
    assert resp.status == 401


async def test_absolute_expiry(admin_client: Any, clock: Any, settings: Any) -> None:
    client = admin_client.client
    step = settings.session_idle_ttl // 2
    elapsed = 0
    while elapsed + step < settings.session_absolute_ttl:
        clock.advance(step)
        elapsed += step
        assert (await client.get("/tasks")).status == 200
    clock.advance(settings.session_absolute_ttl - elapsed)
    assert (await client.get("/tasks", headers={"Accept": "application/json"})).status == 401


async def test_two_session_cookies_in_one_header_are_refused(admin_client: Any) -> None:
    client = admin_client.client
    token = session_token(client)
    assert (await get_as(client, token)).status == 200
    client.session.cookie_jar.clear()
    resp = await client.get(
        "/tasks", headers={"Cookie": f"cmbuyer_session={token}; cmbuyer_session={token}", "Accept": "application/json"}
    )
    assert resp.status == 401


async def test_unauthenticated_navigation_redirects_and_api_gets_401(server_client: Any) -> None:
    resp = await server_client.get("/tasks", headers={"Accept": "text/html"}, allow_redirects=False)
    assert resp.status == 303 and resp.headers["Location"] == "/login"
    resp = await server_client.get("/tasks", headers={"Accept": "application/json"})
    assert resp.status == 401
    body = await resp.json()
    assert body["error"]["code"] == "unauthenticated" and body["error"]["retryable"] is False
    for path in ("/devices", "/tasks/00000000-0000-4000-8000-000000000000"):
        assert (await server_client.get(path, headers={"Accept": "application/json"})).status == 401


async def test_device_bearer_never_works_on_admin_routes(server_client: Any, make_device: Any, make_task: Any) -> None:
    device = make_device()
    task = make_task()
    headers = {**device.headers(), "Accept": "application/json"}
    assert (await server_client.get("/tasks", headers=headers)).status == 401
    assert (await server_client.get(f"/tasks/{task.id}", headers=headers)).status == 401
    resp = await server_client.post(
        "/tasks/start-purchases",
        headers=headers,
        json={
            "start_key": "63c9f507-7473-4fa6-8d71-8786c34c6301",
            "tasks": [{"task_id": task.id, "expected_task_version": 1}],
        },
    )
    assert resp.status == 401


async def test_admin_cookie_never_works_on_device_routes(admin_client: Any) -> None:
    client = admin_client.client
    for path in ("/api/v1/tasks/claim-next", "/api/v1/devices/heartbeat"):
        resp = await client.post(path, json={}, headers={"X-CSRF-Token": admin_client.csrf})
        assert resp.status == 401
