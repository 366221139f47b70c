"""The SQL behind the operator commands ``cmbuyer-server doctor`` and ``backup`` (:mod:`cmbuyer.server.cli`):
connection settings, integrity checks and the online backup copy. Every function raises ``sqlite3.Error``
as it comes; the command decides the exit code (docs/operations.md)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# The pragma names :func:`pragmas` accepts: interpolated into the statement, so never a caller's string.
PRAGMA_NAMES = frozenset({"journal_mode", "synchronous", "foreign_keys", "busy_timeout"})


def pragmas(conn: sqlite3.Connection, names: Iterable[str]) -> dict[str, Any]:
    """``{name: value}`` of the connection's pragmas ``names`` (each one of :data:`PRAGMA_NAMES`;
    ``ValueError`` otherwise), e.g. ``{"journal_mode": "wal", "synchronous": 2}``."""
    values: dict[str, Any] = {}
    for name in names:
        if name not in PRAGMA_NAMES:
            raise ValueError(f"unknown pragma {name!r}")
        values[name] = conn.execute(f"PRAGMA {name}").fetchone()[0]
    return values


def quick_check_ok(conn: sqlite3.Connection) -> bool:
    """True when ``PRAGMA quick_check`` answers ``ok`` (the fast check ``doctor`` runs on the live file)."""
    return bool(conn.execute("PRAGMA quick_check").fetchone()[0] == "ok")


def integrity_check_ok(conn: sqlite3.Connection) -> bool:
    """True when ``PRAGMA integrity_check`` answers ``ok`` (the full check ``backup`` runs on its copy)."""
    return bool(conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok")


def vacuum_into(conn: sqlite3.Connection, target: Path) -> None:
    """Write a consistent, compacted copy of the database to ``target`` (``VACUUM INTO``; the file must not
    exist). WAL readers and the writer are not blocked while it runs."""
    conn.execute("VACUUM INTO ?", (str(target),))


def checkpoint_truncate(conn: sqlite3.Connection) -> None:
    """Copy the whole WAL into the database file and empty it (``wal_checkpoint(TRUNCATE)``), so the file
    stands alone — ``restore`` does this before it moves the restored file into place."""
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
