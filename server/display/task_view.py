"""The task detail model shared by ``task show --json`` and the admin detail page/drawer (a display model:
it carries the task state's Chinese label, so it lives with the labels in the admin web layer)."""

from __future__ import annotations

import sqlite3
from dataclasses import asdict
from typing import Any

from cmbuyer.server.display.labels import TASK_STATE_LABELS
from cmbuyer.server.domain.states import TaskState
from cmbuyer.server.services.tasks import get_task
from cmbuyer.server.store import audit
from cmbuyer.server.store import authorizations as auth_store
from cmbuyer.server.store.queries import task_view as views


def task_detail(conn: sqlite3.Connection, task_id: str) -> dict[str, Any]:
    """``{"task", "authorization", "authorizations", "attempts", "submission", "events", "evidence",
    "audit"}`` for one task. ``authorization`` is the newest one (or None); NotFound when unknown."""
    task = get_task(conn, task_id)
    task_dict = asdict(task)
    task_dict.pop("create_hash", None)
    task_dict["state_label"] = TASK_STATE_LABELS[TaskState(task.state)]
    auths = [asdict(a) for a in auth_store.for_task(conn, task.id)]
    submissions = views.submissions_for_task(conn, task.id)
    return {
        "task": task_dict,
        "authorization": auths[-1] if auths else None,
        "authorizations": auths,
        "attempts": views.attempts_for_task(conn, task.id),
        "submission": submissions[-1] if submissions else None,
        "events": views.events_for_task(conn, task.id),
        "evidence": views.evidence_for_task(conn, task.id),
        "audit": [r.as_dict() for r in audit.for_subject(conn, "task", task.id)],
    }
