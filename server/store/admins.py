"""SQL for administrators (password hashes only; hashing lives in services/admins.py)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from cmbuyer.server.store._sql import one


@dataclass(frozen=True)
class Admin:
    """An administrator account."""

    id: str
    username: str
    password_hash: str
    disabled: bool
    created_at: str


def _row(r: sqlite3.Row) -> Admin:
    return Admin(r["id"], r["username"], r["password_hash"], bool(r["disabled"]), r["created_at"])


def insert(conn: sqlite3.Connection, admin_id: str, username: str, password_hash: str, at: str) -> None:
    """Insert an admin; raises sqlite3.IntegrityError on a duplicate username."""
    conn.execute(
        "INSERT INTO admins (id, username, password_hash, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
        (admin_id, username, password_hash, at, at),
    )


def by_username(conn: sqlite3.Connection, username: str) -> Admin | None:
    """The admin with this username, or None."""
    return one(conn, "SELECT * FROM admins WHERE username = ?", (username,), _row)


def by_id(conn: sqlite3.Connection, admin_id: str) -> Admin | None:
    """The admin with this id, or None."""
    return one(conn, "SELECT * FROM admins WHERE id = ?", (admin_id,), _row)


def set_password(conn: sqlite3.Connection, admin_id: str, password_hash: str, at: str) -> None:
    """Replace the password hash."""
    conn.execute("UPDATE admins SET password_hash = ?, updated_at = ? WHERE id = ?", (password_hash, at, admin_id))


def list_all(conn: sqlite3.Connection) -> list[Admin]:
    """Every admin by username."""
    return [_row(r) for r in conn.execute("SELECT * FROM admins ORDER BY username")]
