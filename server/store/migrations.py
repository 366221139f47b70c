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


def foreign_key_problems(conn: sqlite3.Connection) -> int:
    """Number of rows ``PRAGMA foreign_key_check`` reports."""
    return len(conn.execute("PRAGMA foreign_key_check").fetchall())
