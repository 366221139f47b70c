"""Creating a DRAFT task inside a transaction — the step ``POST /tasks``, ``task add`` and the spreadsheet
import share (docs/admin.md "Routes", "Import").

``create_key`` idempotency: the same key with the same fields returns the existing task (``created``
False); with different fields raises Conflict ``idempotency_conflict``. The stored ``create_hash`` is the
hash of ``{"create_key", <fields>}`` (canonical JSON), the same form since migration 0001.
"""

from __future__ import annotations

import sqlite3
from dataclasses import asdict
from datetime import datetime
from typing import Any

from cmbuyer.server.clock import to_wire
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import refusal
from cmbuyer.server.domain.states import TaskState
from cmbuyer.server.domain.task_fields import TaskFields, hash_fields
from cmbuyer.server.store import tasks as task_store
from cmbuyer.server.tx import audit as audit_tx
from cmbuyer.server.tx.common import Actor, new_id, payload_hash


def create_draft(
    conn: sqlite3.Connection,
    create_key: str,
    fields: TaskFields,
    actor: Actor,
    now: datetime,
    *,
    detail: dict[str, Any] | None = None,
) -> tuple[task_store.Task, bool]:
    """Insert a DRAFT task (version 1) with its ``task.create`` audit row (``request_id`` = the create key;
    ``detail`` adds to goods id, quantity and cap); returns ``(task, created)`` — see the module docstring."""
    values = asdict(fields)
    digest = payload_hash({"create_key": create_key, **hash_fields(fields)})
    existing = task_store.by_create_key(conn, create_key)
    if existing is not None:
        if existing.create_hash != digest:
            raise refusal(Code.IDEMPOTENCY_CONFLICT).because("create_key")
        return existing, False
    at = to_wire(now)
    task = task_store.Task(
        id=new_id(),
        create_key=create_key,
        create_hash=digest,
        **values,  # the validated fields are the task's columns of the same names, stored as they are
        state=TaskState.DRAFT,
        version=1,
        state_reason=None,
        created_by=f"{actor.kind}:{actor.id}",
        created_at=at,
        updated_at=at,
    )
    task_store.insert(conn, task)
    audit_tx.record(
        conn,
        actor,
        "task.create",
        "task",
        task.id,
        at=at,
        request_id=create_key,
        detail={
            "goods_id": task.goods_id,
            "quantity": task.quantity,
            "max_total_price": task.max_total_price,
            **(detail or {}),
        },
    )
    return task, True
