"""Tasks in and out on the admin pages (docs/admin.md "Import", "Export", "Pay list"):

- ``GET /tasks/import`` (upload form, template links), ``POST /tasks/import`` (multipart upload → preview
  of every row), ``POST /tasks/import/confirm`` (the previewed rows become DRAFT tasks),
  ``GET /tasks/import/template.xlsx`` · ``.csv``;
- ``GET /tasks/export`` (``format=xlsx|csv`` plus the task table's filters, or ``start_key``);
- ``GET /pay-list`` (every WAITING_PAYMENT order grouped by phone), ``GET /pay-list/export``;
- ``POST /tasks/bulk-mark-paid`` and ``POST /tasks/bulk-cancel`` (repeated ``task=<id>:<version>``).

The upload is the one admin body that is not a small form: it is read by the strict streaming multipart
reader (server/web/multipart.py) after the session and same-origin checks, capped at
``CMBUYER_IMPORT_MAX_BYTES``, with the CSRF token as the form's first field. Parsing runs in a worker
thread (``asyncio.to_thread``), so phones keep being served during a large import, one parse at a time
(a semaphore), so several uploads at once cost one file's worth of parsing memory, not several. The parsed preview is
kept in memory for :data:`PREVIEW_TTL_S` under a random token bound to the session; the confirm step checks
every row again inside its write transaction (services/task_import.py), so confirming twice, or after a
restart has dropped the preview (then: upload again), never creates a task twice.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sqlite3
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from aiohttp import web

from cmbuyer.schemas import is_uuid4
from cmbuyer.server.clock import from_wire
from cmbuyer.server.display.labels import reason_message
from cmbuyer.server.display.task_export import EXPORT_HEADER, EXPORT_MAX_ROWS, export_rows, sku_label
from cmbuyer.server.display.times import beijing_time
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import DomainError, ValidationFailed, refusal
from cmbuyer.server.domain.states import TaskState
from cmbuyer.server.domain.task_import import COLUMNS
from cmbuyer.server.services import admin_actions
from cmbuyer.server.services import task_import as import_service
from cmbuyer.server.services.admin_sessions import AdminSession
from cmbuyer.server.sheets.write import write_csv, write_xlsx
from cmbuyer.server.store import authorizations as auth_store
from cmbuyer.server.store.queries import admin as admin_queries
from cmbuyer.server.store.queries import task_lists
from cmbuyer.server.web import multipart
from cmbuyer.server.web.admin import csrf
from cmbuyer.server.web.admin.body import Body
from cmbuyer.server.web.admin.guards import action, page, same_origin
from cmbuyer.server.web.admin.render import json_answer, now, render, request_id, wants_json
from cmbuyer.server.web.admin.session import actor, csrf_token_for
from cmbuyer.server.web.admin.tasks import parse_filter  # the table's own filter rules
from cmbuyer.server.web.device_errors import DeviceHTTPError
from cmbuyer.server.web.keys import DB, SETTINGS

PREVIEW_TTL_S = 1800.0
PREVIEWS_KEPT = 32
UPLOAD_TYPES = frozenset(
    {
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "text/csv",
        "application/vnd.ms-excel",  # what Windows browsers call a .csv
        "application/octet-stream",
        "text/plain",
    }
)
XLSX_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
PAY_HEADER = (
    "设备",
    "订单编号",
    "标题",
    "商品 id",
    "规格选项",
    "数量",
    "金额",
    "下单时间（北京）",
    "已等待（分钟）",
    "任务 id",
)
TEMPLATE_EXAMPLE = (
    "纯棉短袖",
    "https://mobile.yangkeduo.com/goods.html?goods_id=937122477375",
    "颜色分类=黑色",
    "尺码=M",
    "",
    "",
    "",
    2,
    "30.00",
    "",
)


@dataclass
class _Kept:
    """One preview waiting for its confirm: whose it is, when it was made, what was parsed."""

    session_hash: bytes
    made: float
    parsed: import_service.Parsed


PREVIEWS = web.AppKey("cmbuyer_import_previews", OrderedDict)
PARSING = web.AppKey("cmbuyer_import_parsing", asyncio.Semaphore)


def _previews(app: web.Application) -> OrderedDict[str, _Kept]:
    kept: OrderedDict[str, _Kept] = app[PREVIEWS]
    cutoff = time.monotonic() - PREVIEW_TTL_S
    for token in [t for t, k in kept.items() if k.made < cutoff]:
        del kept[token]
    return kept


def _keep(app: web.Application, session: AdminSession, parsed: import_service.Parsed) -> str:
    kept = _previews(app)
    token = secrets.token_urlsafe(24)
    kept[token] = _Kept(session.id_hash, time.monotonic(), parsed)
    while len(kept) > PREVIEWS_KEPT:
        kept.popitem(last=False)
    return token


# -- import ------------------------------------------------------------------------------------------------


def _import_context(request: web.Request, session: AdminSession, **extra: Any) -> dict[str, Any]:
    settings = request.app[SETTINGS]
    return {
        "session": session,
        "csrf_token": csrf_token_for(request, session),
        "columns": COLUMNS,
        "max_rows": settings.import_max_rows,
        "max_kib": settings.import_max_bytes // 1024,
        "error": "",
        "preview": None,
        "token": "",
        "result": None,
        **extra,
    }


@page
async def import_page(request: web.Request, session: AdminSession) -> web.StreamResponse:
    """``GET /tasks/import``: the upload form, the template links and the accepted columns."""
    return render(request, "task_import.html", _import_context(request, session))


async def _read_upload(request: web.Request, session: AdminSession) -> bytes:
    """The uploaded file's bytes after same-origin, the multipart caps and the CSRF field; 4xx otherwise."""
    if not same_origin(request):
        raise refusal(Code.CROSS_SITE_REQUEST, "拒绝跨站请求")
    settings = request.app[SETTINGS]
    limits = multipart.Limits(
        max_total=settings.import_max_bytes + 64 * 1024, max_file_bytes=settings.import_max_bytes, utf8_headers=True
    )
    try:
        form = await multipart.read_form(
            request, fields=frozenset({"csrf_token"}), file_field="file", file_type=UPLOAD_TYPES, limits=limits
        )
    except DeviceHTTPError as exc:
        if exc.status == 413:
            raise refusal(
                Code.REQUEST_TOO_LARGE, f"文件超过 {settings.import_max_bytes // 1024} KiB，未导入任何任务"
            ) from None
        if exc.status == 415:
            raise refusal(Code.UNSUPPORTED_MEDIA_TYPE, "请用页面上的表单上传文件") from None
        raise refusal(Code.INVALID_REQUEST, "上传的表单无效，请重新选择文件后上传") from None
    supplied = [*request.headers.getall("X-CSRF-Token", []), form.fields.get("csrf_token", "")]
    supplied = [s for s in supplied if s]
    if len(supplied) != 1 or not csrf.check_session_token(settings, session.token, supplied[0]):
        raise refusal(Code.CSRF_FAILED, "表单已过期或来源无效，请刷新页面后重试")
    return form.file


