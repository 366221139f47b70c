"""Fixtures of the admin web tests: an administrator, a logged-in aiohttp test client, HTML helpers,
and a seeding helper for device-side rows (see seed.py). Builds on tests/server/conftest.py (real
data dir from `cmbuyer-server init`, real SQLite file, ManualClock)."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from argon2 import PasswordHasher

from cmbuyer.server.clock import ManualClock, to_wire
from cmbuyer.server.db import run_in_transaction
from cmbuyer.server.services.admins import hash_password
from cmbuyer.server.store import admins as admin_store
from cmbuyer.server.tx.common import new_id
from tests.server.conftest import DeviceMaker, Maker

from .seed import Seeder

ADMIN_USER = "ops"
ADMIN_PASSWORD = "correct horse battery"  # test-only credential of a throwaway database
# argon2 is deliberately slow. Tests store a hash made with minimal cost parameters (verification
# reads the parameters from the hash itself, so the production verify path still runs); the
# production parameters are exercised by tests/server/test_cli.py and by one test here.
_HASH = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1).hash(ADMIN_PASSWORD)
PRODUCTION_HASH_FN = hash_password
# Headers of a request from another site, which every unsafe admin route (login included) refuses with 403
# before reading anything else: case name → headers.
FOREIGN_ORIGINS: dict[str, dict[str, str]] = {
    "origin_null": {"Origin": "null"},
    "cross_origin": {"Origin": "https://evil.example"},
    "cross_site_fetch": {"Sec-Fetch-Site": "cross-site"},
    "same_site_fetch": {"Sec-Fetch-Site": "same-site"},
}
_CSRF = re.compile(r'name="csrf_token" value="([0-9a-f]{64})"')


def csrf_from(html: str) -> str:
    """The CSRF token embedded in a rendered page."""
    m = _CSRF.search(html)
    assert m, "page has no csrf_token field"
    return m.group(1)


def add_admin(
    conn: sqlite3.Connection, clock: ManualClock, username: str = ADMIN_USER, password_hash: str = _HASH
) -> str:
    """Insert an administrator directly (the hashing path is covered by tests/server/test_cli.py)."""
    admin_id = new_id()
    run_in_transaction(conn, lambda c: admin_store.insert(c, admin_id, username, password_hash, to_wire(clock.now())))
    return admin_id


@pytest.fixture
def admin(sync_conn: sqlite3.Connection, clock: ManualClock) -> str:
    """The id of the test administrator ``ops``."""
    return add_admin(sync_conn, clock)


async def login(client: Any, username: str = ADMIN_USER, password: str = ADMIN_PASSWORD) -> Any:
    """Log in through the real form (GET /login for the token, POST /login); returns the POST response."""
    page = await client.get("/login")
    token = csrf_from(await page.text())
    return await client.post(
        "/login", data={"username": username, "password": password, "csrf_token": token}, allow_redirects=False
    )


@dataclass
class AdminClient:
    """A logged-in test client plus this session's CSRF token."""

    client: Any
    csrf: str

    async def post_form(self, path: str, data: dict[str, Any] | list[tuple[str, str]], **kw: Any) -> Any:
        """POST a form with the session's csrf_token added, not following redirects."""
        items = list(data.items()) if isinstance(data, dict) else list(data)
        items.append(("csrf_token", self.csrf))
        return await self.client.post(path, data=items, allow_redirects=False, **kw)

    async def post_json(self, path: str, body: Any, **kw: Any) -> Any:
        """POST JSON with the X-CSRF-Token header."""
        headers = {"X-CSRF-Token": self.csrf, **kw.pop("headers", {})}
        return await self.client.post(path, json=body, headers=headers, allow_redirects=False, **kw)


@pytest.fixture
async def admin_client(server_client: Any, admin: str) -> AdminClient:
    """The app's test client, logged in as ``ops``."""
    resp = await login(server_client)
    assert resp.status == 303, await resp.text()
    page = await server_client.get("/tasks")
    assert page.status == 200
    return AdminClient(server_client, csrf_from(await page.text()))


@pytest.fixture
def seed(sync_conn: sqlite3.Connection, clock: ManualClock, settings: Any) -> Seeder:
    """Direct-SQL seeding of device-side rows (attempts, submissions, events, evidence)."""
    return Seeder(sync_conn, clock, settings)


FencedTask = Callable[..., tuple[Any, str]]


@pytest.fixture
def fenced_task(make_task: Maker, make_device: DeviceMaker, seed: Seeder) -> FencedTask:
    """``fenced_task(observation=None)``: a started task claimed by a new device and fenced through
    :meth:`Seeder.fence` (with ``observation``, also reported); returns the task and the submission id."""

    def make(observation: str | None = None) -> tuple[Any, str]:
        task = make_task(start=True)
        device = make_device()
        attempt = seed.claim(task.id, device.device_id)
        return task, seed.fence(task.id, attempt, device.device_id, observation=observation)

    return make
