"""The audit row of an action by an :class:`~cmbuyer.server.tx.common.Actor`, written in the action's own
transaction (docs/state-machines.md: every change writes its audit row in the same transaction)."""

from __future__ import annotations

import sqlite3
from typing import Any

from cmbuyer.server.store import audit
from cmbuyer.server.tx.common import Actor


def record(
    conn: sqlite3.Connection,
    actor: Actor,
    action: str,
    subject_kind: str,
    subject_id: str,
    *,
    at: str,
    request_id: str | None = None,
    generation: int | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    """Append one audit row: ``actor`` did ``action`` to ``subject_kind``/``subject_id`` at ``at`` (wire
    time), with the request's key and the claim generation when there are any. Raises what the store
    raises (sqlite3 errors roll the whole action back)."""
    audit.append(
        conn,
        audit.AuditEntry(
            at, actor.kind, actor.id, action, subject_kind, subject_id, request_id, generation, detail or {}
        ),
    )
