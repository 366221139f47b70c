"""Shared server fixtures: a real data dir made by `cmbuyer-server init` in a temp dir, a real SQLite
file, the real aiohttp app with a ManualClock, and helpers that create devices and tasks through the
same service code the CLI uses."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.server.clock import ManualClock
from cmbuyer.server.config import Settings, load_settings
from cmbuyer.server.db import connect_sync, run_in_transaction
from cmbuyer.server.services import devices as device_service
from cmbuyer.server.services import tasks as task_service
from cmbuyer.server.tx.common import Actor, new_id
from tests.server.datadir import init_data_dir

TEST_ACTOR = Actor("cli", "pytest")
GOODS_URL = "https://mobile.yangkeduo.com/goods.html?goods_id={goods_id}"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A fresh data dir initialized by the real `cmbuyer-server init` (fresh secrets, migrated DB; the
    migrations ran once per test process, tests/server/datadir.py)."""
    return init_data_dir(tmp_path / "data")


@pytest.fixture
def clock() -> ManualClock:
    """A manual UTC clock starting at 2026-08-04T09:00:00Z."""
    return ManualClock()


@pytest.fixture
def supervised_orders() -> str:
    """``CMBUYER_SUPERVISED_ORDERS`` for the ``settings`` fixture: "0" (supervision off, as the suites written
    that do not test supervision expect); tests of supervised first orders override this fixture."""
    return "0"


@pytest.fixture
def settings(data_dir: Path, monkeypatch: pytest.MonkeyPatch, supervised_orders: str) -> Settings:
    """Settings loaded from the data dir's env file (real environment's CMBUYER_* removed;
    ``CMBUYER_SUPERVISED_ORDERS`` from the ``supervised_orders`` fixture)."""
    import os

    for key in list(os.environ):
        if key.startswith("CMBUYER_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("CMBUYER_SUPERVISED_ORDERS", supervised_orders)
    return load_settings(data_dir)


@pytest.fixture
def sync_conn(settings: Settings) -> Iterator[sqlite3.Connection]:
    """A second, independent connection to the same DB file (sees only what committed)."""
    conn = connect_sync(settings.db_path)
    yield conn
    conn.close()


# Types of the factory fixtures (make_task, make_device, ready_device, …) in test signatures.
Maker = Callable[..., Any]


@dataclass(frozen=True)
class DeviceCreds:
    """A device id and its token (test-only; tokens are generated fresh per test, never fixtures)."""

    device_id: str
    token: str

    def headers(self) -> dict[str, str]:
        """The two authentication headers (docs/api.md "Device authentication")."""
        return {"Authorization": f"Bearer {self.token}", "X-CMBuyer-Device-ID": self.device_id}


DeviceMaker = Callable[..., DeviceCreds]


@pytest.fixture
def make_device(sync_conn: sqlite3.Connection, clock: ManualClock) -> Callable[..., DeviceCreds]:
    """Create an ACTIVE device through the CLI's service; returns its credentials."""

    def make(name: str = "phone") -> DeviceCreds:
        issued = run_in_transaction(sync_conn, lambda c: device_service.add_device(c, name, TEST_ACTOR, clock.now()))
        return DeviceCreds(issued.device_id, issued.token)

    return make


def create_task(
    conn: sqlite3.Connection,
    settings: Settings,
    clock: ManualClock,
    *,
    actor: Actor = TEST_ACTOR,
    goods_id: str = "937122477375",
    color: str = "黑色CHA(纯棉)",
    size: str | None = "M(建议100-115)",
    options: list[list[str]] | None = None,
    quantity: int = 2,
    max_total_price: str = "30.00",
    title: str = "纯棉短袖",
    start: bool = False,
) -> Any:
    """Create a DRAFT task through the CLI's task service on ``conn`` (and with ``start=True`` start it:
    PENDING + ACTIVE authorization). ``options`` (``[[dimension, value], ...]``) replaces ``color``/``size``.
    Returns the task row as stored after the last step."""
    raw = {
        "create_key": new_id(),
        "title": title,
        "product_url": GOODS_URL.format(goods_id=goods_id),
        **({"sku_color": color, "sku_size": size} if options is None else {"sku_options": options}),
        "quantity": quantity,
        "max_total_price": max_total_price,
    }
    new = task_service.validate_new_task(raw, settings)
    task, _ = run_in_transaction(conn, lambda c: task_service.create_task(c, new, actor, clock.now()))
    if start:
        run_in_transaction(
            conn,
            lambda c: task_service.start_purchases(
                c, new_id(), [(task.id, task.version)], actor, clock.now(), settings
            ),
        )
        task = run_in_transaction(conn, lambda c: task_service.get_task(c, task.id))
    return task


@pytest.fixture
def make_task(sync_conn: sqlite3.Connection, clock: ManualClock, settings: Settings) -> Callable[..., Any]:
    """:func:`create_task` on the test's connection, clock and settings (a DRAFT task; ``start=True`` starts it)."""
    return functools.partial(create_task, sync_conn, settings, clock)


@pytest.fixture
async def server_client(aiohttp_client: Any, settings: Settings, clock: ManualClock) -> Any:
    """A pytest-aiohttp client against the real app (real SQLite file, ManualClock)."""
    from cmbuyer.server.app import create_app

    return await aiohttp_client(create_app(settings, clock))


@pytest.fixture
def live(data_dir: Path, settings: Settings) -> Iterator[Any]:
    """A real ``cmbuyer-server serve`` process on this data dir, started before and stopped after the test
    (tests.server.submissions.live.LiveServer; ``settings`` first clears the environment it inherits)."""
    from tests.server.submissions.live import LiveServer

    server = LiveServer(data_dir)
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def claimed(server_client: Any, make_device: Callable[..., Any], make_task: Callable[..., Any]) -> Any:
    """A started task claimed over the real HTTP API by a fresh device (tests.server.submissions.helpers.Claim)."""
    from tests.server.submissions.helpers import claim_http

    make_task(start=True)
    return await claim_http(server_client, make_device())


@pytest.fixture
async def other_claimed(
    server_client: Any, claimed: Any, make_device: Callable[..., Any], make_task: Callable[..., Any]
) -> Any:
    """Another device ("phone-2") with its own claim of another started task, made after :func:`claimed`."""
    from tests.server.submissions.helpers import claim_http

    make_task(start=True, goods_id="555")
    return await claim_http(server_client, make_device("phone-2"))
