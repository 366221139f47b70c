"""SQL for ``device_screens`` (migration 0011): the answers to an administrator's 查看当前屏幕 — one
fresh screenshot of a phone, stored in the evidence store by SHA-256 like task evidence but belonging to the
device, or, when another app was in front, only that app's package (no image)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from cmbuyer.server.store._sql import Table, marks


@dataclass(frozen=True)
class Screen:
    """One answer: an image (``sha256``, ``byte_size``, ``width``, ``height``) or ``foreground_package``."""

    id: str
    device_id: str
    request_id: str
    sha256: str | None
    byte_size: int | None
    width: int | None
    height: int | None
    foreground_package: str | None
    created_at: str


_TABLE = Table("device_screens", Screen)


def insert(conn: sqlite3.Connection, screen: Screen) -> None:
    """Insert an answer; a second answer to the same request raises ``sqlite3.IntegrityError``."""
    _TABLE.insert(conn, screen)


def by_request(conn: sqlite3.Connection, request_id: str) -> Screen | None:
    """The answer to ``request_id``, or None."""
    return _TABLE.first(conn, "request_id = ?", (request_id,))


def get(conn: sqlite3.Connection, screen_id: str) -> Screen | None:
    """One answer by id, or None."""
    return _TABLE.get(conn, screen_id)


def latest(conn: sqlite3.Connection, device_ids: list[str]) -> dict[str, Screen]:
    """The newest answer of each of ``device_ids`` that has one (index ``device_screens_device``)."""
    found: dict[str, Screen] = {}
    for device_id in device_ids:
        screen = _TABLE.first(conn, "device_id = ? ORDER BY created_at DESC, rowid DESC LIMIT 1", (device_id,))
        if screen is not None:
            found[device_id] = screen
    return found


def referenced(conn: sqlite3.Connection, hashes: list[str]) -> set[str]:
    """Which of ``hashes`` a device screenshot refers to (evidence gc keeps those files)."""
    if not hashes:
        return set()
    return {
        r[0]
        for r in conn.execute(f"SELECT DISTINCT sha256 FROM device_screens WHERE sha256 IN ({marks(hashes)})", hashes)
    }
