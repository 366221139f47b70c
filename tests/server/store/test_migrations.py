"""Migrations: ordered, one transaction each with a checksum record; start-up refuses a
pending, unknown (newer) or tampered migration."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from cmbuyer.server import migrate
from cmbuyer.server.config import Settings
from cmbuyer.server.db import connect_sync
from cmbuyer.server.domain.errors import StartupRefused
from cmbuyer.server.lifecycle import check_schema


def test_fresh_database_is_current_with_constraints(settings: Settings, sync_conn: sqlite3.Connection) -> None:
    migrate.check_current(sync_conn)
    names = [m.name for m in migrate.available()]
    assert names[:2] == ["0001_foundation.sql", "0002_claims_submissions.sql"]
    assert sync_conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert sync_conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    indexes = {r[1] for r in sync_conn.execute("SELECT * FROM sqlite_master WHERE type = 'index'")}
    assert {"authorizations_one_live", "attempts_one_open_per_device"} <= indexes


def test_reopen_and_second_migrate_is_a_no_op(settings: Settings) -> None:
    conn = connect_sync(settings.db_path)
    assert migrate.migrate(conn, "2026-01-01T00:00:00.000000Z") == []
    conn.close()
    check_schema(settings)


def test_tampered_checksum_refuses_start(settings: Settings, sync_conn: sqlite3.Connection) -> None:
    sync_conn.execute("UPDATE schema_migrations SET checksum = ? WHERE name = '0001_foundation.sql'", ("0" * 64,))
    with pytest.raises(StartupRefused, match="checksum"):
        check_schema(settings)


def test_unknown_newer_migration_refuses_start(settings: Settings, sync_conn: sqlite3.Connection) -> None:
    sync_conn.execute("INSERT INTO schema_migrations VALUES ('9999_future.sql', 'x', '2030-01-01T00:00:00Z')")
    with pytest.raises(StartupRefused, match="newer"):
        check_schema(settings)


def test_pending_migration_refuses_start(settings: Settings, sync_conn: sqlite3.Connection) -> None:
    last = migrate.available()[-1].name
    sync_conn.execute("DELETE FROM schema_migrations WHERE name = ?", (last,))
    with pytest.raises(StartupRefused, match="pending"):
        check_schema(settings)


def test_missing_database_refuses_start(tmp_path: Path, settings: Settings) -> None:
    from dataclasses import replace

    with pytest.raises(StartupRefused, match="does not exist"):
        check_schema(replace(settings, db_path=tmp_path / "absent.sqlite3"))


def test_failed_migration_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = migrate.available()
    broken = migrate.Migration(
        len(good) + 1,
        f"{len(good) + 1:04d}_broken.sql",
        "CREATE TABLE half_done (x INTEGER);\nINSERT INTO no_such_table VALUES (1);\n",
    )
    monkeypatch.setattr(migrate, "available", lambda: [*good, broken])
    conn = connect_sync(tmp_path / "m.sqlite3")
    with pytest.raises(migrate.MigrationError, match="broken"):
        migrate.migrate(conn, "2026-01-01T00:00:00.000000Z")
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "half_done" not in tables and "tasks" in tables
    assert broken.name not in {r[0] for r in conn.execute("SELECT name FROM schema_migrations")}
    conn.close()


def test_split_statements_keeps_triggers_whole() -> None:
    sql = (
        "CREATE TABLE a (x INTEGER);\nCREATE TRIGGER t BEFORE DELETE ON a\nBEGIN\n"
        "    SELECT RAISE(ABORT, 'no; really');\nEND;\n-- trailing comment\n"
    )
    parts = migrate.split_statements(sql)
    assert len(parts) == 2 and parts[1].startswith("CREATE TRIGGER") and parts[1].endswith("END;")
