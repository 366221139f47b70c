"""The SQLite layer: pragmas, BEGIN IMMEDIATE, one writer, storage failures → StorageError."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from pathlib import Path

import pytest

from cmbuyer.server.db import Database, StorageError, connect_sync

from .scratch_db import scratch_database


@pytest.fixture
async def db(tmp_path: Path):
    async with scratch_database(
        tmp_path / "t.sqlite3",
        "CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL) STRICT",
        "INSERT INTO counter VALUES (1, 0)",
        "CREATE TABLE rows (id INTEGER PRIMARY KEY, payload BLOB NOT NULL) STRICT",
    ) as database:
        yield database


async def test_pragmas_read_back_as_set(db: Database) -> None:
    def read(conn: sqlite3.Connection) -> dict[str, object]:
        return {
            name: conn.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout", "query_only")
        }

    assert await db.write(read) == {
        "journal_mode": "wal",
        "synchronous": 2,
        "foreign_keys": 1,
        "busy_timeout": 5000,
        "query_only": 0,
    }
    assert await db.read(read) == {
        "journal_mode": "wal",
        "synchronous": 2,
        "foreign_keys": 1,
        "busy_timeout": 5000,
        "query_only": 1,
    }


async def test_every_write_runs_in_begin_immediate(db: Database) -> None:
    statements: list[str] = []
    await db.write(lambda c: c.set_trace_callback(statements.append))
    await db.write(lambda c: c.execute("UPDATE counter SET n = n + 1"))
    await db.write(lambda c: c.set_trace_callback(None))
    joined = [s.strip().upper() for s in statements]
    begin = joined.index("BEGIN IMMEDIATE")
    # optimistic pass: no savepoint when nothing fails (savepoints only on the second pass)
    assert "UPDATE COUNTER SET N = N + 1" in joined[begin + 1]
    assert "COMMIT" in joined[begin + 2 :]
    assert not any(s in ("BEGIN", "BEGIN DEFERRED") for s in joined)
    assert not any(s.startswith("SAVEPOINT") for s in joined)


async def test_concurrent_writers_never_interleave(db: Database) -> None:
    trace: list[tuple[int, str]] = []
    threads: set[int] = set()

    def job(i: int):
        def run(conn: sqlite3.Connection) -> int:
            trace.append((i, "start"))
            threads.add(threading.get_ident())
            (n,) = conn.execute("SELECT n FROM counter WHERE id = 1").fetchone()  # read-modify-write
            conn.execute("UPDATE counter SET n = ? WHERE id = 1", (n + 1,))
            trace.append((i, "end"))
            return n + 1

        return run

    results = await asyncio.gather(*(db.write(job(i)) for i in range(200)))
    assert sorted(results) == list(range(1, 201))
    assert await db.read(lambda c: c.execute("SELECT n FROM counter").fetchone()[0]) == 200
    for k in range(0, len(trace), 2):
        assert trace[k][0] == trace[k + 1][0] and trace[k][1] == "start" and trace[k + 1][1] == "end"
    assert len(threads) == 1


def _insert_01(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO rows (payload) VALUES (x'01')")


def _insert_02_then_fail(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO rows (payload) VALUES (x'02')")
    raise ValueError("business rule")


async def test_failing_job_rolls_back_only_itself(db: Database) -> None:
    out = await asyncio.gather(
        db.write(_insert_01), db.write(_insert_02_then_fail), db.write(_insert_01), return_exceptions=True
    )
    assert out[0] is None and out[2] is None and isinstance(out[1], ValueError)
    payloads = await db.read(lambda c: [r[0] for r in c.execute("SELECT payload FROM rows")])
    assert payloads == [b"\x01", b"\x01"]


async def test_failure_in_a_batch_reruns_it_with_savepoints_and_answers_from_the_committed_pass(db: Database) -> None:
    """A batch runs without savepoints first; when one job fails, the transaction is rolled back and the
    batch runs again with a SAVEPOINT per job. Every answer (here: a random value each run writes) must be
    the one that was committed, and the failed job's writes are gone."""
    statements: list[str] = []
    runs: dict[str, int] = {"good": 0, "bad": 0}

    def good(conn: sqlite3.Connection) -> bytes:
        runs["good"] += 1
        value = os.urandom(8)
        conn.execute("INSERT INTO rows (payload) VALUES (?)", (value,))
        return value

    def bad(conn: sqlite3.Connection) -> None:
        runs["bad"] += 1
        conn.execute("INSERT INTO rows (payload) VALUES (x'ff')")
        raise ValueError("business rule")

    await db.write(lambda c: c.set_trace_callback(statements.append))
    out = await asyncio.gather(db.write(good), db.write(bad), db.write(good), return_exceptions=True)
    await db.write(lambda c: c.set_trace_callback(None))
    assert isinstance(out[1], ValueError) and str(out[1]) == "business rule"
    committed = await db.read(lambda c: [r[0] for r in c.execute("SELECT payload FROM rows ORDER BY rowid")])
    assert committed == [out[0], out[2]]  # answers come from the committed (second) pass
    assert runs == {"good": 3, "bad": 2}  # first good ran twice, the one after bad only in pass two
    joined = [s.strip().upper() for s in statements]
    assert joined.count("BEGIN IMMEDIATE") == 3  # pass one, pass two, the job that clears the trace
    assert joined.count("ROLLBACK") == 1 and sum(s.startswith("SAVEPOINT") for s in joined) == 3


async def test_a_lone_failing_job_runs_once_and_leaves_nothing(db: Database) -> None:
    runs = []

    def bad(conn: sqlite3.Connection) -> None:
        runs.append(1)
        conn.execute("UPDATE counter SET n = 99")
        raise ValueError("no")

    with pytest.raises(ValueError):
        await db.write(bad)
    assert runs == [1]
    assert await db.read(lambda c: c.execute("SELECT n FROM counter").fetchone()[0]) == 0


