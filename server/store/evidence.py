"""SQL for evidence assets (metadata rows; the PNG bytes live in the content-addressed file store)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from cmbuyer.server.store._sql import Table, marks


@dataclass(frozen=True)
class Asset:
    """An evidence asset row (never holds a file name or path; the file is found by ``sha256``)."""

    id: str
    task_id: str
    attempt_id: str
    device_id: str
    upload_key: str
    kind: str
    privacy_tier: str
    sha256: str
    byte_size: int
    mime: str
    width: int
    height: int
    captured_at: str
    created_at: str


_TABLE = Table("evidence_assets", Asset)


def insert(conn: sqlite3.Connection, asset: Asset) -> None:
    """Insert an asset; the composite FK (attempt_id, task_id) proves the attempt belongs to the task."""
    _TABLE.insert(conn, asset)


get = _TABLE.get  # one asset by id, or None


def usage_for_attempt(conn: sqlite3.Connection, task_id: str, attempt_id: str) -> tuple[int, int]:
    """``(files, bytes)`` the attempt already stored. Found through the task's index (``evidence_task``),
    so it reads only this task's rows."""
    files, size = conn.execute(
        "SELECT count(*), coalesce(sum(byte_size), 0) FROM evidence_assets WHERE task_id = ? AND attempt_id = ?",
        (task_id, attempt_id),
    ).fetchone()
    return int(files), int(size)


def referenced(conn: sqlite3.Connection, hashes: list[str]) -> set[str]:
    """Which of ``hashes`` (at most 500) at least one asset row refers to."""
    if not hashes:
        return set()
    if len(hashes) > 500:
        raise ValueError("at most 500 hashes per query")
    return {
        r[0]
        for r in conn.execute(f"SELECT DISTINCT sha256 FROM evidence_assets WHERE sha256 IN ({marks(hashes)})", hashes)
    }
