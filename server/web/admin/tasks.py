"""Task routes of the admin pages (docs/admin.md "Routes"):

``GET /tasks`` (table + filters + keyset pages; ``X-CMBuyer-View: rows`` answers just the rows for the
live view), ``POST /tasks`` (create DRAFT, form or JSON), ``POST /tasks/start-purchases``,
``GET /tasks/{id}`` (full page, or the drawer fragment under the rules of :func:`fragment_allowed`),
``POST /tasks/{id}/reset-to-draft`` · ``/cancel`` · ``/mark-paid`` and
``POST /order-submissions/{sid}/reconcile``.

Form submissions answer 303 to a page (POST/redirect/GET) on success and re-render the page with a
Chinese message and the real 4xx status on refusal; JSON callers get the error bodies of docs/admin.md
"Error codes of the admin routes".
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from cmbuyer.schemas import SchemaError, is_utc_time, is_uuid4, validate
from cmbuyer.schemas.sku import MAX_OPTIONS
from cmbuyer.server.clock import from_wire
from cmbuyer.server.display import task_view
from cmbuyer.server.display.labels import TASK_STATE_LABELS, reason_message
from cmbuyer.server.display.times import BEIJING
from cmbuyer.server.domain import task_fields
from cmbuyer.server.domain.claims import ready_for_claims
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import DomainError, ValidationFailed, refusal
from cmbuyer.server.domain.states import TASK_TRANSITIONS, DeviceState, TaskState
from cmbuyer.server.domain.task_fields import person_money
from cmbuyer.server.services import admin_actions, task_edit
from cmbuyer.server.services import tasks as task_service
from cmbuyer.server.services.admin_sessions import AdminSession
from cmbuyer.server.store.queries import admin as admin_queries
from cmbuyer.server.store.queries import supervision as supervision_queries
from cmbuyer.server.store.queries import task_lists
from cmbuyer.server.store.queries.admin import SHORT_KEYWORD_WINDOW, TaskFilter
from cmbuyer.server.tx.common import new_id
from cmbuyer.server.web.admin import supervision_view
from cmbuyer.server.web.admin.body import Body
from cmbuyer.server.web.admin.guards import action, page, same_origin
from cmbuyer.server.web.admin.render import (
    VIEW_HEADER,
    domain_refusal,
    json_answer,
    now,
    redirect,
    render,
    request_id,
    wants_json,
)
from cmbuyer.server.web.admin.session import actor, csrf_token_for
from cmbuyer.server.web.keys import DB, SETTINGS

PAGE_SIZE = 50
KEYWORD_MAX = 100
START_BUTTON = "开始采购（只创建待付款订单）"
_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})", re.ASCII)
_VERSION = re.compile(r"[1-9][0-9]{0,9}", re.ASCII)
_QUANTITY = re.compile(r"[0-9]{1,6}", re.ASCII)
NOTICES = {
    "created": "已创建草稿任务。",
    "started": "已开始采购：采购工具只会为每个任务创建一笔待付款订单，不会付款。",
    "reset": "任务已重置为草稿，旧授权已关闭。",
    "cancelled": "任务已取消。",
    "paid": "已标记为已付款。",
    "edited": "草稿已修改（版本已更新）。",
    "reconciled": "已记录人工核对结果。",
    # supervised first orders (web/admin/supervision.py)
    "approved": "已批准：设备将按原流程申请提交围栏并创建待付款订单。",
    "rejected": "已驳回：设备会在提交前停止这次下单。",
    "already_approved": "这个确认请求此前已批准，未做更改。",
    "already_rejected": "这个确认请求此前已驳回，未做更改。",
    "verdict_right": "已记录：订单核对无误。",
    "verdict_wrong": "已记录：订单有误。这台设备对这个识别包已暂停领取任务。",
}
STATE_GROUPS = {"attention": ("RECONCILIATION_REQUIRED", "FAILED", "EXPIRED")}
WAITING_CHOICE = "waiting_approval"  # the 等待人工确认 filter: not a task state, a WAITING approval


# -- view-header rules --------------------------------------------------------------------------------

_QVALUE = re.compile(r"[ \t]*q[ \t]*=[ \t]*(0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?)[ \t]*", re.ASCII | re.IGNORECASE)


def _quality(params: str) -> float | None:
    """The RFC 9110 §12.4.2 weight of one media range's parameters: 1.0 without ``q``; None when a
    ``q`` is malformed (``q=.``, ``q=1e9``, ``q=2``, repeated) — such a range is ignored, never a 500."""
    weights = [p for p in params.split(";") if p.partition("=")[0].strip().lower() == "q"]
    if not weights:
        return 1.0
    if len(weights) != 1:
        return None
    m = _QVALUE.fullmatch(weights[0])
    return float(m.group(1)) if m else None


def _accepts_html(request: web.Request) -> bool:
    """True when some ``Accept`` range names ``text/html`` with a well-formed weight above 0."""
    for value in request.headers.getall("Accept", []):
        for part in value.split(","):
            media, _, params = part.partition(";")
            if media.strip().lower() == "text/html":
                q = _quality(params)
                if q is not None and q > 0:
                    return True
    return False


def fragment_allowed(request: web.Request, expected: str) -> bool:
    """Decide full page (False) or fragment (True) for ``X-CMBuyer-View`` (docs/admin.md "Detail page and drawer").

    No header or an empty one → full page. The expected view → fragment, but only for a same-origin
    request (:func:`same_origin`) that accepts ``text/html``; anything else raises 400 (another view
    value), 403 (cross-site) or 406 (does not accept HTML).
    """
    values = request.headers.getall(VIEW_HEADER, [])
    if not values or values == [""]:
        return False
    if len(values) != 1 or values[0] != expected:
        raise refusal(Code.INVALID_VIEW, "不支持的视图")
    if not same_origin(request) or request.headers.get("Sec-Fetch-Mode") == "navigate":
        raise refusal(Code.CROSS_SITE_REQUEST, "拒绝跨站请求")
    if not _accepts_html(request):
        raise refusal(Code.NOT_ACCEPTABLE, "片段只以 HTML 提供")
    return True


_VARY = {"Vary": "X-CMBuyer-View, Accept, Sec-Fetch-Site, Origin, Cookie"}


# -- list -----------------------------------------------------------------------------------------------


def _day_start_utc(text: str) -> str | None:
    m = _DATE.fullmatch(text)
    if m is None:
        return None
    try:
        day = datetime(int(m.group(1)), int(m.group(2)), int(m.group(3)), tzinfo=BEIJING)
    except ValueError:
        return None
    return day.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_filter(query: Any) -> tuple[TaskFilter, dict[str, Any], list[str]]:
    """Query string → ``(TaskFilter, values to refill the form, problems)``; bad values are ignored
    with a message rather than failing the page."""
    problems: list[str] = []
    keyword = (query.get("q") or "").strip()[:KEYWORD_MAX]
    kind = ""
    if keyword:
        if is_uuid4(keyword):
            kind = "id"
        elif keyword.isascii() and keyword.isdigit():
            kind = "digits"
        elif len(keyword) >= 3:
            kind = "text"
        else:
            kind = "short"
    phone = (query.get("phone") or "").strip()[:64]
    states: list[str] = []
    waiting_approval = False
    for raw in query.getall("state", []):
        if raw == WAITING_CHOICE:
            waiting_approval = True
        elif raw in STATE_GROUPS:
            states.extend(STATE_GROUPS[raw])
        elif raw in TaskState.__members__:
            states.append(raw)
        elif raw:
            problems.append("未知状态已忽略")
    date_from, date_to = query.get("from", ""), query.get("to", "")
    created_from = _day_start_utc(date_from) if date_from else None
    created_to = None
    if date_to:
        start = _day_start_utc(date_to)
        if start is not None:
            created_to = (datetime.strptime(start, "%Y-%m-%dT%H:%M:%S.%fZ") + timedelta(days=1)).strftime(
                "%Y-%m-%dT%H:%M:%S.%fZ"
            )
    if (date_from and created_from is None) or (date_to and created_to is None):
        problems.append("日期格式应为 YYYY-MM-DD，已忽略")
    before = after = None
    if is_utc_time(query.get("before_at", "")) and is_uuid4(query.get("before_id", "")):
        before = (query["before_at"], query["before_id"])
    elif is_utc_time(query.get("after_at", "")) and is_uuid4(query.get("after_id", "")):
        after = (query["after_at"], query["after_id"])
    f = TaskFilter(
        states=tuple(dict.fromkeys(states)),
        keyword=keyword,
        keyword_kind=kind,
        created_from=created_from,
        created_to=created_to,
        before=before,
        after=after,
        waiting_approval=waiting_approval,
        phone=phone,
    )
    form = {
        "q": keyword,
        "state": list(query.getall("state", [])),
        "from": date_from if created_from else "",
        "to": date_to if created_to else "",
        "phone": phone,
    }
    return f, form, problems


def _list_job(f: TaskFilter, *, counts: bool = True) -> Any:
    def job(conn: sqlite3.Connection) -> dict[str, Any]:
        rows = admin_queries.task_page(conn, f, PAGE_SIZE + 1)
        more = len(rows) > PAGE_SIZE
        if f.after is not None:
            rows = rows[-PAGE_SIZE:] if more else rows
        else:
            rows = rows[:PAGE_SIZE]
        ids = [r["id"] for r in rows]
        return {
            "rows": rows,
            "more": more,
            "events": admin_queries.latest_events(conn, ids),
            "claims": admin_queries.open_attempts(conn, ids),
            "waiting": supervision_queries.waiting_task_ids(conn, ids),
            "waiting_summary": supervision_queries.waiting_summary(conn),
            # the live view's rows fragment does not show the counts: skip the query every 3 s
            "counts": task_lists.state_counts(conn) if counts else {},
        }

    return job


def _page_links(form: dict[str, Any], f: TaskFilter, data: dict[str, Any]) -> dict[str, str | None]:
    base = [("q", form["q"])] if form["q"] else []
    base += [("state", s) for s in form["state"]]
    base += [(k, form[k]) for k in ("from", "to", "phone") if form[k]]
    rows = data["rows"]
    has_prev = (f.after is not None and data["more"]) or f.before is not None
    has_next = (f.after is None and data["more"]) or f.after is not None
    prev_link = next_link = None
    if rows and has_prev:
        prev_link = "/tasks?" + urlencode([*base, ("after_at", rows[0]["created_at"]), ("after_id", rows[0]["id"])])
    if rows and has_next:
        next_link = "/tasks?" + urlencode([*base, ("before_at", rows[-1]["created_at"]), ("before_id", rows[-1]["id"])])
    first_link = "/tasks?" + urlencode(base) if (f.before or f.after) else None
    return {"prev": prev_link, "next": next_link, "first": first_link}


def countdown(deadline: str | None, at: datetime) -> str:
    """``m:ss`` until ``deadline`` (wire time) from ``at``; ``0:00`` once passed, "" without a deadline."""
    if not deadline:
        return ""
    left = max(0, int((from_wire(deadline) - at).total_seconds()))
    return f"{left // 60}:{left % 60:02d}"


def _state_choices() -> list[tuple[str, str]]:
    return [
        ("attention", "需要人工处理"),
        (WAITING_CHOICE, "等待人工确认"),
        *((s.value, TASK_STATE_LABELS[s]) for s in TaskState),
    ]


async def _render_list(
    request: web.Request,
    session: AdminSession,
    *,
    status: int = 200,
    error: str = "",
    create_values: dict[str, Any] | None = None,
    only_rows: bool = False,
) -> web.Response:
    f, form, problems = parse_filter(request.query)
    data = await request.app[DB].read(_list_job(f, counts=not only_rows))
    settings = request.app[SETTINGS]
    context = {
        "session": session,
        "csrf_token": csrf_token_for(request, session),
        "rows": data["rows"],
        "events": data["events"],
        "claims": data["claims"],
        "waiting": data["waiting"],
        "waiting_count": data["waiting_summary"][0],
        "waiting_first_deadline": data["waiting_summary"][1],
        "countdown": countdown,
        "counts": [(s.value, TASK_STATE_LABELS[s], data["counts"].get(s.value, 0)) for s in TaskState],
        "count_total": sum(data["counts"].values()),
        "export_query": urlencode([(k, v) for k, v in request.query.items() if k in ("q", "state", "from", "to")]),
        "labels": {s.value: TASK_STATE_LABELS[s] for s in TaskState},
        "links": _page_links(form, f, data),
        "form": form,
        "state_choices": _state_choices(),
        "problems": problems,
        "error": error,
        "notice": NOTICES.get(request.query.get("notice", ""), ""),
        "notice_count": request.query.get("count", "") if _VERSION.fullmatch(request.query.get("count", "")) else "",
        "batch_key": request.query.get("start_key", "") if is_uuid4(request.query.get("start_key", "")) else "",
        "short_keyword": f.keyword_kind == "short",
        "short_window": SHORT_KEYWORD_WINDOW,
        "create": create_values or {"create_key": new_id(), "quantity": "1"},
        "start_key": new_id(),
        "start_button": START_BUTTON,
        "max_quantity": settings.max_quantity,
        "max_total_price": str(settings.max_total_price),
        "now": now(request),
        "only_rows": only_rows,
        "live_url": "/tasks" + (f"?{request.query_string}" if request.method == "GET" and request.query_string else ""),
    }
    if only_rows:
        return render(request, "_task_rows.html", context, headers=_VARY)
    return render(request, "tasks.html", context, status=status, headers=_VARY)


@page
async def list_tasks(request: web.Request, session: AdminSession) -> web.StreamResponse:
    """``GET /tasks``: the task table (filters ``q``, ``state`` (repeatable), ``from``/``to`` dates in
    Beijing time; keyset cursors ``before_at``/``before_id`` and ``after_at``/``after_id``)."""
    only_rows = fragment_allowed(request, "rows")
    return await _render_list(request, session, only_rows=only_rows)


# -- create ----------------------------------------------------------------------------------------------


def form_options(body: Body) -> list[list[str]] | None:
    """The option rows of the form (``option_dim_N``/``option_value_N``, N = 1..3; docs/admin.md "The task
    form"): the filled rows in order as ``[dimension, value]`` pairs; a row with only one side filled is kept
    so the validation names it. None when no option field was sent at all (a client of the colour/size form)."""
    names = [f"option_{side}_{n}" for n in range(1, MAX_OPTIONS + 1) for side in ("dim", "value")]
    if not any(body.one(k) is not None for k in names):
        return None
    rows = [
        [body.one(f"option_dim_{n}", "") or "", body.one(f"option_value_{n}", "") or ""]
        for n in range(1, MAX_OPTIONS + 1)
    ]
    return [r for r in rows if r[0].strip() or r[1].strip()]


def _form_task(body: Body) -> dict[str, Any]:
    raw: dict[str, Any] = {
        k: body.one(k, "") for k in ("create_key", "title", "product_url", "sku_color", "sku_size", "max_total_price")
    }
    quantity = (body.one("quantity", "") or "").strip()
    raw["quantity"] = int(quantity) if _QUANTITY.fullmatch(quantity) else quantity
    options = form_options(body)
    if options is not None:
        raw["sku_options"], raw["sku_color"], raw["sku_size"] = options, None, None
        return raw
    # An empty size field means "this goods has no size" (one-dimension goods, docs/admin.md).
    if not (raw["sku_size"] or "").strip():
        raw["sku_size"] = None
    if not (raw["sku_color"] or "").strip():
        raw["sku_color"] = None
    return raw


FIELD_LABELS = {
    "create_key": "表单",
    "title": "标题",
    "product_url": "商品链接",
    "sku_options": "规格选项",
    "sku_color": "颜色",
    "sku_size": "尺码",
    "quantity": "数量",
    "max_total_price": "最高总价",
}


@action
async def create_task(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /tasks``: create a DRAFT (docs/admin.md "Routes"). JSON: 201 ``{"task_id","task_version","state"}``
    (200 on a ``create_key`` replay); form: 303 to the list. 400 ``invalid_request`` names the field;
    409 ``idempotency_conflict`` for a reused key with other fields."""
    settings = request.app[SETTINGS]
    raw = body.json if body.kind == "json" else _form_task(body)
    try:
        if body.kind == "json":
            try:
                validate("task_create.request", raw)
            except SchemaError as exc:
                field = exc.path.split("/")[0] or "body"
                raise ValidationFailed(field, f"{FIELD_LABELS.get(field, field)} 无效") from None
        else:
            raw = {**raw, "max_total_price": person_money("max_total_price", raw["max_total_price"])}
        new = task_service.validate_new_task(raw, settings)
        at, who = now(request), actor(session)
        task, created = await request.app[DB].write(lambda c: task_service.create_task(c, new, who, at))
    except DomainError as exc:
        if body.kind == "json":
            raise
        field = getattr(exc, "field", "")
        message = (
            f"{FIELD_LABELS.get(field, '')}：{reason_message(exc)}" if field in FIELD_LABELS else reason_message(exc)
        )
        values = {k: "" if raw.get(k) is None else raw[k] for k in FIELD_LABELS}
        if exc.code == Code.IDEMPOTENCY_CONFLICT:
            values["create_key"] = new_id()
        return await _render_list(request, session, status=exc.status, error=message, create_values=values)
    if body.kind == "json":
        return json_answer(
            {"task_id": task.id, "task_version": task.version, "state": task.state},
            status=201 if created else 200,
        )
    return redirect("/tasks?notice=created")


# -- start purchases --------------------------------------------------------------------------------------


@action
async def start_purchases(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /tasks/start-purchases`` (docs/admin.md "Routes"): JSON body per ``start_purchases.request``; the form
    sends ``start_key`` and repeated ``task`` = ``<task_id>:<expected_task_version>``. All-or-nothing;
    the JSON answer always carries ``payment_automated: false``."""
    settings = request.app[SETTINGS]
    try:
        if body.kind == "json":
            try:
                validate("start_purchases.request", body.json)
            except SchemaError:
                raise ValidationFailed("tasks", "请求格式错误") from None
            raw = body.json
        else:
            items = []
            for value in body.form.get("task", []):
                task_id, _, version = value.partition(":")
                if not is_uuid4(task_id) or not _VERSION.fullmatch(version):
                    raise ValidationFailed("tasks", "所选任务无效，请刷新页面")
                items.append({"task_id": task_id, "expected_task_version": int(version)})
            if not items:
                raise ValidationFailed("tasks", "请至少选择一个草稿任务")
            raw = {"start_key": body.one("start_key", ""), "tasks": items}
        start_key, parsed = task_service.parse_start_request(raw)
        if body.kind == "form" and body.one("confirm") != "yes":
            return await _confirm_start(request, session, start_key, parsed)
        at, who = now(request), actor(session)
        result = await request.app[DB].write(
            lambda c: task_service.start_purchases(c, start_key, parsed, who, at, settings)
        )
    except DomainError as exc:
        if body.kind == "json":
            raise
        return await _render_list(request, session, status=exc.status, error=reason_message(exc))
    if body.kind == "json":
        return json_answer(result)
    return redirect(f"/tasks?notice=started&count={int(result['authorized_count'])}&start_key={start_key}")


def start_summary(
    conn: sqlite3.Connection, items: list[tuple[str, int]], at: datetime, settings: Any
) -> dict[str, Any]:
    """What a start would do: the selected tasks still DRAFT at the selected version
    (``ready_tasks``; the others are named in ``stale``), the sum of their max totals, and the phones READY
    now by the claim gate's own rule (:func:`cmbuyer.server.domain.claims.ready_for_claims`)."""
    rows = {r["id"]: r for r in task_lists.tasks_by_id(conn, [t for t, _ in items])}
    ready_tasks, stale = [], []
    for task_id, version in items:
        row = rows.get(task_id)
        if row is not None and row["version"] == version and row["state"] == TaskState.DRAFT:
            ready_tasks.append(row)
        else:
            stale.append(row["title"] if row else task_id)
    total = sum((Decimal(r["max_total_price"]) for r in ready_tasks), Decimal("0.00"))
    devices = task_lists.devices_for_start(conn, DeviceState.ACTIVE)
    ready = [
        d["name"]
        for d in devices
        if ready_for_claims(
            SimpleNamespace(**d),
            at,
            heartbeat_interval=settings.heartbeat_interval,
            heartbeat_stale_factor=settings.heartbeat_stale_factor,
            allowed_app_versions=settings.allowed_app_versions,
        )
    ]
    return {
        "tasks": ready_tasks,
        "stale": stale,
        "total": f"{total.quantize(Decimal('0.01'))}",
        "ready_phones": ready,
        "devices": len(devices),
    }


async def _confirm_start(
    request: web.Request, session: AdminSession, start_key: str, items: list[tuple[str, int]]
) -> web.Response:
    """The confirmation page of a start from the task table: counts, sum, READY phones, then the real start."""
    at, settings = now(request), request.app[SETTINGS]
    summary = await request.app[DB].read(lambda c: start_summary(c, items, at, settings))
    context = {
        "session": session,
        "csrf_token": csrf_token_for(request, session),
        "start_key": start_key,
        **summary,
    }
    return render(request, "start_confirm.html", context)


# -- edit a draft ---------------------------------------------------------------------------------------------


@action
async def edit_task(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /tasks/{id}/edit``: ``expected_task_version`` and the task fields (form: as in the create form,
    money under the one money rule; JSON: canonical values). Only DRAFT; 409 ``version_conflict`` on a stale
    version, 409 ``invalid_state`` otherwise (docs/admin.md "Editing a draft")."""
    task_id = request.match_info["task_id"]
    settings = request.app[SETTINGS]
    at, who, rid = now(request), actor(session), request_id(request)
    try:
        if not is_uuid4(task_id):
            raise refusal(Code.NOT_FOUND).because("task")
        version = _expected_version(body)
        if body.kind == "json":
            raw = {k: body.json.get(k) for k in (*task_fields.FIELDS, "sku_color", "sku_size")}
        else:
            raw = _form_task(body)
            raw["max_total_price"] = person_money("max_total_price", raw["max_total_price"])
        fields = task_fields.parse_task_fields(
            raw, max_quantity=settings.max_quantity, max_total_price=settings.max_total_price
        )
        result = await request.app[DB].write(lambda c: task_edit.edit_draft(c, task_id, version, fields, who, at, rid))
    except DomainError as exc:
        field = getattr(exc, "field", "")
        if field in FIELD_LABELS:
            exc = refusal(exc.code, f"{FIELD_LABELS[field]}：{domain_refusal(exc).message}")
        return await refused_on_task(request, session, body, exc, task_id)
    if body.kind == "json" or wants_json(request):
        return json_answer(asdict(result) | {"task_version": result.version})
    return redirect(f"/tasks/{task_id}?notice=edited")


# -- detail --------------------------------------------------------------------------------------------------


def _detail_job(task_id: str, at: datetime, settings: Any) -> Any:
    def job(conn: sqlite3.Connection) -> dict[str, Any]:
        view = task_view.task_detail(conn, task_id)
        view["supervision"] = supervision_view.task_panel(conn, task_id, settings)
        device_ids = sorted(
            {a["device_id"] for a in view["attempts"]}
            | ({view["submission"]["device_id"]} if view["submission"] else set())
        )
        view["device_names"] = admin_queries.device_names(conn, device_ids)
        return view

    return job


def _detail_context(request: web.Request, session: AdminSession, view: dict[str, Any]) -> dict[str, Any]:
    task = view["task"]
    state = TaskState(task["state"])
    fenced = view["submission"] is not None
    at_text = now(request).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    for attempt in view["attempts"]:
        attempt["lease_expired"] = attempt["state"] == "OPEN" and attempt["lease_expires_at"] <= at_text
    sub = view["submission"]
    return {
        **view,
        "session": session,
        "csrf_token": csrf_token_for(request, session),
        "labels": {s.value: TASK_STATE_LABELS[s] for s in TaskState},
        "can_reset": not fenced and (state, "reset_to_draft") in TASK_TRANSITIONS,
        "can_cancel": not fenced and (state, "cancel") in TASK_TRANSITIONS,
        "can_mark_paid": (state, "mark_paid") in TASK_TRANSITIONS,
        "can_edit": state == TaskState.DRAFT,
        "can_reconcile": sub is not None and sub["state"] == "RECONCILIATION_REQUIRED",
        "lease_needs_person": any(a["lease_expired"] for a in view["attempts"]),
        "latest_authorization_id": view["authorization"]["id"] if view["authorization"] else "",
        "notice": NOTICES.get(request.query.get("notice", ""), ""),
        "stamp": f"{task['version']}:{len(view['events'])}:{len(view['evidence'])}:{task['updated_at']}"
        f":{view['supervision']['stamp']}",
    }


async def _render_detail(
    request: web.Request,
    session: AdminSession,
    task_id: str,
    *,
    status: int = 200,
    error: str = "",
    drawer: bool = False,
) -> web.Response:
    view = await request.app[DB].read(_detail_job(task_id, now(request), request.app[SETTINGS]))
    context = _detail_context(request, session, view)
    context["error"] = error
    context["drawer"] = drawer
    return render(request, "_task_detail.html" if drawer else "task_detail.html", context, status=status, headers=_VARY)


async def refused_on_task(
    request: web.Request, session: AdminSession, body: Body, exc: DomainError, task_id: str | None
) -> web.StreamResponse:
    """A refusal of an action on one task: JSON callers and unknown subjects (404, or no task to show) get the
    plain error (re-raised for the guard); a form gets the task page again with the message (status as the
    refusal)."""
    shown = domain_refusal(exc)
    if body.kind == "json" or wants_json(request) or task_id is None or shown.status == 404:
        raise exc from None
    return await _render_detail(request, session, task_id, status=shown.status, error=shown.message)


@page
async def show_task(request: web.Request, session: AdminSession) -> web.StreamResponse:
    """``GET /tasks/{id}``: the full page, or the drawer fragment when ``X-CMBuyer-View: drawer`` is
    sent same-origin with an Accept that includes text/html (docs/admin.md "Detail page and drawer"). 404 for
    unknown/malformed ids."""
    drawer = fragment_allowed(request, "drawer")
    task_id = request.match_info["task_id"]
    if not is_uuid4(task_id):
        raise refusal(Code.NOT_FOUND).because("task")
    return await _render_detail(request, session, task_id, drawer=drawer)


# -- actions on one task ---------------------------------------------------------------------------------------


def _value(body: Body, name: str) -> Any:
    if body.kind == "json":
        return body.json.get(name)
    return body.one(name)


def _expected_version(body: Body) -> int:
    raw = _value(body, "expected_task_version")
    if body.kind == "form":
        raw = int(raw) if isinstance(raw, str) and _VERSION.fullmatch(raw) else None
    if type(raw) is not int or raw < 1:
        raise ValidationFailed("expected_task_version", "缺少任务版本，请刷新页面")
    return raw


def back_to(body: Body, task_id: str, notice: str) -> str:
    """Where a form action on one task goes next: the task list when the form came from it (``return_to=list``),
    else the task's page, with ``notice`` shown there."""
    if body.kind == "form" and body.one("return_to") == "list":
        return f"/tasks?notice={notice}"
    return f"/tasks/{task_id}?notice={notice}"


async def _task_action(request: web.Request, session: AdminSession, body: Body, kind: str) -> web.StreamResponse:
    task_id = request.match_info["task_id"]
    at, who, rid = now(request), actor(session), request_id(request)
    try:
        if not is_uuid4(task_id):
            raise refusal(Code.NOT_FOUND).because("task")
        version = _expected_version(body)
        if kind == "mark_paid":
            result = await request.app[DB].write(lambda c: admin_actions.mark_paid(c, task_id, version, who, at, rid))
        else:
            auth_id = _value(body, "authorization_id") or None
            if auth_id is not None and not is_uuid4(auth_id):
                raise ValidationFailed("authorization_id", "授权 id 无效")
            fn = admin_actions.reset_to_draft if kind == "reset" else admin_actions.cancel
            result = await request.app[DB].write(lambda c: fn(c, task_id, version, auth_id, who, at, rid))
    except DomainError as exc:
        return await refused_on_task(request, session, body, exc, task_id)
    if body.kind == "json" or wants_json(request):
        return json_answer(asdict(result) | {"task_version": result.version})
    notice = {"reset": "reset", "cancel": "cancelled", "mark_paid": "paid"}[kind]
    return redirect(back_to(body, task_id, notice))


@action
async def reset_to_draft(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /tasks/{id}/reset-to-draft`` with ``expected_task_version`` and ``authorization_id``."""
    return await _task_action(request, session, body, "reset")


@action
async def cancel_task(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /tasks/{id}/cancel`` with ``expected_task_version`` (and ``authorization_id`` if any)."""
    return await _task_action(request, session, body, "cancel")


@action
async def mark_paid(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /tasks/{id}/mark-paid`` with ``expected_task_version``."""
    return await _task_action(request, session, body, "mark_paid")


@action
async def reconcile(request: web.Request, session: AdminSession, body: Body) -> web.StreamResponse:
    """``POST /order-submissions/{sid}/reconcile``: ``outcome`` = ``created`` | ``not_created``,
    ``note``, ``expected_task_version``. Never re-opens the fence."""
    sid = request.match_info["sid"]
    at, who, rid = now(request), actor(session), request_id(request)
    try:
        raw: dict[str, Any] = (
            dict(body.json)
            if body.kind == "json"
            else {
                "outcome": body.one("outcome"),
                "note": body.one("note"),
                "expected_task_version": _expected_version(body),
            }
        )
        if not is_uuid4(sid):
            raise refusal(Code.NOT_FOUND).because("submission")
        outcome, note, version = admin_actions.parse_reconcile(raw)
        result = await request.app[DB].write(
            lambda c: admin_actions.reconcile(c, sid, outcome, note, version, who, at, rid)
        )
    except DomainError as exc:
        task_id = None
        if exc.status != 404 and body.kind == "form" and not wants_json(request):
            sub = await request.app[DB].read(lambda c: admin_queries.submission(c, sid))
            task_id = sub["task_id"] if sub else None
        return await refused_on_task(request, session, body, exc, task_id)
    if body.kind == "json" or wants_json(request):
        return json_answer(asdict(result) | {"task_version": result.version})
    return redirect(f"/tasks/{result.task_id}?notice=reconciled")


def setup(app: web.Application) -> None:
    """Register the task routes."""
    app.router.add_get("/tasks", list_tasks, name="admin-tasks")
    app.router.add_post("/tasks", create_task, name="admin-task-create")
    app.router.add_post("/tasks/start-purchases", start_purchases, name="admin-start-purchases")
    app.router.add_get("/tasks/{task_id}", show_task, name="admin-task")
    app.router.add_post("/tasks/{task_id}/reset-to-draft", reset_to_draft, name="admin-task-reset")
    app.router.add_post("/tasks/{task_id}/cancel", cancel_task, name="admin-task-cancel")
    app.router.add_post("/tasks/{task_id}/mark-paid", mark_paid, name="admin-task-mark-paid")
    app.router.add_post("/tasks/{task_id}/edit", edit_task, name="admin-task-edit")
    app.router.add_post("/order-submissions/{sid}/reconcile", reconcile, name="admin-reconcile")
