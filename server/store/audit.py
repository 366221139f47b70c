"""SQL for the append-only audit trail (written in the caller's transaction)."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from cmbuyer.schemas.canonical import canonical_json


@dataclass(frozen=True)
class AuditEntry:
    """One audit row to append: ``actor_kind``/``actor_id`` did ``action`` to ``subject_kind``/``subject_id``
    at ``at`` (wire time), with the request's key and the claim generation when there are any. ``detail``
    (stored as canonical JSON) never holds tokens, hashes or secrets."""

    at: str
    actor_kind: str
    actor_id: str
    action: str
    subject_kind: str
    subject_id: str
    request_id: str | None = None
    generation: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AuditRow(AuditEntry):
    """An :class:`AuditEntry` as read back, with its ``id`` (the append order)."""

    id: int = field(kw_only=True)

    def as_dict(self) -> dict[str, Any]:
        """The row as a plain dict for JSON answers: ``id`` first, then the entry's fields in order."""
        return {"id": self.id, **dataclasses.asdict(self)}


# The entry's fields are the table's columns, but for detail, stored as canonical JSON in detail_json.
_COLUMNS = tuple(f.name for f in dataclasses.fields(AuditEntry) if f.name != "detail")
_INSERT = f"INSERT INTO audit_log ({', '.join(_COLUMNS)}, detail_json) VALUES ({', '.join('?' * (len(_COLUMNS) + 1))})"


def append(conn: sqlite3.Connection, entry: AuditEntry) -> None:
    """Insert ``entry`` as one audit row."""
    conn.execute(_INSERT, (*(getattr(entry, c) for c in _COLUMNS), canonical_json(entry.detail)))


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
    return AuditRow(**{c: r[c] for c in _COLUMNS}, detail=json.loads(r["detail_json"]), id=r["id"])