@page
async def upload(request: web.Request, session: AdminSession) -> web.StreamResponse:
    """``POST /tasks/import`` (multipart: ``csrf_token``, ``file``): parse off the event loop, mark rows
    that already exist, show the preview (nothing is written yet). A refused file answers 400 with its
    reason on the page (JSON callers: the error body)."""
    data = await _read_upload(request, session)
    settings = request.app[SETTINGS]
    try:
        async with request.app[PARSING]:  # one parse at a time: memory stays one file's worth
            parsed = await asyncio.to_thread(import_service.parse, data, settings)
    except ValidationFailed as exc:
        if wants_json(request):
            raise
        context = _import_context(request, session, error=reason_message(exc))
        return render(request, "task_import.html", context, status=400)
    judged = await request.app[DB].read(lambda c: import_service.preview(c, parsed))
    token = _keep(request.app, session, judged)
    if wants_json(request):
        return json_answer(
            _rows_json(judged.rows) | {"preview_token": token, "unknown_columns": list(judged.unknown_columns)}
        )
    return render(request, "task_import.html", _import_context(request, session, preview=judged, token=token))


def _rows_json(rows: tuple[import_service.PreviewRow, ...]) -> dict[str, Any]:
    return {
        "rows": [{"line": r.line, "status": r.status, "message": r.message, "task_id": r.task_id} for r in rows],
        "counts": {s: sum(1 for r in rows if r.status == s) for s in ("ok", "exists", "error")},
    }


