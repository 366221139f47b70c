"""Fixtures of the storage tests (server/db.py, server/migrate.py, migrations/, server/store/):
storage-fault injection through the DB writer (TEMP triggers, ``PRAGMA max_page_count``), a row count
of every table a device request may write, and the claim fixtures of tests/server/claims that the
migration tests seed with."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from cmbuyer.server.web.keys import DB
from tests.server.claims.conftest import policy, ready_device  # noqa: F401 — fixtures reused here
from tests.server.submissions.helpers import DEVICE_WRITTEN_TABLES


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
    return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in DEVICE_WRITTEN_TABLES}
