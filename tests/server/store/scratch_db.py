"""A throwaway real SQLite database for the writer/reader tests: a file with the given schema statements,
opened as a :class:`Database` (closed again on exit)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from cmbuyer.server.db import Database, connect_sync


def create_scratch(path: Path, *statements: str) -> Path:
    """Create ``path`` and run ``statements`` on it (autocommit); returns ``path``."""
    setup = connect_sync(path)
    try:
        for sql in statements:
            setup.execute(sql)
    finally:
        setup.close()
    return path


@asynccontextmanager
async def scratch_database(path: Path, *statements: str) -> AsyncIterator[Database]:
    """``Database`` opened on a new file made by :func:`create_scratch`."""
    database = Database(create_scratch(path, *statements))
    await database.open()
    try:
        yield database
    finally:
        await database.close()
