"""Fixtures for the adversarial tests: a claimed attempt through the real HTTP API, storage-fault
injection through the DB writer (``PRAGMA max_page_count``), and the soak iteration count."""

from __future__ import annotations

import os
import sqlite3
from typing import Any

import pytest

from cmbuyer.server.web.keys import DB


def soak_iterations(default: int) -> int:
    """Loop counts come from ``CMBUYER_SOAK_ITERATIONS`` (small default so the folder stays fast)."""
    raw = os.environ.get("CMBUYER_SOAK_ITERATIONS")
    return max(1, int(raw)) if raw else default


class StorageFault:
    """Inject a storage failure into the server's write connection, mid-request.

    ``on(table, op, mode)`` installs a TEMP trigger on the writer connection only: ``mode="ABORT"``
    fails that one statement (like SQLITE_FULL on one insert), ``mode="ROLLBACK"`` makes SQLite roll
    back the whole transaction (as it may on SQLITE_FULL/IOERR), so every job of the group-committed
    batch is lost. ``disk_full()`` sets ``PRAGMA max_page_count`` to the current size.
    """

    def __init__(self, client: Any) -> None:
        self._db = client.server.app[DB]
        self._names: list[str] = []

    async def on(self, table: str, op: str = "INSERT", mode: str = "ABORT") -> None:
        name = f"inject_{table}_{op.lower()}_{len(self._names)}"
        sql = (
            f"CREATE TEMP TRIGGER {name} BEFORE {op} ON main.{table}"
            f" BEGIN SELECT RAISE({mode}, 'injected storage failure'); END"
        )
        await self._db.write(lambda c: c.execute(sql))
        self._names.append(name)

    async def disk_full(self) -> None:
        pages = await self._db.write(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
        await self._db.write(lambda c: c.execute(f"PRAGMA max_page_count = {pages}"))

    async def off(self) -> None:
        names, self._names = self._names, []
        for name in names:
            await self._db.write(lambda c, n=name: c.execute(f"DROP TRIGGER temp.{n}"))
        await self._db.write(lambda c: c.execute("PRAGMA max_page_count = 1073741823"))


@pytest.fixture
def fault(server_client: Any) -> StorageFault:
    return StorageFault(server_client)


def counts(conn: sqlite3.Connection) -> dict[str, int]:
    """Row counts of every table a device request may write."""
    return {
        t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        for t in (
            "device_requests",
            "attempts",
            "audit_log",
            "authorizations",
            "tasks",
            "events",
            "evidence_assets",
            "order_submissions",
        )
    }
