"""The exact words of every refusal the task services and transactions raise (server/services/tasks.py,
admin_actions.py, task_edit.py, tx/drafts.py and the device side), pinned before they moved into the one
table ``display/labels.py`` ``REFUSAL_TEXTS``: each case triggers the refusal through its service and checks
its code and the sentence a person reads; the route cases check the pages and JSON bodies that show a
refusal's words without the page-wide wording (the bulk results, the create and start forms)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

from cmbuyer.server.display.labels import reason_message, refusal_message
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import DomainError
from cmbuyer.server.domain.task_fields import TaskFields
from cmbuyer.server.services import admin_actions, submission_result, supervision, task_edit
from cmbuyer.server.services import tasks as task_service
from cmbuyer.server.tx import device_tx, drafts, screens
from cmbuyer.server.tx import supervision as supervision_tx
from cmbuyer.server.tx.common import new_id
from tests.server.conftest import TEST_ACTOR

from .conftest import AdminClient
from .test_tasks import form

KEY = new_id()
T = new_id()


def _fields(task: Any) -> TaskFields:
    return TaskFields(**{name: getattr(task, name) for name in TaskFields.__dataclass_fields__})


# (name, what raises given (conn, draft, pending, fenced, clock, settings), code, the sentence)
Case = tuple[str, Callable[..., Any], Code, str]
CASES: list[Case] = [
    (
        "create key",
        lambda c, d, p, f, clock, s: task_service.validate_new_task({"create_key": "X"}, s),
        Code.INVALID_REQUEST,
        "create_key 必须是小写 UUIDv4",
    ),
    (
        "create key reused",
        lambda c, d, p, f, clock, s: drafts.create_draft(
            c, d.create_key, _fields(d).__class__(**{**_fields(d).__dict__, "quantity": 9}), TEST_ACTOR, clock.now()
        ),
        Code.IDEMPOTENCY_CONFLICT,
        "create_key 已用于另一任务",
    ),
    (
        "start key",
        lambda *a: task_service.parse_start_request({"start_key": "x"}),
        Code.INVALID_REQUEST,
        "start_key 必须是小写 UUIDv4",
    ),
    (
        "no tasks",
        lambda *a: task_service.parse_start_request({"start_key": KEY, "tasks": []}),
        Code.INVALID_REQUEST,
        "任务列表不能为空（最多 500 条）",
    ),
    (
        "item shape",
        lambda *a: task_service.parse_start_request({"start_key": KEY, "tasks": [{"task_id": T}]}),
        Code.INVALID_REQUEST,
        "每项需要 task_id 与 expected_task_version",
    ),
    (
        "item values",
        lambda *a: task_service.parse_start_request(
            {"start_key": KEY, "tasks": [{"task_id": T, "expected_task_version": 0}]}
        ),
        Code.INVALID_REQUEST,
        "task_id 或版本无效",
    ),
    (
        "duplicate items",
        lambda *a: task_service.parse_start_request(
            {"start_key": KEY, "tasks": [{"task_id": T, "expected_task_version": 1}] * 2}
        ),
        Code.INVALID_REQUEST,
        "任务列表有重复",
    ),
    (
        "start unknown task",
        lambda c, d, p, f, clock, s: task_service.start_purchases(c, new_id(), [(T, 1)], TEST_ACTOR, clock.now(), s),
        Code.NOT_FOUND,
        "任务不存在",
    ),
    (
        "start stale",
        lambda c, d, p, f, clock, s: task_service.start_purchases(
            c, new_id(), [(d.id, d.version + 1)], TEST_ACTOR, clock.now(), s
        ),
        Code.VERSION_CONFLICT,
        "任务已变化，请刷新后重选",
    ),
    (
        "start fenced",
        lambda c, d, p, f, clock, s: task_service.start_purchases(
            c, new_id(), [(f.id, f.version)], TEST_ACTOR, clock.now(), s
        ),
        Code.SUBMISSION_FENCED,
        "任务已有提交围栏",
    ),
    (
        "start not draft",
        lambda c, d, p, f, clock, s: task_service.start_purchases(
            c, new_id(), [(p.id, p.version)], TEST_ACTOR, clock.now(), s
        ),
        Code.VERSION_CONFLICT,
        "只有草稿任务可以开始采购",
    ),
    ("get unknown", lambda c, *a: task_service.get_task(c, T), Code.NOT_FOUND, "任务不存在"),
    (
        "action unknown task",
        lambda c, d, p, f, clock, s: admin_actions.mark_paid(c, T, 1, TEST_ACTOR, clock.now()),
        Code.NOT_FOUND,
        "任务不存在",
    ),
    (
        "action stale",
        lambda c, d, p, f, clock, s: admin_actions.mark_paid(c, d.id, d.version + 1, TEST_ACTOR, clock.now()),
        Code.VERSION_CONFLICT,
        "任务已变化，请刷新后重试",
    ),
    (
        "cancel fenced",
        lambda c, d, p, f, clock, s: admin_actions.cancel(c, f.id, f.version, None, TEST_ACTOR, clock.now()),
        Code.SUBMISSION_FENCED,
        "该任务已取得提交围栏，只能人工核对",
    ),
    (
        "reconcile outcome",
        lambda *a: admin_actions.parse_reconcile({"outcome": "maybe"}),
        Code.INVALID_REQUEST,
        "请选择“已创建待付款订单”或“确认未创建”",
    ),
    (
        "reconcile note",
        lambda *a: admin_actions.parse_reconcile({"outcome": "created", "note": " "}),
        Code.INVALID_REQUEST,
        "请填写核对说明（1–500 字）",
    ),
    (
        "reconcile version",
        lambda *a: admin_actions.parse_reconcile({"outcome": "created", "note": "看过了"}),
        Code.INVALID_REQUEST,
        "缺少任务版本",
    ),
    (
        "reconcile unknown submission",
        lambda c, d, p, f, clock, s: admin_actions.reconcile(c, T, "created", "看过了", 1, TEST_ACTOR, clock.now()),
        Code.NOT_FOUND,
        "提交记录不存在",
    ),
    (
        "edit unknown",
        lambda c, d, p, f, clock, s: task_edit.edit_draft(c, T, 1, _fields(d), TEST_ACTOR, clock.now()),
        Code.NOT_FOUND,
        "任务不存在",
    ),
    (
        "edit stale",
        lambda c, d, p, f, clock, s: task_edit.edit_draft(c, d.id, d.version + 1, _fields(d), TEST_ACTOR, clock.now()),
        Code.VERSION_CONFLICT,
        "任务已变化，请刷新后重选",
    ),
    (
        "edit not draft",
        lambda c, d, p, f, clock, s: task_edit.edit_draft(c, p.id, p.version, _fields(p), TEST_ACTOR, clock.now()),
        Code.INVALID_STATE,
        "只有草稿任务可以修改；请先重置为草稿",
    ),
    # the device side: the device reads only the code (docs/api.md "Conventions"); the words are pinned so the
    # move into the table changes nothing anyone could read (e.g. a log of the exception)
    (
        "result conflict",
        lambda *a: _raise(submission_result.result_conflict()),
        Code.RESULT_CONFLICT,
        "the submission already has a result",
    ),
    ("result unknown", lambda *a: _raise(submission_result.not_found()), Code.NOT_FOUND, "not found"),
    (
        "not supervised",
        lambda *a: _raise(supervision.not_supervised()),
        Code.NOT_SUPERVISED,
        "the attempt is not supervised",
    ),
    (
        "approval unknown",
        lambda c, d, p, f, clock, s: supervision.approval_status(
            c, device_id=new_id(), attempt_id=new_id(), body={"approval_id": new_id()}, now=clock.now()
        ),
        Code.NOT_FOUND,
        "approval request not found",
    ),
    (
        "idempotency",
        lambda *a: _raise(device_tx.idempotency_conflict()),
        Code.IDEMPOTENCY_CONFLICT,
        "idempotency key reused with a different request",
    ),
    (
        "approval required",
        lambda *a: _raise(supervision_tx.approval_required()),
        Code.APPROVAL_REQUIRED,
        "a person's approval of these readings is required",
    ),
    (
        "screen package",
        lambda c, *a: screens.record_answer(c, new_id(), new_id(), image=None, package="no package", at="x"),
        Code.INVALID_REQUEST,
        "not an Android package name",
    ),
    (
        "screen not pending",
        lambda c, *a: screens.record_answer(c, new_id(), new_id(), image=None, package="com.xunmeng.pinduoduo", at="x"),
        Code.INVALID_STATE,
        "no such screen request pending for this device",
    ),
]


def _raise(exc: DomainError) -> None:
    raise exc


@pytest.mark.parametrize(("name", "call", "code", "text"), CASES, ids=[c[0] for c in CASES])
def test_each_refusal_keeps_its_words(
    name: str,
    call: Callable[..., Any],
    code: Code,
    text: str,
    sync_conn: sqlite3.Connection,
    make_task: Any,
    fenced_task: Any,
    clock: Any,
    settings: Any,
) -> None:
    draft, pending = make_task(), make_task(start=True)
    fenced = task_service.get_task(sync_conn, fenced_task()[0].id) if name.endswith("fenced") else None
    with pytest.raises(DomainError) as caught:
        call(sync_conn, draft, pending, fenced, clock, settings)
    exc = caught.value
    assert (exc.code, refusal_message(exc), reason_message(exc)) == (code, text, text)


async def test_the_bulk_results_keep_each_refusals_words(
    admin_client: AdminClient, make_task: Any, fenced_task: Any
) -> None:
    """The bulk pages show a refusal's own words (task_io.run_bulk), not the page-wide wording: a refusal of a
    state transition stays in English there (a leftover, see docs/architecture.md)."""
    draft, other = make_task(), make_task()
    fenced, _ = fenced_task()
    resp = await admin_client.post_json(
        "/tasks/bulk-cancel", {"tasks": [{"task_id": fenced.id, "expected_task_version": fenced.version + 1}]}
    )
    assert (await resp.json())["refused"] == [
        {"task_id": fenced.id, "code": "submission_fenced", "message": "该任务已取得提交围栏，只能人工核对"}
    ]
    resp = await admin_client.post_json(
        "/tasks/bulk-mark-paid",
        {
            "tasks": [
                {"task_id": draft.id, "expected_task_version": 2},
                {"task_id": other.id, "expected_task_version": 1},
            ]
        },
    )
    assert (await resp.json())["refused"] == [
        {"task_id": draft.id, "code": "version_conflict", "message": "任务已变化，请刷新后重试"},
        {"task_id": other.id, "code": "invalid_state", "message": "mark_paid is not allowed in state DRAFT"},
    ]


async def test_the_create_and_start_forms_keep_the_refusals_words(admin_client: AdminClient, make_task: Any) -> None:
    key = new_id()
    assert (await admin_client.post_form("/tasks", form(create_key=key))).status == 303
    resp = await admin_client.post_form("/tasks", form(create_key=key, title="另一个"))
    assert resp.status == 409 and 'role="alert"' in (html := await resp.text())
    assert ">create_key 已用于另一任务<" in html
    resp = await admin_client.post_form("/tasks", form(create_key="X"))
    assert resp.status == 400 and ">表单：create_key 必须是小写 UUIDv4<" in await resp.text()
    draft = make_task()
    start = new_id()
    first = [("start_key", start), ("confirm", "yes"), ("task", f"{draft.id}:1")]
    assert (await admin_client.post_form("/tasks/start-purchases", first)).status == 303
    again = [("start_key", start), ("confirm", "yes"), ("task", f"{make_task().id}:1")]
    resp = await admin_client.post_form("/tasks/start-purchases", again)
    assert resp.status == 409 and ">start_key 已用于另一批任务<" in await resp.text()
