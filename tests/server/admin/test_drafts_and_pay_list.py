"""Editing a draft, the start confirmation, the pay list and the bulk actions
(server/services/task_edit.py, web/admin/tasks.py, web/admin/task_io.py)."""

from __future__ import annotations

import io
import json
from typing import Any

from openpyxl import load_workbook

from cmbuyer.server.tx.common import new_id
from tests.server.submissions.helpers import HEARTBEAT

from .conftest import AdminClient

EDIT = {
    "title": "改过的标题",
    "product_url": "https://mobile.yangkeduo.com/goods.html?goods_id=111222333",
    # the form's option rows: one dimension now, where the task had colour and size
    "option_dim_1": "规格",
    "option_value_1": "白色",
    "option_dim_2": "",
    "option_value_2": "",
    "quantity": "3",
    "max_total_price": "45",
}


def snapshot(conn: Any, task_id: str) -> tuple[Any, ...]:
    return tuple(conn.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone())


async def test_edit_a_draft_then_start_carries_the_edited_values(
    admin_client: AdminClient, make_task: Any, sync_conn: Any
) -> None:
    task = make_task(max_total_price="10.00")
    resp = await admin_client.post_form(f"/tasks/{task.id}/edit", {"expected_task_version": "1", **EDIT})
    assert resp.status == 303 and resp.headers["Location"] == f"/tasks/{task.id}?notice=edited"
    row = sync_conn.execute(
        "SELECT title, goods_id, sku_options, quantity, max_total_price, state, version FROM tasks"
    ).fetchone()
    assert tuple(row) == ("改过的标题", "111222333", '[["规格","白色"]]', 3, "45.00", "DRAFT", 2)
    (detail,) = sync_conn.execute("SELECT detail_json FROM audit_log WHERE action = 'task.edit'").fetchone()
    audit = json.loads(detail)
    assert audit["old"]["max_total_price"] == "10.00" and audit["new"]["max_total_price"] == "45.00"
    assert audit["old"]["sku_options"] == '[["颜色","黑色CHA(纯棉)"],["尺码","M(建议100-115)"]]'
    assert audit["new"]["sku_options"] == '[["规格","白色"]]'
    # the edited values are what the authorization snapshots
    started = await admin_client.post_json(
        "/tasks/start-purchases", {"start_key": new_id(), "tasks": [{"task_id": task.id, "expected_task_version": 2}]}
    )
    assert started.status == 200, await started.text()
    auth = sync_conn.execute(
        "SELECT title, goods_id, sku_options, quantity, max_total_price FROM authorizations"
    ).fetchone()
    assert tuple(auth) == ("改过的标题", "111222333", '[["规格","白色"]]', 3, "45.00")


async def test_edit_with_a_stale_version_is_409_and_changes_nothing(
    admin_client: AdminClient, make_task: Any, sync_conn: Any
) -> None:
    task = make_task()
    before = snapshot(sync_conn, task.id)
    audit = sync_conn.execute("SELECT count(*) FROM audit_log").fetchone()[0]
    form = await admin_client.post_form(f"/tasks/{task.id}/edit", {"expected_task_version": "7", **EDIT})
    assert form.status == 409 and "任务已变化，请刷新后重选" in await form.text()
    js = await admin_client.post_json(
        f"/tasks/{task.id}/edit",
        {"expected_task_version": 7, "sku_options": [["规格", "白色"]], "quantity": 3, "max_total_price": "45.00"}
        | {k: v for k, v in EDIT.items() if k in ("title", "product_url")},
    )
    assert js.status == 409 and (await js.json())["error"]["code"] == "version_conflict"
    bad = await admin_client.post_form(
        f"/tasks/{task.id}/edit", {"expected_task_version": "1", **EDIT, "quantity": "0"}
    )
    assert bad.status == 400 and "数量" in await bad.text()
    assert snapshot(sync_conn, task.id) == before
    assert sync_conn.execute("SELECT count(*) FROM audit_log").fetchone()[0] == audit


async def test_only_drafts_are_editable(admin_client: AdminClient, make_task: Any, sync_conn: Any) -> None:
    task = make_task(start=True)
    before = snapshot(sync_conn, task.id)
    resp = await admin_client.post_form(f"/tasks/{task.id}/edit", {"expected_task_version": str(task.version), **EDIT})
    assert resp.status == 409 and "只有草稿任务可以修改" in await resp.text()
    assert snapshot(sync_conn, task.id) == before
    page = await (await admin_client.client.get(f"/tasks/{task.id}")).text()
    assert 'id="edit-draft"' not in page
    draft = make_task()
    assert 'id="edit-draft"' in await (await admin_client.client.get(f"/tasks/{draft.id}")).text()


async def test_start_confirmation_counts_and_ready_phones(
    admin_client: AdminClient, make_task: Any, make_device: Any, sync_conn: Any
) -> None:
    a, b = make_task(max_total_price="30.00"), make_task(max_total_price="12.50")
    started = make_task(start=True)
    fields = [("start_key", new_id()), ("task", f"{a.id}:1"), ("task", f"{b.id}:1"), ("task", f"{started.id}:2")]
    html = await (await admin_client.post_form("/tasks/start-purchases", fields)).text()
    assert 'id="confirm-count">2<' in html and 'id="confirm-total">¥42.50<' in html
    assert 'id="confirm-ready">0<' in html and 'id="no-ready-warning"' in html
    assert "1 个所选任务不是草稿或已变化" in html
    # a phone that reports READY now is counted, and the warning goes
    phone = make_device("手机一")
    beat = await admin_client.client.post(
        HEARTBEAT,
        json={
            "device_id": phone.device_id,
            "client_version": "0.1.0",
            "adb_serial": "192.168.0.173:5555",
            "android_release": "16",
            "pdd_version": "8.17.0",
            "state": "READY",
        },
        headers=phone.headers(),
    )
    assert beat.status == 200, await beat.text()
    html = await (await admin_client.post_form("/tasks/start-purchases", fields)).text()
    assert 'id="confirm-ready">1<' in html and "手机一" in html and 'id="no-ready-warning"' not in html
    assert sync_conn.execute("SELECT count(*) FROM tasks WHERE state = 'DRAFT'").fetchone()[0] == 2  # nothing started


