"""Task use-cases shared by the admin pages and the CLI: create (DRAFT), start purchases, read."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from cmbuyer.schemas import is_uuid4
from cmbuyer.server.clock import to_wire
from cmbuyer.server.config import Settings
from cmbuyer.server.domain.claims import snapshot_of
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import NotFound, ValidationFailed, refusal
from cmbuyer.server.domain.states import (
    FENCED_TASK_STATES,
    TASK_TRANSITIONS,
    AuthorizationState,
    TaskState,
    transition,
)
from cmbuyer.server.domain.task_fields import TaskFields, parse_task_fields
from cmbuyer.server.store import authorizations as auth_store
from cmbuyer.server.store import tasks as task_store
from cmbuyer.server.tx import audit as audit_tx
from cmbuyer.server.tx import drafts
from cmbuyer.server.tx.common import Actor, canonical_json, load, new_id, payload_hash
from cmbuyer.server.tx.moves import set_task_state


@dataclass(frozen=True)
class NewTask(TaskFields):
    """Validated input of ``POST /tasks`` (docs/api.md "Conventions"): the task fields (canonical URL, goods
    id, NFKC SKU, canonical money) and the request's ``create_key``."""

    create_key: str


def validate_new_task(raw: dict[str, Any], settings: Settings) -> NewTask:
    """Validate a create request (JSON or form, already decoded to ``str``/``int``).

    Raises ValidationFailed naming the first bad field (docs/admin.md "Routes", `POST /tasks`; docs/api.md
    "Conventions").
    """
    create_key = raw.get("create_key")
    if not is_uuid4(create_key):
        raise ValidationFailed("create_key", "").because("create_key")
    fields = parse_task_fields(raw, max_quantity=settings.max_quantity, max_total_price=settings.max_total_price)
    return NewTask(create_key=str(create_key), **asdict(fields))


def create_task(conn: sqlite3.Connection, new: NewTask, actor: Actor, now: datetime) -> tuple[task_store.Task, bool]:
    """Create a DRAFT task; returns ``(task, created)`` (:func:`cmbuyer.server.tx.drafts.create_draft`).

    ``create_key`` idempotency: the same key with the same fields returns the existing task
    (``created`` False); with different fields raises Conflict ``idempotency_conflict``.
    """
    fields = asdict(new)
    key = fields.pop("create_key")
    return drafts.create_draft(conn, key, TaskFields(**fields), actor, now)


def parse_start_request(raw: dict[str, Any]) -> tuple[str, list[tuple[str, int]]]:
    """Validate a start-purchases body: ``start_key`` and a non-empty list of distinct
    ``(task_id, expected_task_version)``. Raises ValidationFailed."""
    start_key = raw.get("start_key")
    if not is_uuid4(start_key):
        raise ValidationFailed("start_key", "").because("start_key")
    items = raw.get("tasks")
    if not isinstance(items, list) or not items or len(items) > 500:
        raise ValidationFailed("tasks", "").because("start_count")
    parsed: list[tuple[str, int]] = []
    for item in items:
        if not isinstance(item, dict) or set(item) != {"task_id", "expected_task_version"}:
            raise ValidationFailed("tasks", "").because("task_item")
        tid, ver = item["task_id"], item["expected_task_version"]
        if not is_uuid4(tid) or type(ver) is not int or ver < 1:
            raise ValidationFailed("tasks", "").because("task_item_value")
        parsed.append((tid, ver))
    if len({t for t, _ in parsed}) != len(parsed):
        raise ValidationFailed("tasks", "").because("task_repeated")
    return str(start_key), parsed


def start_purchases(
    conn: sqlite3.Connection,
    start_key: str,
    items: list[tuple[str, int]],
    actor: Actor,
    now: datetime,
    settings: Settings,
) -> dict[str, Any]:
    """`POST /tasks/start-purchases` (docs/admin.md "Routes"): all-or-nothing batch DRAFT → PENDING with one new
    ACTIVE authorization per task (snapshot of the task fields, expiry = now + authorization TTL).

    Returns the response body (``payment_automated`` is always False). Same ``start_key`` + same set
    replays the stored body; a different set → Conflict ``idempotency_conflict``; a task not DRAFT
    (or already fenced) → Conflict ``version_conflict``/``submission_fenced``; unknown → NotFound.
    """
    request = sorted([t, v] for t, v in items)
    digest = payload_hash(request)
    stored = auth_store.start_request(conn, start_key)
    if stored is not None:
        if stored[0] != digest:
            raise refusal(Code.IDEMPOTENCY_CONFLICT).because("start_key")
        replay: dict[str, Any] = json.loads(stored[1])
        return replay
    at = to_wire(now)
    expires = to_wire(now + timedelta(seconds=settings.authorization_ttl))
    out: list[dict[str, Any]] = []
    for task_id, expected in items:
        task = task_store.get(conn, task_id)
        if task is None:
            raise NotFound().because("task")
        if task.version != expected:
            raise refusal(Code.VERSION_CONFLICT).because("task_changed_pick")
        if task.state != TaskState.DRAFT:
            if task.state in FENCED_TASK_STATES:
                raise refusal(Code.SUBMISSION_FENCED).because("start")
            raise refusal(Code.VERSION_CONFLICT).because("start_not_draft")
        new_state = transition(TASK_TRANSITIONS, TaskState(task.state), "start_purchase")
        authorization = auth_store.Authorization(
            id=new_id(),
            task_id=task.id,
            task_version=task.version + 1,
            **snapshot_of(task),
            state=AuthorizationState.ACTIVE,
            start_key=start_key,
            created_by=f"{actor.kind}:{actor.id}",
            created_at=at,
            expires_at=expires,
            closed_at=None,
            close_reason=None,
        )
        if not set_task_state(conn, task, new_state, at=at):
            raise refusal(Code.VERSION_CONFLICT).because("task_changed_pick")
        auth_store.insert(conn, authorization)
        audit_tx.record(
            conn,
            actor,
            "task.start_purchase",
            "task",
            task.id,
            at=at,
            request_id=start_key,
            detail={"authorization_id": authorization.id, "expires_at": expires, "task_version": task.version + 1},
        )
        out.append({"task_id": task.id, "task_version": task.version + 1, "authorization_id": authorization.id})
    body = {"start_key": start_key, "authorized_count": len(out), "tasks": out, "payment_automated": False}
    auth_store.record_start_request(conn, start_key, f"{actor.kind}:{actor.id}", digest, canonical_json(body), at)
    return body


def get_task(conn: sqlite3.Connection, task_id: str) -> task_store.Task:
    """The task or NotFound."""
    return load(conn, task_store.get, task_id, NotFound().because("task"))
