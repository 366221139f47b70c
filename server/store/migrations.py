"""SQL for the migrations record table."""

from __future__ import annotations

import sqlite3


def ensure_table(conn: sqlite3.Connection) -> None:
    """Create the record table if missing (idempotent; runs in autocommit before any migration)."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " name TEXT PRIMARY KEY, checksum TEXT NOT NULL, applied_at TEXT NOT NULL) STRICT"
    )


def applied(conn: sqlite3.Connection) -> dict[str, str]:
    """``{name: checksum}`` of the applied migrations."""
    return {row[0]: row[1] for row in conn.execute("SELECT name, checksum FROM schema_migrations")}


def record(conn: sqlite3.Connection, name: str, checksum: str, applied_at: str) -> None:
    """Insert one record (inside the migration's own transaction)."""
    conn.execute(
        "INSERT INTO schema_migrations (name, checksum, applied_at) VALUES (?, ?, ?)",
        (name, checksum, applied_at),
    )


def foreign_key_problems(conn: sqlite3.Connection) -> dict[tuple[str, str], int]:
    """Rows ``PRAGMA foreign_key_check`` reports, counted per ``(child table, parent table)``; empty when
    every reference resolves. Table names only: never row contents."""
    counts: dict[tuple[str, str], int] = {}
    for child, _rowid, parent, _fk in conn.execute("PRAGMA foreign_key_check"):
        counts[(child, parent)] = counts.get((child, parent), 0) + 1
    return counts


def set_foreign_keys(conn: sqlite3.Connection, on: bool) -> None:
    """``PRAGMA foreign_keys`` (outside a transaction only; SQLite ignores it inside one)."""
    conn.execute(f"PRAGMA foreign_keys = {'ON' if on else 'OFF'}")
