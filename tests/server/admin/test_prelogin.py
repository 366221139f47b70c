"""The pre-login cookie ``cmbuyer_login``: only server-issued values bind the login
form's CSRF token — a client-chosen, tampered, expired or pre-restart value is replaced on GET and
refused on POST — and a successful login spends its value and sets a fresh one (like the session id).
Real app and SQLite file; cookies are sent by hand so the test controls exactly what the browser says."""

from __future__ import annotations

from http.cookies import SimpleCookie
from typing import Any

from cmbuyer.server.app import create_app
from cmbuyer.server.services import admin_sessions
from cmbuyer.server.web.admin.prelogin import TTL_S

from .conftest import ADMIN_PASSWORD, ADMIN_USER, csrf_from


def issued_cookie(resp: Any) -> str | None:
    """The ``cmbuyer_login`` value a response sets, or None."""
    jar: SimpleCookie = SimpleCookie()
    for header in resp.headers.getall("Set-Cookie", []):
        jar.load(header)
    return jar["cmbuyer_login"].value if "cmbuyer_login" in jar else None


async def form_with(client: Any, cookie: str | None) -> tuple[str, str]:
    """GET /login presenting ``cookie`` (or none); returns (the cookie the server set, form token)."""
    client.session.cookie_jar.clear()
    headers = {"Cookie": f"cmbuyer_login={cookie}"} if cookie is not None else {}
    page = await client.get("/login", headers=headers)
    assert page.status == 200
    value = issued_cookie(page)
    assert value is not None
    return value, csrf_from(await page.text())


async def post_with(client: Any, cookie: str, token: str, password: str = ADMIN_PASSWORD) -> Any:
    """POST /login with exactly this pre-login cookie and token."""
    client.session.cookie_jar.clear()
    return await client.post(
        "/login",
        data={"username": ADMIN_USER, "password": password, "csrf_token": token},
        headers={"Cookie": f"cmbuyer_login={cookie}"},
        allow_redirects=False,
    )


async def test_client_chosen_value_is_replaced_and_refused(server_client: Any, admin: str, sync_conn: Any) -> None:
    """An attacker picks a well-formed value, loads the form with it to learn its token, and plants the
    pair in a victim's browser: the server never adopts the value, so the pair is useless."""
    chosen = admin_sessions.new_token()
    issued, token = await form_with(server_client, chosen)
    assert issued != chosen
    resp = await post_with(server_client, chosen, token)
    assert resp.status == 403
    assert "登录表单已过期" in await resp.text()
    assert sync_conn.execute("SELECT count(*) FROM admin_sessions").fetchone()[0] == 0
    assert (await post_with(server_client, issued, token)).status == 303  # the issued value works


async def test_tampered_and_foreign_shapes_are_replaced(server_client: Any, admin: str) -> None:
    good, token = await form_with(server_client, None)
    flipped = good[:10] + ("A" if good[10] != "A" else "B") + good[11:]
    for bad in (flipped, good + "A", good[:-1], "x" * len(good), "", "a;b", "%00" * 16):
        issued, _ = await form_with(server_client, bad)
        assert issued != bad
        assert (await post_with(server_client, bad, token)).status == 403
    issued, _ = await form_with(server_client, good)
    assert issued == good  # an intact value of ours is kept (the form can be reloaded)


async def test_login_spends_the_value_and_sets_a_fresh_one(server_client: Any, admin: str) -> None:
    before, token = await form_with(server_client, None)
    resp = await post_with(server_client, before, token)
    assert resp.status == 303
    after = issued_cookie(resp)
    assert after is not None and after != before
    # replaying the pre-login pair seen before the login: refused, and GET replaces the value
    assert (await post_with(server_client, before, token)).status == 403
    assert (await form_with(server_client, before))[0] != before
    # the rotated value is a valid one for the next login
    again, token2 = await form_with(server_client, after)
    assert again == after
    assert (await post_with(server_client, after, token2)).status == 303


async def test_failed_login_keeps_the_value(server_client: Any, admin: str) -> None:
    value, token = await form_with(server_client, None)
    resp = await post_with(server_client, value, token, password="wrong password!")
    assert resp.status == 401
    assert issued_cookie(resp) == value
    assert (await post_with(server_client, value, token)).status == 303


async def test_expired_value_is_replaced_and_refused(server_client: Any, admin: str, clock: Any) -> None:
    value, token = await form_with(server_client, None)
    clock.advance(TTL_S - 1)
    assert (await form_with(server_client, value))[0] == value
    clock.advance(1)
    assert (await post_with(server_client, value, token)).status == 403
    assert (await form_with(server_client, value))[0] != value


async def test_value_from_another_server_process_is_refused(
    aiohttp_client: Any, settings: Any, clock: Any, server_client: Any, admin: str
) -> None:
    """A restart (or a second process) has a new key: values issued before are not ours."""
    value, token = await form_with(server_client, None)
    restarted = await aiohttp_client(create_app(settings, clock))
    assert (await post_with(restarted, value, token)).status == 403
    assert (await form_with(restarted, value))[0] != value
