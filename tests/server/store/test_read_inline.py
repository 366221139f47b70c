"""``Database.read_inline`` (the authentication lookup without a thread hop, docs/performance.md): same
answers as ``read`` — always the latest commit, never cached — query-only, never waits on the event-loop
thread, and falls back to the waiting reader on BUSY/LOCKED."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.server.db import Database, StorageError, connect_sync

from .scratch_db import scratch_database


@pytest.fixture
async def db(tmp_path: Path) -> Any:
    async with scratch_database(
        tmp_path / "r.sqlite3",
        "CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL) STRICT",
        "INSERT INTO counter VALUES (1, 0)",
    ) as database:
        yield database


def _n(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT n FROM counter WHERE id = 1").fetchone()[0])


async def test_sees_every_commit_immediately(db: Database) -> None:
    for i in range(1, 6):
        await db.write(lambda c, i=i: c.execute("UPDATE counter SET n = ? WHERE id = 1", (i,)))
        assert await db.read_inline(_n) == i


async def test_sees_commits_of_other_processes(db: Database, tmp_path: Path) -> None:
    assert await db.read_inline(_n) == 0
    other = connect_sync(tmp_path / "r.sqlite3")
    other.execute("UPDATE counter SET n = 7 WHERE id = 1")
    other.close()
    assert await db.read_inline(_n) == 7


async def test_is_query_only_and_never_waits(db: Database) -> None:
    def pragmas(conn: sqlite3.Connection) -> tuple[int, int]:
        return conn.execute("PRAGMA query_only").fetchone()[0], conn.execute("PRAGMA busy_timeout").fetchone()[0]

    assert await db.read_inline(pragmas) == (1, 0)
    with pytest.raises(StorageError):
        await db.read_inline(lambda c: c.execute("UPDATE counter SET n = 9"))


@pytest.mark.parametrize("code", [sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, 261])  # 261 = SQLITE_BUSY_RECOVERY
async def test_busy_falls_back_to_the_waiting_reader(db: Database, code: int) -> None:
    seen: list[int] = []

    def job(conn: sqlite3.Connection) -> int:
        timeout = int(conn.execute("PRAGMA busy_timeout").fetchone()[0])
        seen.append(timeout)
        if timeout == 0:
            exc = sqlite3.OperationalError("database is locked")
            exc.sqlite_errorcode = code  # type: ignore[attr-defined]
            raise exc
        return _n(conn)

    assert await db.read_inline(job) == 0
    assert seen == [0, 5000]  # inline first, then the reader pool (which waits for locks)


async def test_other_errors_are_storage_errors(db: Database) -> None:
    def broken(_conn: sqlite3.Connection) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    with pytest.raises(StorageError):
        await db.read_inline(broken)
    with pytest.raises(StorageError):
        await db.read_inline(lambda c: c.execute("SELECT * FROM missing_table"))
    assert await db.read_inline(_n) == 0  # still usable


async def test_closed_database_refuses(tmp_path: Path) -> None:
    database = Database(tmp_path / "closed.sqlite3")
    with pytest.raises(StorageError):
        await database.read_inline(_n)
