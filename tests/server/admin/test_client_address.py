"""Which address a login counts against: ``X-Forwarded-For`` from a peer that is not a trusted
proxy changes nothing — the throttle key, the lock-out audit row and the login audit row all name the TCP
peer — and from a trusted proxy (``CMBUYER_TRUSTED_PROXIES``) it names the client the proxy saw. Real aiohttp
server on a loopback socket (peer 127.0.0.1), real SQLite file."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from ipaddress import ip_network
from typing import Any

import aiohttp
import pytest

from cmbuyer.server.config import Settings
from cmbuyer.server.domain.login_throttle import ADDRESS_LIMIT

from .conftest import ADMIN_PASSWORD, ADMIN_USER
from .test_login_throttle import WRONG, fresh_form

SPOOFED = ("203.0.113.7", "198.51.100.1, 203.0.113.8", "not-an-address")


async def _login(session: aiohttp.ClientSession, url: str, username: str, password: str, forwarded: str) -> int:
    form = await fresh_form(session, url)
    async with session.post(
        url,
        data={"username": username, "password": password, "csrf_token": form.token},
        headers={"Cookie": f"cmbuyer_login={form.cookie}", "X-Forwarded-For": forwarded},
        allow_redirects=False,
    ) as resp:
        await resp.read()
        return resp.status


@pytest.fixture
async def web(server_client: Any) -> Any:
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as session:
        yield session, str(server_client.make_url("/login"))


def _throttle_keys(conn: sqlite3.Connection) -> list[str]:
    return sorted(r[0] for r in conn.execute("SELECT throttle_key FROM admin_login_throttle"))


def _audit(conn: sqlite3.Connection, action: str) -> list[tuple[str, dict[str, Any]]]:
    rows = conn.execute("SELECT subject_id, detail_json FROM audit_log WHERE action = ? ORDER BY id", (action,))
    return [(r[0], json.loads(r[1])) for r in rows]


async def test_forwarded_for_from_an_untrusted_peer_changes_nothing(
    web: Any, admin: str, sync_conn: sqlite3.Connection
) -> None:
    session, url = web
    # enough wrong guesses, each claiming another address, to lock the (real) address out
    statuses = [
        await _login(session, url, f"nobody{i}", WRONG, SPOOFED[i % len(SPOOFED)])
        for i in range(ADDRESS_LIMIT.free + 2)
    ]
    assert statuses[: ADDRESS_LIMIT.free] == [401] * ADDRESS_LIMIT.free and statuses[-1] == 429
    assert [k for k in _throttle_keys(sync_conn) if k.startswith("ip:")] == ["ip:127.0.0.1"]
    locked = _audit(sync_conn, "admin.login_locked")
    assert locked and {subject for subject, _ in locked} == {"127.0.0.1"}
    # the spoofed header did not open a fresh address budget: still refused from here
    assert await _login(session, url, ADMIN_USER, ADMIN_PASSWORD, "192.0.2.99") == 429


async def test_login_audit_names_the_peer_not_the_header(web: Any, admin: str, sync_conn: sqlite3.Connection) -> None:
    session, url = web
    assert await _login(session, url, ADMIN_USER, ADMIN_PASSWORD, "203.0.113.7") == 303
    assert [detail["address"] for _, detail in _audit(sync_conn, "admin.login")] == ["127.0.0.1"]


class TestBehindATrustedProxy:
    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        return dataclasses.replace(settings, trusted_proxies=(ip_network("127.0.0.0/8"),))

    async def test_the_proxy_named_client_is_counted(self, web: Any, admin: str, sync_conn: sqlite3.Connection) -> None:
        session, url = web
        assert await _login(session, url, "nobody", WRONG, "203.0.113.7") == 401
        assert await _login(session, url, ADMIN_USER, ADMIN_PASSWORD, "198.51.100.1, 127.0.0.5") == 303
        assert [k for k in _throttle_keys(sync_conn) if k.startswith("ip:")] == ["ip:198.51.100.1", "ip:203.0.113.7"]
        assert [detail["address"] for _, detail in _audit(sync_conn, "admin.login")] == ["198.51.100.1"]


async def _origin_login(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> int:
    form = await fresh_form(session, url)
    async with session.post(
        url,
        data={"username": ADMIN_USER, "password": ADMIN_PASSWORD, "csrf_token": form.token},
        headers={"Cookie": f"cmbuyer_login={form.cookie}", **headers},
        allow_redirects=False,
    ) as resp:
        await resp.read()
        return resp.status


async def test_forwarded_proto_from_an_untrusted_peer_is_ignored(web: Any, admin: str) -> None:
    """A browser's https Origin matches only when a trusted proxy says the scheme was https."""
    session, url = web
    host = url.split("/")[2]
    spoof = {"Origin": f"https://{host}", "X-Forwarded-Proto": "https"}
    assert await _origin_login(session, url, spoof) == 403


class TestSchemeBehindATrustedProxy:
    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        return dataclasses.replace(settings, trusted_proxies=(ip_network("127.0.0.1/32"),))

    async def test_the_proxy_said_https(self, web: Any, admin: str) -> None:
        session, url = web
        host = url.split("/")[2]
        assert await _origin_login(session, url, {"Origin": f"https://{host}", "X-Forwarded-Proto": "https"}) == 303
        assert await _origin_login(session, url, {"Origin": f"https://{host}"}) == 403  # no header: its own http
