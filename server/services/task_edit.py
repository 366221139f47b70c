"""Edit a DRAFT task (docs/admin.md "Editing a draft"): title, URL, SKU texts, quantity and
max total, validated by the same rules as a new task (:func:`cmbuyer.server.domain.task_fields.parse_task_fields`).

One write transaction: unknown task → 404 ``not_found``; ``expected_task_version`` stale → 409
``version_conflict`` ("任务已变化，请刷新后重选"); not DRAFT → 409 ``invalid_state`` naming the state.
The version goes up by one (so a start prepared against the old values is refused), the state stays
DRAFT, and the audit row ``task.edit`` carries the old and the new value of every changed field. Starting
the task afterwards snapshots the edited values into the authorization (services/tasks.start_purchases).
"""

from __future__ import annotations

import sqlite3
from dataclasses import asdict, dataclass
from datetime import datetime

from cmbuyer.server.clock import to_wire
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import InvalidTransition, NotFound, refusal
from cmbuyer.server.domain.states import TaskState
from cmbuyer.server.domain.task_fields import TaskFields
from cmbuyer.server.store import tasks as task_store
from cmbuyer.server.tx import audit as audit_tx
from cmbuyer.server.tx.common import Actor, load


@dataclass(frozen=True)
class EditResult:
    """The edited task's id, its (unchanged) state, its new version and the fields that changed."""

    task_id: str
    state: str
    version: int
    changed: tuple[str, ...]


def edit_draft(
    conn: sqlite3.Connection,
    task_id: str,
    expected_version: int,
    fields: TaskFields,
    actor: Actor,
    now: datetime,
    request_id: str | None = None,
) -> EditResult:
    """Overwrite the draft's fields with ``fields`` (see the module docstring). An edit that changes nothing
    still bumps the version and is audited (the person pressed save; the row says nothing changed).
    Raises NotFound, Conflict(``version_conflict``), InvalidTransition(``invalid_state``)."""
    task = load(conn, task_store.get, task_id, NotFound().because("task"))
    if task.version != expected_version:
        raise refusal(Code.VERSION_CONFLICT).because("task_changed_pick")
    if task.state != TaskState.DRAFT:
        raise InvalidTransition().because("edit_not_draft")
    new = asdict(fields)
    old = {name: getattr(task, name) for name in new}
    changed = tuple(name for name in new if new[name] != old[name])
    at = to_wire(now)
    if not task_store.update_draft_fields(
        conn, task.id, expected_version=expected_version, draft_state=TaskState.DRAFT, values=new, at=at
    ):
        raise refusal(Code.VERSION_CONFLICT).because("task_changed_pick")
    audit_tx.record(
        conn,
        actor,
        "task.edit",
        "task",
        task.id,
        at=at,
        request_id=request_id,
        detail={
            "task_version": task.version + 1,
            "changed": list(changed),
            "old": {name: old[name] for name in changed},
            "new": {name: new[name] for name in changed},
        },
    )
    return EditResult(task.id, task.state, task.version + 1, changed)
