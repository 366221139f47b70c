"""``GET /held`` (恢复后待核对: the tasks a restore held) and ``POST /held/release`` (放行, in bulk).

After ``cmbuyer-server restore`` every unsettled task is HELD and no phone can take it. A person checks each
against the phones' journals (did this phone tap 提交订单 for it after the last replicated write?), ticks the
ones checked and releases them together. The release of each task is its own transaction
(``admin_actions.release_held``); a task that changed meanwhile is reported, the others still go through.
The form needs an explicit confirmation (``confirm=checked``) besides CSRF."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import datetime
from typing import Any

from aiohttp import web

from cmbuyer.schemas import is_uuid4
from cmbuyer.schemas.sku import options_from_text, options_label
from cmbuyer.server.display.labels import TASK_STATE_LABELS
from cmbuyer.server.domain.errors import DomainError, ValidationFailed
from cmbuyer.server.domain.states import TaskState
from cmbuyer.server.services import admin_actions
from cmbuyer.server.services.admin_actions import ActionResult
from cmbuyer.server.services.admin_sessions import AdminSession
from cmbuyer.server.services.restore_hold import HOLD_REASON
from cmbuyer.server.store import tasks as task_store
from cmbuyer.server.store.queries import admin as admin_queries
from cmbuyer.server.tx.common import Actor
from cmbuyer.server.web.admin.body import Body
from cmbuyer.server.web.admin.guards import action, page
from cmbuyer.server.web.admin.render import json_answer, now, redirect, render, wants_json
from cmbuyer.server.web.admin.session import actor, csrf_token_for
from cmbuyer.server.web.keys import DB

MAX_RELEASE = 500  # tasks one release may name


def _held_rows(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    rows = []
    for task in task_store.in_states(conn, [TaskState.HELD.value]):
        held_from = (task.state_reason or "").removeprefix(HOLD_REASON)
        rows.append(
            {
                "id": task.id,
                "title": task.title,
                "goods_id": task.goods_id,
                "sku": options_label(options_from_text(task.sku_options)),
                "quantity": task.quantity,
                "version": task.version,
                "held_from": held_from,
                "held_from_label": TASK_STATE_LABELS.get(TaskState(held_from), held_from)
                if held_from in TaskState.__members__
                else held_from,
                "fenced": admin_queries.submission_exists_for_task(conn, task.id),
                "updated_at": task.updated_at,
            }
        )
    return rows


@page
async def list_held(request: web.Request, session: AdminSession) -> web.StreamResponse:
    """``GET /held``: every HELD task, oldest first, with the state it was held from and whether a fence was
    replicated."""
    rows = await request.app[DB].read(_held_rows)
    if wants_json(request):
        return json_answer({"tasks": rows})
    notice = ""
    if request.query.get("released", "").isdigit():
        notice = f"已放行 {int(request.query['released'])} 个任务。"
        if request.query.get("stale", "").isdigit() and int(request.query["stale"]):
            notice += f" {int(request.query['stale'])} 个任务已变化，未放行，请刷新后重新核对。"
    return render(
        request,
        "held.html",
        {"session": session, "csrf_token": csrf_token_for(request, session), "tasks": rows, "notice": notice},
    )


def _pair(task_id: object, version: object) -> tuple[str, int]:
    if (
        not isinstance(task_id, str)
        or not is_uuid4(task_id)
        or not isinstance(version, int)
        or isinstance(version, bool)
        or version < 1
    ):
        raise ValidationFailed("tasks", "任务格式不正确")
    return task_id, version


def _selection(body: Body) -> tuple[list[tuple[str, int]], object]:
    """``(task id, version)`` pairs and the confirmation: form fields ``task=<id>:<version>`` (repeated) and
    ``confirm``, or JSON ``{"tasks": [{"task_id", "version"}], "confirm"}``. Raises ValidationFailed."""
    picked: list[tuple[str, int]] = []
    confirm: object
    if body.kind == "json":
        items, confirm = body.json.get("tasks"), body.json.get("confirm")
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise ValidationFailed("tasks", "请选择要放行的任务")
        picked = [_pair(item.get("task_id"), item.get("version")) for item in items]
    else:
        confirm = body.one("confirm")
        for value in body.form.get("task", []):
            task_id, _, version = value.partition(":")
            picked.append(_pair(task_id, int(version) if version.isascii() and version.isdigit() else 0))
    if not picked:
        raise ValidationFailed("tasks", "请选择要放行的任务")
    if len(picked) > MAX_RELEASE:
        raise ValidationFailed("tasks", f"一次最多放行 {MAX_RELEASE} 个任务")
    return picked, confirm


def _release_job(task_id: str, version: int, who: Actor, at: datetime) -> Callable[[sqlite3.Connection], ActionResult]:
    return lambda conn: admin_actions.release_held(conn, task_id, version, who, at)


@action
async def release(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /held/release``: release each selected HELD task (``confirm=checked`` required)."""
    picked, confirm = _selection(body)
    if confirm != "checked":
        raise ValidationFailed("confirm", "请先逐一核对手机日志，再勾选确认")
    at, who = now(request), actor(session)
    released: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    for task_id, version in picked:
        try:
            result = await request.app[DB].write(_release_job(task_id, version, who, at))
        except DomainError as exc:
            refused.append({"task_id": task_id, "error": exc.code})
            continue
        released.append({"task_id": result.task_id, "state": result.state, "version": result.version})
    if body.kind == "json" or wants_json(request):
        return json_answer({"released": released, "refused": refused})
    return redirect(f"/held?released={len(released)}&stale={len(refused)}")


def setup(app: web.Application) -> None:
    """Register the held-task routes."""
    app.router.add_get("/held", list_held, name="admin-held")
    app.router.add_post("/held/release", release, name="admin-held-release")