@action
async def confirm_import(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /tasks/import/confirm`` (``token`` of a preview): create the previewed rows still new in one
    transaction; shows what was created, what already existed and what was refused."""
    token = body.json.get("token") if body.kind == "json" else body.one("token", "")
    kept = _previews(request.app).pop(token, None) if isinstance(token, str) else None
    if kept is None or not secrets.compare_digest(kept.session_hash, session.id_hash):
        raise refusal(Code.INVALID_STATE, "预览已过期或已导入，请重新上传文件")
    at, who = now(request), actor(session)
    result = await request.app[DB].write(lambda c: import_service.import_rows(c, kept.parsed, who, at))
    if body.kind == "json" or wants_json(request):
        return json_answer(_rows_json(result.rows) | {"import_id": result.import_id})
    context = _import_context(request, session, result=result, preview=kept.parsed)
    return render(request, "task_import.html", context)


def _download(data: bytes, name: str, kind: str) -> web.Response:
    ctype = XLSX_TYPE if kind == "xlsx" else "text/csv; charset=utf-8"
    return web.Response(
        body=data,
        headers={
            "Content-Type": ctype,
            "Content-Disposition": f'attachment; filename="{name}.{kind}"',
            "Cache-Control": "no-store",
        },
    )


def _kind(request: web.Request) -> str:
    kind = request.query.get("format", "xlsx")
    if kind not in ("xlsx", "csv"):
        raise refusal(Code.INVALID_REQUEST, "format 只能是 xlsx 或 csv")
    return kind


def _writer(kind: str) -> Any:
    return write_xlsx if kind == "xlsx" else write_csv


@page
async def template(request: web.Request, session: AdminSession) -> web.StreamResponse:
    """``GET /tasks/import/template.{xlsx,csv}``: the header row (API field names) and one example row."""
    kind = request.match_info["kind"]
    header = [c.field for c in COLUMNS]
    data = _writer(kind)(header, [TEMPLATE_EXAMPLE])
    return _download(data, "cmbuyer-tasks-template", kind)


# -- export ----------------------------------------------------------------------------------------------------


@page
async def export_tasks(request: web.Request, session: AdminSession) -> web.StreamResponse:
    """``GET /tasks/export?format=xlsx|csv&…``: every task of the table's current filter (``q``, ``state``,
    ``from``/``to``; cursors ignored), or of one start batch (``start_key``), newest first; at most
    :data:`EXPORT_MAX_ROWS` (more → 400, narrow the filter)."""
    kind = _kind(request)
    start_key = request.query.get("start_key", "")
    if start_key and not is_uuid4(start_key):
        raise refusal(Code.INVALID_REQUEST, "start_key 无效")
    f = replace(parse_filter(request.query)[0], before=None, after=None)  # every page of the view

    def job(conn: sqlite3.Connection) -> list[list[Any]] | None:
        if start_key:
            stored = auth_store.start_request(conn, start_key)
            batch = json.loads(stored[1])["tasks"] if stored is not None else []
            rows = task_lists.tasks_by_id(conn, [t["task_id"] for t in batch])
        else:
            rows = admin_queries.task_page(conn, f, EXPORT_MAX_ROWS + 1)
        if len(rows) > EXPORT_MAX_ROWS:
            return None
        return export_rows(conn, rows)

    lines = await request.app[DB].read(job, snapshot=True)
    if lines is None:
        raise refusal(Code.INVALID_REQUEST, f"超过 {EXPORT_MAX_ROWS} 个任务，请缩小筛选范围后再导出")
    data = await asyncio.to_thread(_writer(kind), EXPORT_HEADER, lines)
    return _download(data, "cmbuyer-tasks", kind)


# -- pay list ------------------------------------------------------------------------------------------------


def pay_groups(rows: list[dict[str, Any]], at: datetime) -> list[dict[str, Any]]:
    """The pay list rows grouped by device (in the query's order), each row with ``waited_min``: whole minutes
    since the order was created (the fence time)."""
    groups: list[dict[str, Any]] = []
    for r in rows:
        r["waited_min"] = max(0, int((at - from_wire(r["fenced_at"])).total_seconds() // 60))
        if not groups or groups[-1]["device_id"] != r["device_id"]:
            groups.append({"device_id": r["device_id"], "device_name": r["device_name"], "rows": []})
        groups[-1]["rows"].append(r)
    return groups


NOTICES = {"bulk": "批量操作已完成，结果见下。"}


async def _pay_rows(request: web.Request) -> list[dict[str, Any]]:
    return await request.app[DB].read(lambda c: task_lists.pay_list(c, TaskState.WAITING_PAYMENT))


@page
async def pay_list(request: web.Request, session: AdminSession) -> web.StreamResponse:
    """``GET /pay-list``: every order waiting for payment, grouped by phone, oldest first per phone."""
    rows = await _pay_rows(request)
    return _render_pay_list(request, session, rows, outcome=None)


def _render_pay_list(
    request: web.Request,
    session: AdminSession,
    rows: list[dict[str, Any]],
    *,
    outcome: dict[str, Any] | None,
    status: int = 200,
) -> web.Response:
    return render(
        request,
        "pay_list.html",
        {
            "session": session,
            "csrf_token": csrf_token_for(request, session),
            "groups": pay_groups(rows, now(request)),
            "total": len(rows),
            "outcome": outcome,
        },
        status=status,
    )


@page
async def export_pay_list(request: web.Request, session: AdminSession) -> web.StreamResponse:
    """``GET /pay-list/export?format=xlsx|csv``: the pay list as a file, in the page's order."""
    kind = _kind(request)
    groups = pay_groups(await _pay_rows(request), now(request))
    lines = [
        [
            g["device_name"],
            r["order_sn"] or "",
            r["title"],
            r["goods_id"],
            sku_label(r["sku_options"]),
            r["quantity"],
            r["amount"],
            beijing_time(r["fenced_at"]),
            r["waited_min"],
            r["id"],
        ]
        for g in groups
        for r in g["rows"]
    ]
    return _download(_writer(kind)(PAY_HEADER, lines), "cmbuyer-pay-list", kind)


# -- bulk actions ---------------------------------------------------------------------------------------------


def _selected(body: Body) -> list[tuple[str, int]]:
    raw = body.json.get("tasks") if body.kind == "json" else body.form.get("task", [])
    items: list[tuple[str, int]] = []
    for value in raw if isinstance(raw, list) else []:
        if body.kind == "json":
            if not isinstance(value, dict) or set(value) != {"task_id", "expected_task_version"}:
                raise ValidationFailed("tasks", "").because("task_item")
            task_id, version = value["task_id"], value["expected_task_version"]
        else:
            task_id, _, text = str(value).partition(":")
            version = int(text) if text.isascii() and text.isdigit() and len(text) <= 10 else 0
        if not is_uuid4(task_id) or type(version) is not int or version < 1:
            raise ValidationFailed("tasks", "所选任务无效，请刷新页面")
        items.append((task_id, version))
    if not items or len(items) > 500:
        raise ValidationFailed("tasks", "请选择 1 到 500 个任务")
    if len({t for t, _ in items}) != len(items):
        raise ValidationFailed("tasks", "").because("task_repeated")
    return items


async def run_bulk(
    request: web.Request, session: AdminSession, kind: str, items: list[tuple[str, int]]
) -> dict[str, Any]:
    """Run the single-task use-case ``kind`` (``mark_paid`` · ``cancel``) for every ``(task_id, version)``,
    each in its own write job — the writer commits them together, and a refused one rolls back alone (db.py) —
    so one stale version is refused and named while the others go through. Returns ``{"done": [...],
    "refused": [{"task_id","code","message"}]}``."""
    at, who, rid = now(request), actor(session), request_id(request)
    db = request.app[DB]

    async def one(task_id: str, version: int) -> Any:
        if kind == "mark_paid":
            return await db.write(lambda c: admin_actions.mark_paid(c, task_id, version, who, at, rid))
        return await db.write(lambda c: admin_actions.cancel(c, task_id, version, None, who, at, rid))

    answers = await asyncio.gather(*(one(t, v) for t, v in items), return_exceptions=True)
    done: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    for (task_id, _), answer in zip(items, answers, strict=True):
        if isinstance(answer, DomainError):
            refused.append({"task_id": task_id, "code": answer.code, "message": reason_message(answer)})
        elif isinstance(answer, BaseException):
            raise answer
        else:
            done.append({"task_id": task_id, "state": answer.state, "task_version": answer.version})
    return {"done": done, "refused": refused}


async def _bulk(request: web.Request, session: AdminSession, body: Body, kind: str) -> web.StreamResponse:
    try:
        items = _selected(body)
    except DomainError as exc:
        if body.kind == "json" or wants_json(request):
            raise
        return await _bulk_page(request, session, kind, None, error=reason_message(exc), status=exc.status)
    outcome = await run_bulk(request, session, kind, items)
    if body.kind == "json" or wants_json(request):
        return json_answer(outcome)
    titles = await request.app[DB].read(lambda c: task_lists.tasks_by_id(c, [t for t, _ in items]))
    names = {t["id"]: t["title"] for t in titles}
    for entry in (*outcome["done"], *outcome["refused"]):
        entry["title"] = names.get(entry["task_id"], "")
    return await _bulk_page(request, session, kind, outcome)


async def _bulk_page(
    request: web.Request,
    session: AdminSession,
    kind: str,
    outcome: dict[str, Any] | None,
    *,
    error: str = "",
    status: int = 200,
) -> web.Response:
    summary = None if outcome is None else {"kind": kind, **outcome}
    if kind == "mark_paid":
        rows = await _pay_rows(request)
        response = _render_pay_list(request, session, rows, outcome=summary, status=status)
    else:
        response = render(
            request,
            "bulk_result.html",
            {"session": session, "csrf_token": csrf_token_for(request, session), "outcome": summary, "error": error},
            status=status,
        )
    return response


@action
async def bulk_mark_paid(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /tasks/bulk-mark-paid``: repeated ``task=<id>:<expected_task_version>`` (JSON: ``{"tasks":
    [{task_id, expected_task_version}]}``); WAITING_PAYMENT → PAID per task, same rules and audit as the
    single mark-paid. Answers which were marked and which were refused (with the reason)."""
    return await _bulk(request, session, body, "mark_paid")


@action
async def bulk_cancel(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /tasks/bulk-cancel``: like bulk mark-paid, for DRAFT/PENDING (and the other cancellable) tasks;
    the same rules and audit as the single cancel."""
    return await _bulk(request, session, body, "cancel")


def setup(app: web.Application) -> None:
    """Register the import, export, pay-list and bulk routes."""
    app[PREVIEWS] = OrderedDict()
    app[PARSING] = asyncio.Semaphore(1)
    app.router.add_get("/tasks/import", import_page, name="admin-tasks-load-page")
    app.router.add_post("/tasks/import", upload, name="admin-tasks-upload")
    app.router.add_post("/tasks/import/confirm", confirm_import, name="admin-tasks-upload-confirm")
    app.router.add_get(r"/tasks/import/template.{kind:xlsx|csv}", template, name="admin-tasks-template")
    app.router.add_get("/tasks/export", export_tasks, name="admin-task-export")
    app.router.add_post("/tasks/bulk-mark-paid", bulk_mark_paid, name="admin-bulk-mark-paid")
    app.router.add_post("/tasks/bulk-cancel", bulk_cancel, name="admin-bulk-cancel")
    app.router.add_get("/pay-list", pay_list, name="admin-pay-list")
    app.router.add_get("/pay-list/export", export_pay_list, name="admin-pay-list-export")
