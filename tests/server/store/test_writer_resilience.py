"""The single write owner must survive bad luck in its own bookkeeping (docs/architecture.md "Server layers"): an error
in the
SAVEPOINT/RELEASE/ROLLBACK TO statements or an unexpected exception must fail only that batch with
StorageError (→ 503) and leave the writer able to run the next batch — never a wedged transaction
(every later write 503 forever) and never a dead writer task (every later write hangs)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.server import db as db_module
from cmbuyer.server.db import Database, StorageError

from .scratch_db import scratch_database


@pytest.fixture
async def db(tmp_path: Path) -> Any:
    async with scratch_database(tmp_path / "w.sqlite", "CREATE TABLE t (x INTEGER)") as database:
        yield database


def _count(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM t").fetchone()[0])


async def test_job_that_ends_the_transaction_does_not_wedge_the_writer(db: Database) -> None:
    # A job that (by a bug) commits/rolls back itself destroys the SAVEPOINT: RELEASE then fails.
    def rogue(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("ROLLBACK")

    with pytest.raises(StorageError):
        await db.write(rogue)
    await asyncio.wait_for(db.write(lambda c: c.execute("INSERT INTO t VALUES (2)")), 5)
    assert await db.read(_count) == 1


async def test_savepoint_failure_fails_the_batch_not_the_writer(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    real = db_module._run_batch
    calls = {"n": 0}

    class Flaky:
        def __init__(self, conn: sqlite3.Connection) -> None:
            self._conn = conn

        def execute(self, sql: str, *args: Any) -> Any:
            if sql.startswith("SAVEPOINT") and calls["n"] == 0:
                calls["n"] += 1
                self._conn.execute("INSERT INTO t VALUES (99)")  # a write already in the transaction
                raise sqlite3.OperationalError("disk I/O error")
            return self._conn.execute(sql, *args)

        @property
        def in_transaction(self) -> bool:
            return self._conn.in_transaction

    def flaky_batch(conn: sqlite3.Connection, batch: list[Any]) -> None:
        if calls["n"] == 0:
            real(Flaky(conn), batch)  # type: ignore[arg-type]
        else:
            real(conn, batch)

    def refused(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (3)")
        raise ValueError("business rule")

    monkeypatch.setattr(db_module, "_run_batch", flaky_batch)
    # a failing job in a batch of several sends the batch to the savepoint pass, whose SAVEPOINT fails
    out = await asyncio.wait_for(
        asyncio.gather(
            db.write(lambda c: c.execute("INSERT INTO t VALUES (1)")), db.write(refused), return_exceptions=True
        ),
        5,
    )
    assert calls["n"] == 1 and all(isinstance(o, StorageError) for o in out)
    await asyncio.wait_for(db.write(lambda c: c.execute("INSERT INTO t VALUES (2)")), 5)
    assert await db.read(_count) == 1  # neither 99, 1 nor 3 was committed


@pytest.mark.parametrize("short", [False, True])
async def test_job_ending_the_transaction_in_a_batch_runs_nothing_in_autocommit(db: Database, short: bool) -> None:
    def rogue(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("COMMIT")  # by a bug: would commit the jobs before it and leave the rest in autocommit

    def later(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (2)")

    out = await asyncio.wait_for(
        asyncio.gather(db.write(rogue, short=short), db.write(later, short=short), return_exceptions=True), 5
    )
    assert all(isinstance(o, StorageError) for o in out)
    # the rogue's own COMMIT did persist row 1 (nothing can undo a COMMIT), but 'later' never ran outside
    # a transaction of the writer and nobody was told "ok"
    assert await db.read(lambda c: [r[0] for r in c.execute("SELECT x FROM t")]) == [1]
    await asyncio.wait_for(db.write(lambda c: c.execute("INSERT INTO t VALUES (5)"), short=short), 5)


async def test_unexpected_exception_in_the_writer_does_not_kill_it(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = db_module._run_batch
    calls = {"n": 0}

    def exploding(conn: sqlite3.Connection, batch: list[Any]) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("unexpected")
        real(conn, batch)

    monkeypatch.setattr(db_module, "_run_batch", exploding)
    with pytest.raises(StorageError):
        await asyncio.wait_for(db.write(lambda c: c.execute("INSERT INTO t VALUES (1)")), 5)
    await asyncio.wait_for(db.write(lambda c: c.execute("INSERT INTO t VALUES (2)")), 5)
    assert await db.read(_count) == 1


async def test_transaction_left_open_by_a_failed_rollback_does_not_wedge_later_batches(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_rollback = db_module._safe_rollback
    calls = {"n": 0}

    def failing_once(conn: sqlite3.Connection) -> None:
        calls["n"] += 1
        if calls["n"] > 1:
            real_rollback(conn)  # the first rollback "fails": the transaction stays open

    def refused(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (7)")
        raise ValueError("business rule")

    monkeypatch.setattr(db_module, "_safe_rollback", failing_once)
    with pytest.raises(ValueError):
        await asyncio.wait_for(db.write(refused), 5)
    await asyncio.wait_for(db.write(lambda c: c.execute("INSERT INTO t VALUES (8)")), 5)
    assert await db.read(lambda c: [r[0] for r in c.execute("SELECT x FROM t")]) == [8]