async def test_sqlite_error_in_a_job_is_a_storage_error_without_sql_text(db: Database) -> None:
    out = await asyncio.gather(
        db.write(lambda c: c.execute("UPDATE counter SET n = 5")),
        db.write(lambda c: c.execute("INSERT INTO no_such_table VALUES (1)")),
        return_exceptions=True,
    )
    assert out[0] is not None and not isinstance(out[0], BaseException)
    assert isinstance(out[1], StorageError) and "no_such_table" not in str(out[1])
    assert await db.read(lambda c: c.execute("SELECT n FROM counter").fetchone()[0]) == 5


async def test_full_database_is_a_storage_error_and_leaves_no_partial_row(db: Database) -> None:
    pages = await db.write(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
    await db.write(lambda c: c.execute(f"PRAGMA max_page_count = {pages + 1}"))

    def big(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO rows (payload) VALUES (zeroblob(1000000))")

    with pytest.raises(StorageError):
        await db.write(big)
    assert await db.read(lambda c: c.execute("SELECT count(*) FROM rows").fetchone()[0]) == 0
    await db.write(lambda c: c.execute("PRAGMA max_page_count = 1073741823"))
    await db.write(lambda c: c.execute("INSERT INTO rows (payload) VALUES (x'03')"))
    assert await db.read(lambda c: c.execute("SELECT count(*) FROM rows").fetchone()[0]) == 1


async def test_lock_held_past_busy_timeout_is_a_storage_error(db: Database) -> None:
    other = connect_sync(db.path)
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO rows (payload) VALUES (x'09')")
    try:
        with pytest.raises(StorageError):
            await db.write(lambda c: c.execute("UPDATE counter SET n = 42"))
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert await db.read(lambda c: c.execute("SELECT n FROM counter").fetchone()[0]) == 0
    await db.write(lambda c: c.execute("UPDATE counter SET n = 7"))
    assert await db.read(lambda c: c.execute("SELECT n FROM counter").fetchone()[0]) == 7


async def test_closed_database_raises_storage_error(tmp_path: Path) -> None:
    database = Database(tmp_path / "x.sqlite3")
    with pytest.raises(StorageError):
        await database.write(lambda c: None)
    with pytest.raises(StorageError):
        await database.read(lambda c: None)


async def test_short_jobs_run_on_the_loop_thread_between_begin_and_commit_on_the_connection_thread(
    db: Database,
) -> None:
    statements: list[tuple[str, int]] = []
    job_threads: set[int] = set()

    def job(conn: sqlite3.Connection) -> int:
        job_threads.add(threading.get_ident())
        conn.execute("UPDATE counter SET n = n + 1")
        return int(conn.execute("SELECT n FROM counter").fetchone()[0])

    await db.write(lambda c: c.set_trace_callback(lambda s: statements.append((s, threading.get_ident()))))
    results = await asyncio.gather(*(db.write(job, short=True) for _ in range(5)))
    await db.write(lambda c: c.set_trace_callback(None))
    assert sorted(results) == [1, 2, 3, 4, 5]
    assert job_threads == {threading.get_ident()}  # the event loop's thread
    begin = [t for s, t in statements if s == "BEGIN IMMEDIATE"]
    commit = [t for s, t in statements if s == "COMMIT"]
    assert begin and commit and threading.get_ident() not in begin + commit


async def test_short_and_long_jobs_share_the_same_guarantees(db: Database) -> None:
    out = await asyncio.gather(
        db.write(_insert_01, short=True),
        db.write(_insert_02_then_fail, short=True),
        db.write(_insert_01),
        db.write(_insert_01, short=True),
        return_exceptions=True,
    )
    assert [type(o).__name__ for o in out] == ["NoneType", "ValueError", "NoneType", "NoneType"]
    assert await db.read(lambda c: [r[0] for r in c.execute("SELECT payload FROM rows")]) == [b"\x01"] * 3


async def test_short_job_waits_for_a_lock_held_by_another_process_off_the_loop(db: Database) -> None:
    other = connect_sync(db.path)
    other.execute("BEGIN IMMEDIATE")
    try:
        write = asyncio.create_task(db.write(lambda c: c.execute("UPDATE counter SET n = 3"), short=True))
        ticks = 0
        for _ in range(20):  # the loop keeps running while the writer waits for the lock
            await asyncio.sleep(0.01)
            ticks += 1
        assert not write.done() and ticks == 20
    finally:
        other.execute("COMMIT")
        other.close()
    await asyncio.wait_for(write, 5)
    assert await db.read(lambda c: c.execute("SELECT n FROM counter").fetchone()[0]) == 3


@pytest.mark.parametrize("snapshot", [False, True])
async def test_snapshot_read_sees_one_commit_for_all_its_statements(db: Database, snapshot: bool) -> None:
    """A commit by another connection between two statements of one read job: a plain read sees it in
    the second statement, a snapshot read does not (and leaves no transaction open behind it)."""
    other = connect_sync(db.path)
    try:

        def job(conn: sqlite3.Connection) -> tuple[int, int, bool]:
            first = conn.execute("SELECT n FROM counter").fetchone()[0]
            other.execute("UPDATE counter SET n = n + 1")  # autocommit: committed at once
            second = conn.execute("SELECT n FROM counter").fetchone()[0]
            return first, second, conn.in_transaction

        first, second, inside = await db.read(job, snapshot=snapshot)
        assert (second == first) is snapshot and inside is snapshot
        assert await db.read(lambda c: c.in_transaction) is False
        assert await db.read(lambda c: c.execute("SELECT n FROM counter").fetchone()[0]) == first + 1
    finally:
        other.close()
