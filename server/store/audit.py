"""SQL for the append-only audit trail (written in the caller's transaction)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from cmbuyer.schemas.canonical import canonical_json


@dataclass(frozen=True)
class AuditRow:
    """One audit entry; ``detail`` never holds tokens, hashes or secrets."""

    id: int
    at: str
    actor_kind: str
    actor_id: str
    action: str
    subject_kind: str
    subject_id: str
    request_id: str | None
    generation: int | None
    detail: dict[str, Any]


def append(
    conn: sqlite3.Connection,
    *,
    at: str,
    actor_kind: str,
    actor_id: str,
    action: str,
    subject_kind: str,
    subject_id: str,
    request_id: str | None = None,
    generation: int | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    """Insert one audit row."""
    conn.execute(
        "INSERT INTO audit_log (at, actor_kind, actor_id, action, subject_kind, subject_id, request_id,"
        " generation, detail_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            at,
            actor_kind,
            actor_id,
            action,
            subject_kind,
            subject_id,
            request_id,
            generation,
            canonical_json(detail or {}),
        ),
    )


def for_subject(conn: sqlite3.Connection, subject_kind: str, subject_id: str, limit: int = 200) -> list[AuditRow]:
    """Audit rows of one subject, oldest first."""
    rows = conn.execute(
        "SELECT * FROM audit_log WHERE subject_kind = ? AND subject_id = ? ORDER BY id LIMIT ?",
        (subject_kind, subject_id, limit),
    ).fetchall()
    return [_row(r) for r in rows]


def all_rows(conn: sqlite3.Connection) -> list[AuditRow]:
    """Every audit row (tests, export)."""
    return [_row(r) for r in conn.execute("SELECT * FROM audit_log ORDER BY id")]


def _row(r: sqlite3.Row) -> AuditRow:
    return AuditRow(
        r["id"],
        r["at"],
        r["actor_kind"],
        r["actor_id"],
        r["action"],
        r["subject_kind"],
        r["subject_id"],
        r["request_id"],
        r["generation"],
        json.loads(r["detail_json"]),
    )
