"""The writer and other processes' locks (docs/architecture.md "Server layers"): an idle writer holds no write lock,
and writes queued
behind another process's lock wait for it and then commit exactly once — on a real SQLite file.
(Sustained-load cases: tests/server/store/test_writer_under_load.py.)
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

import pytest

from cmbuyer.server.db import Database

from .scratch_db import scratch_database

PAYLOAD = 2048


@pytest.fixture
async def db(tmp_path: Path):
    async with scratch_database(
        tmp_path / "w.sqlite3",
        "CREATE TABLE rows (id INTEGER PRIMARY KEY, k INTEGER NOT NULL, payload BLOB NOT NULL) STRICT",
    ) as database:
        yield database


def _insert(k: int):
    def job(conn: sqlite3.Connection) -> int:
        conn.execute("INSERT INTO rows (k, payload) VALUES (?, ?)", (k, os.urandom(PAYLOAD)))
        return k

    return job


def _other(db: Database) -> sqlite3.Connection:
    conn = sqlite3.connect(db.path, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 0")
    return conn


async def test_an_idle_writer_holds_no_write_lock(db: Database) -> None:
    # bursts of concurrent short writes …
    for burst in range(5):
        assert await asyncio.gather(*(db.write(_insert(burst * 100 + i), short=True) for i in range(40))) == [
            burst * 100 + i for i in range(40)
        ]
    # … but once the queue is empty no transaction stays open: another process may write at once
    other = _other(db)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
    finally:
        other.close()
    counts = await db.read(lambda c: tuple(c.execute("SELECT count(*), count(DISTINCT k) FROM rows").fetchone()))
    assert counts == (200, 200)


async def test_a_lock_held_elsewhere_between_batches_delays_but_never_loses_writes(db: Database) -> None:
    # Another process takes the lock; queued writes wait for it (busy timeout) and then all commit once.
    other = sqlite3.connect(db.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    pending = asyncio.gather(*(db.write(_insert(i), short=True) for i in range(50)))
    await asyncio.sleep(0.2)
    assert not pending.done()
    other.execute("INSERT INTO rows (k, payload) VALUES (-1, x'00')")
    other.execute("COMMIT")
    other.close()
    assert await asyncio.wait_for(pending, 10) == list(range(50))
    ks = await db.read(lambda c: [r[0] for r in c.execute("SELECT k FROM rows ORDER BY id")])
    assert ks[0] == -1 and sorted(ks[1:]) == list(range(50))
