"""The SQL behind ``GET /healthz`` (:mod:`cmbuyer.server.web.health`): what the probe asks the database
besides the migration status (:func:`cmbuyer.server.migrate.status`)."""

from __future__ import annotations

import sqlite3


def sqlite_version(conn: sqlite3.Connection) -> str:
    """The SQLite library version the connection runs on, e.g. ``"3.46.1"``; ``sqlite3.Error`` propagates."""
    row = conn.execute("SELECT sqlite_version()").fetchone()
    return str(row[0])
