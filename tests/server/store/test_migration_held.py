"""Migration 0009 (tasks may be HELD) rebuilds ``tasks``: every row, index and trigger of a
database at 0008 survives it, the keyword search still follows edits, and the state list now takes HELD
and still refuses anything else."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from cmbuyer.server import migrate
from cmbuyer.server.clock import ManualClock
from cmbuyer.server.config import Settings
from cmbuyer.server.domain.claims import ClaimPolicy
from tests.server.store.test_migration_lean import AT, _migrate_to, _seed, db_at
from tests.server.store.test_migration_order_sheet import _schema_objects

HELD = "0009_held_tasks.sql"


@pytest.fixture
def db_0008(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[sqlite3.Connection]:
    with closing(db_at(tmp_path / "old.sqlite3", "0008_order_sn_search.sql", monkeypatch)) as conn:
        yield conn


def _all_rows(conn: sqlite3.Connection) -> dict[str, list[tuple[object, ...]]]:
    tables = [
        r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
    ]
    return {t: sorted(tuple(r) for r in conn.execute(f"SELECT * FROM {t}")) for t in tables if t != "schema_migrations"}


def test_upgrade_keeps_every_row_and_object(
    db_0008: sqlite3.Connection,
    settings: Settings,
    clock: ManualClock,
    policy: ClaimPolicy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _seed(db_0008, settings, clock, policy, tasks=5, claims=2)
    rows, objects = _all_rows(db_0008), _schema_objects(db_0008)
    # only 0009: the later migrations have their own tests
    assert _migrate_to(db_0008, 9, monkeypatch) == [HELD]
    assert _all_rows(db_0008) == rows
    assert _schema_objects(db_0008) == objects
    # the later ones only add (0010: order_submissions rebuilt; 0011: SKU options; 0012: columns and a table)
    migrate.migrate(db_0008, AT)
    migrate.check_current(db_0008)
    assert db_0008.execute("PRAGMA foreign_key_check").fetchall() == []
    assert db_0008.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    task_id = rows["tasks"][0][0]
    db_0008.execute("UPDATE tasks SET state = 'HELD' WHERE id = ?", (task_id,))
    with pytest.raises(sqlite3.IntegrityError):
        db_0008.execute("UPDATE tasks SET state = 'ON_HOLD' WHERE id = ?", (task_id,))
    db_0008.execute("UPDATE tasks SET title = 'renamed after 0008' WHERE id = ?", (task_id,))
    found = db_0008.execute("SELECT task_id FROM task_search WHERE task_search MATCH ?", ('"renamed"',)).fetchall()
    assert [r[0] for r in found] == [task_id]