def waiting_orders(make_task: Any, make_device: Any, seed: Any, per_phone: dict[str, int]) -> dict[str, list[Any]]:
    """``{phone name: [task, …]}``: orders in WAITING_PAYMENT with order numbers, seeded per phone."""
    out: dict[str, list[Any]] = {}
    n = 0
    for name, k in per_phone.items():
        device = make_device(name)
        out[name] = []
        for _ in range(k):
            n += 1
            task = make_task(start=True, title=f"{name} 订单 {n}")
            attempt = seed.claim(task.id, device.device_id)
            seed.fence(task.id, attempt, device.device_id, observation="SUBMITTED", order_sn=f"231204-{n:08d}")
            out[name].append(task)
            seed.clock.advance(60)  # each order a minute younger than the one before
    return out


async def test_pay_list_groups_by_phone_and_exports(
    admin_client: AdminClient, make_task: Any, make_device: Any, seed: Any
) -> None:
    orders = waiting_orders(make_task, make_device, seed, {"手机2": 2, "手机1": 1})
    make_task(start=True)  # not waiting for payment: not listed
    html = await (await admin_client.client.get("/pay-list")).text()
    assert html.index("手机1（1 笔）") < html.index("手机2（2 笔）")  # by phone name
    for n in (1, 2, 3):
        assert f"231204-{n:08d}" in html
    assert html.count('name="task" value=') == 3
    resp = await admin_client.client.get("/pay-list/export?format=xlsx")
    rows = [[c.value for c in r] for r in load_workbook(io.BytesIO(await resp.read())).worksheets[0].iter_rows()]
    assert rows[0][:2] == ["设备", "订单编号"]
    assert [(r[0], r[1]) for r in rows[1:]] == [
        ("手机1", "231204-00000003"),
        ("手机2", "231204-00000001"),
        ("手机2", "231204-00000002"),
    ]
    assert len(orders["手机2"]) == 2


async def test_bulk_mark_paid_marks_the_current_and_names_the_stale(
    admin_client: AdminClient, make_task: Any, make_device: Any, seed: Any, sync_conn: Any
) -> None:
    orders = waiting_orders(make_task, make_device, seed, {"手机甲": 3, "手机乙": 2})
    tasks = [t for ts in orders.values() for t in ts]
    versions = {t.id: sync_conn.execute("SELECT version FROM tasks WHERE id = ?", (t.id,)).fetchone()[0] for t in tasks}
    stale = tasks[3]
    items = [("task", f"{t.id}:{versions[t.id] - (1 if t is stale else 0)}") for t in tasks]
    resp = await admin_client.post_form("/tasks/bulk-mark-paid", items)
    html = await resp.text()
    assert resp.status == 200 and "已标记 4 个为已付款；1 个未标记" in html
    assert f'data-task-id="{stale.id}">未标记：{stale.title} — 任务已变化' in html
    states = dict(sync_conn.execute("SELECT id, state FROM tasks").fetchall())
    assert [states[t.id] for t in tasks] == ["PAID", "PAID", "PAID", "WAITING_PAYMENT", "PAID"]
    assert sync_conn.execute("SELECT count(*) FROM audit_log WHERE action = 'task.mark_paid'").fetchone()[0] == 4
    # JSON callers get the same answer as data
    again = await admin_client.post_json(
        "/tasks/bulk-mark-paid",
        {
            "tasks": [
                {"task_id": stale.id, "expected_task_version": versions[stale.id]},
                {"task_id": tasks[0].id, "expected_task_version": versions[tasks[0].id]},
            ]
        },
    )
    body = await again.json()
    assert [d["task_id"] for d in body["done"]] == [stale.id]
    assert [(r["task_id"], r["code"]) for r in body["refused"]] == [(tasks[0].id, "version_conflict")]


async def test_bulk_cancel_of_drafts_and_pending(
    admin_client: AdminClient, make_task: Any, sync_conn: Any, fenced_task: Any
) -> None:
    draft, pending = make_task(), make_task(start=True)
    fenced, _ = fenced_task()
    items = [
        ("task", f"{draft.id}:1"),
        ("task", f"{pending.id}:{pending.version}"),
        ("task", f"{fenced.id}:{fenced.version + 1}"),
    ]
    resp = await admin_client.post_form("/tasks/bulk-cancel", items)
    html = await resp.text()
    assert resp.status == 200 and "已取消 2 个任务；1 个未取消" in html and "submission_fenced" in html
    states = dict(sync_conn.execute("SELECT id, state FROM tasks").fetchall())
    assert (states[draft.id], states[pending.id], states[fenced.id]) == ("CANCELLED", "CANCELLED", "SUBMITTING")
    assert sync_conn.execute(
        "SELECT state, close_reason FROM authorizations WHERE task_id = ?", (pending.id,)
    ).fetchone()[:] == ("CLOSED", "CANCELLED")
    empty = await admin_client.post_form("/tasks/bulk-cancel", [])
    assert empty.status == 400 and "请选择 1 到 500 个任务" in await empty.text()
