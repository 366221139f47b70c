"""The admin routes of supervised first orders over real HTTP (pytest-aiohttp, real app, real SQLite file):
the drawer panel, approve/reject, the verdict, resupervise, the badges; refusals answer a Chinese message
with the real status and change nothing; CSRF on real subjects (the generic CSRF matrix of every unsafe
route, these included, is in test_csrf.py)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from cmbuyer.server.tx.common import new_id

from . import seed_supervision as sv
from .conftest import AdminClient
from .seed_supervision import supervised_orders  # noqa: F401  (fixture: N = 3)
from .test_supervision_service import fingerprint

DRAWER = {"X-CMBuyer-View": "drawer", "Accept": "text/html"}


@pytest.fixture
def waiting(make_task: Any, make_device: Any, seed: Any) -> dict[str, Any]:
    """A task whose supervised phone waits with a gate-3 price that differs from gates 1/2."""
    task = make_task(start=True)
    device = make_device("采购机 A")
    attempt = sv.supervised_claim(seed, task.id, device.device_id)
    approval_id, asset = sv.approval(
        seed,
        task.id,
        attempt,
        device.device_id,
        values=sv.readings(gate3_unit_price="13.88", confirm_page_amount="25.76"),
    )
    return {"task": task, "device": device.device_id, "attempt": attempt, "approval": approval_id, "asset": asset}


def _state(sync_conn: Any, approval_id: str) -> str:
    return sync_conn.execute("SELECT state FROM approval_requests WHERE id = ?", (approval_id,)).fetchone()[0]


async def test_drawer_shows_the_side_by_side_values_screenshot_and_buttons(
    admin_client: AdminClient, waiting: dict[str, Any]
) -> None:
    resp = await admin_client.client.get(f"/tasks/{waiting['task'].id}", headers=DRAWER)
    assert resp.status == 200
    html = await resp.text()
    panel = html[html.index('<section class="approval card"') : html.index("</section>")]
    assert "等待人工确认" in panel and "采购机 A" in panel and sv.PACK_KEY in panel
    assert f'src="/evidence/{waiting["asset"]}"' in panel
    assert f'action="/approvals/{waiting["approval"]}/approve"' in panel
    assert f'action="/approvals/{waiting["approval"]}/reject"' in panel and ">驳回<" in panel and ">批准<" in panel
    assert 'name="return_to" value="list"' in panel  # from the drawer, back to the list
    rows = re.findall(r'<tr class="(ok|mismatch)"><th>([^<]+)</th><td>([^<]*)</td><td class="read">([^<]*)</td>', panel)
    assert [(cls, label) for cls, label, _, _ in rows if cls == "mismatch"] == [("mismatch", "闸门三单价")]
    assert ("ok", "颜色", "黑色CHA(纯棉)", "黑色CHA(纯棉)") in rows and ("ok", "数量", "2", "2") in rows
    assert ("mismatch", "闸门三单价", "与闸门一相同", "¥13.88") in rows
    assert "三次读取的单价不一致" in panel and "unit_price_changed" in panel  # the fence would refuse
    # the full page carries the same panel, without the return-to-list field
    page = await (await admin_client.client.get(f"/tasks/{waiting['task'].id}")).text()
    assert f"/approvals/{waiting['approval']}/approve" in page and 'value="list"' not in page


async def test_approve_then_replay_then_reject(
    admin_client: AdminClient, waiting: dict[str, Any], sync_conn: Any
) -> None:
    tid, aid = waiting["task"].id, waiting["approval"]
    resp = await admin_client.post_form(f"/approvals/{aid}/approve", {"return_to": "list"})
    assert resp.status == 303 and resp.headers["Location"] == "/tasks?notice=approved"
    assert _state(sync_conn, aid) == "APPROVED"
    audit = sync_conn.execute(
        "SELECT actor_kind, actor_id, subject_id FROM audit_log WHERE action = 'approval.approve'"
    ).fetchall()
    assert [tuple(a) for a in audit] == [("admin", "ops", tid)]
    snap = fingerprint(sync_conn)
    # double click: the same decision again — "already", nothing written
    resp = await admin_client.post_form(f"/approvals/{aid}/approve", {})
    assert resp.status == 303 and resp.headers["Location"] == f"/tasks/{tid}?notice=already_approved"
    page = await (await admin_client.client.get(resp.headers["Location"])).text()
    assert "此前已批准" in page and "已批准（admin:ops" in page
    # the other button after the fact: the task page with the reason, 409, nothing written
    resp = await admin_client.post_form(f"/approvals/{aid}/reject", {})
    assert resp.status == 409
    assert "已由 admin:ops 已批准；未做任何更改。" in await resp.text()
    assert fingerprint(sync_conn) == snap


async def test_reject_as_json(admin_client: AdminClient, waiting: dict[str, Any], sync_conn: Any) -> None:
    resp = await admin_client.post_json(f"/approvals/{waiting['approval']}/reject", {})
    assert resp.status == 200
    assert await resp.json() == {
        "approval_id": waiting["approval"],
        "task_id": waiting["task"].id,
        "state": "REJECTED",
        "changed": True,
    }
    resp = await admin_client.post_json(f"/approvals/{waiting['approval']}/approve", {})
    assert resp.status == 409 and (await resp.json())["error"]["code"] == "approval_not_waiting"


async def test_closed_attempt_and_unknown_ids_change_nothing(
    admin_client: AdminClient, waiting: dict[str, Any], seed: Any, sync_conn: Any
) -> None:
    seed.fail(waiting["task"].id, waiting["attempt"])
    snap = fingerprint(sync_conn)
    resp = await admin_client.post_form(f"/approvals/{waiting['approval']}/approve", {})
    assert resp.status == 409 and "这次尝试已结束" in await resp.text()
    for path in (f"/approvals/{new_id()}/approve", "/approvals/nope/reject"):
        resp = await admin_client.post_form(path, {})
        assert resp.status == 404 and "确认请求不存在" in await resp.text()
    assert fingerprint(sync_conn) == snap


async def test_csrf_on_real_subjects(
    admin_client: AdminClient, waiting: dict[str, Any], seed: Any, sync_conn: Any
) -> None:
    sv.set_pair(seed, waiting["device"], 2, held_reason="x")
    snap = fingerprint(sync_conn)
    for path in (
        f"/approvals/{waiting['approval']}/approve",
        f"/approvals/{waiting['approval']}/reject",
        f"/devices/{waiting['device']}/resupervise",
    ):
        for token in ("", "f" * 64):
            resp = await admin_client.client.post(
                path, data={"csrf_token": token} if token else {}, allow_redirects=False
            )
            assert resp.status == 403, (path, token)
        resp = await admin_client.client.post(
            path,
            data={"csrf_token": admin_client.csrf},
            allow_redirects=False,
            headers={"Origin": "http://evil.example"},
        )
        assert resp.status == 403
    assert fingerprint(sync_conn) == snap


async def test_badges_on_the_task_table_and_the_devices_page(
    admin_client: AdminClient, waiting: dict[str, Any], make_task: Any
) -> None:
    make_task(title="没有等待的任务")
    fragment = await (
        await admin_client.client.get("/tasks", headers={"X-CMBuyer-View": "rows", "Accept": "text/html"})
    ).text()
    # the rows fragment ends with the count above the table, for the live view to move there
    rows, _, count = fragment.partition('<template id="waiting-count-fresh">')
    assert "<strong>1</strong> 单等待人工确认" in count
    waiting_row = next(r for r in rows.split("<tr ")[1:] if waiting["task"].id in r)
    other_row = next(r for r in rows.split("<tr ")[1:] if "没有等待的任务" in r)
    assert "等待人工确认" in waiting_row and "等待人工确认" not in other_row
    devices = await (await admin_client.client.get("/devices")).text()
    assert devices.count("等待人工确认") == 1 and 'id="device-rows"' in devices
    await admin_client.post_form(f"/approvals/{waiting['approval']}/approve", {})
    fragment = await (
        await admin_client.client.get("/tasks", headers={"X-CMBuyer-View": "rows", "Accept": "text/html"})
    ).text()
    rows, _, count = fragment.partition('<template id="waiting-count-fresh">')
    assert "等待人工确认" not in rows and "没有等待人工确认的订单。" in count
    assert "等待人工确认" not in await (await admin_client.client.get("/devices")).text()


async def test_verdict_forms(
    admin_client: AdminClient, make_task: Any, make_device: Any, seed: Any, sync_conn: Any
) -> None:
    device = make_device().device_id
    task = make_task(start=True)
    attempt = sv.supervised_claim(seed, task.id, device)
    sid = seed.fence(task.id, attempt, device, observation="SUBMITTED")
    page = await (await admin_client.client.get(f"/tasks/{task.id}")).text()
    assert f'action="/order-submissions/{sid}/supervision-verdict"' in page
    assert 'value="right"' in page and ">核对无误<" in page and ">有误<" in page
    resp = await admin_client.post_form(f"/order-submissions/{sid}/supervision-verdict", {"verdict": "maybe"})
    assert resp.status == 400 and "核对无误" in await resp.text()
    resp = await admin_client.post_form(
        f"/order-submissions/{sid}/supervision-verdict", {"verdict": "wrong", "note": "尺码不对"}
    )
    assert resp.status == 303 and resp.headers["Location"] == f"/tasks/{task.id}?notice=verdict_wrong"
    assert sv.pair(seed, device)["held"] == 1 and "尺码不对" in sv.pair(seed, device)["held_reason"]
    page = await (await admin_client.client.get(resp.headers["Location"])).text()
    assert "已暂停领取" in page and "尺码不对" in page and "supervision-verdict" not in page  # shown once given
    snap = fingerprint(sync_conn)
    resp = await admin_client.post_form(f"/order-submissions/{sid}/supervision-verdict", {"verdict": "right"})
    assert resp.status == 409 and "已由 ops 记录为“有误”" in await resp.text()
    resp = await admin_client.post_json(f"/order-submissions/{sid}/supervision-verdict", {"verdict": "right"})
    assert resp.status == 409 and (await resp.json())["error"]["code"] == "verdict_exists"
    resp = await admin_client.post_form(f"/order-submissions/{new_id()}/supervision-verdict", {"verdict": "right"})
    assert resp.status == 404
    assert fingerprint(sync_conn) == snap


async def test_verdict_right_as_json(admin_client: AdminClient, make_task: Any, make_device: Any, seed: Any) -> None:
    device = make_device().device_id
    task = make_task(start=True)
    sid = seed.fence(task.id, sv.supervised_claim(seed, task.id, device), device, observation="SUBMITTED")
    resp = await admin_client.post_json(f"/order-submissions/{sid}/supervision-verdict", {"verdict": "right"})
    assert resp.status == 200
    assert await resp.json() == {
        "submission_id": sid,
        "verdict": "RIGHT",
        "device_id": device,
        "pack_key": sv.PACK_KEY,
        "confirmed_orders": 1,
        "held": False,
    }


async def test_devices_page_states_and_resupervise(
    admin_client: AdminClient, make_device: Any, seed: Any, sync_conn: Any
) -> None:
    device = make_device("采购机 B").device_id
    sync_conn.execute("BEGIN IMMEDIATE")
    sync_conn.execute(
        "UPDATE devices SET pack_id = ?, pdd_version = '8.22.0', pdd_version_code = 82200 WHERE id = ?",
        (sv.PACK_KEY, device),
    )
    sync_conn.execute("COMMIT")
    sv.set_pair(seed, device, 1)
    sv.set_pair(seed, device, 0, pack_key="old-pack", held_reason="订单有误（提交 1234abcd）")
    html = await (await admin_client.client.get("/devices")).text()
    assert "监督中：已确认 1 / 3" in html and "已暂停" in html and "订单有误（提交 1234abcd）" in html
    assert f'action="/devices/{device}/resupervise"' in html and "重新人工监督" in html
    resp = await admin_client.post_form(f"/devices/{device}/resupervise", {})
    assert resp.status == 303 and resp.headers["Location"] == "/devices?notice=resupervised"
    assert tuple(sv.pair(seed, device)) == (0, 0, None) and tuple(sv.pair(seed, device, "old-pack")) == (0, 0, None)
    html = await (await admin_client.client.get(resp.headers["Location"])).text()
    assert "已重新开始人工监督" in html and "监督中：已确认 0 / 3" in html and "已暂停" not in html
    a = sync_conn.execute(
        "SELECT actor_id, detail_json FROM audit_log WHERE action = 'supervision.resupervise'"
    ).fetchone()
    assert a["actor_id"] == "ops" and json.loads(a["detail_json"])["pairs"] == 2
    resp = await admin_client.post_json(f"/devices/{device}/resupervise", {})
    assert resp.status == 200 and await resp.json() == {"device_id": device, "pairs_reset": 2}
    for bad in (new_id(), "x"):
        assert (await admin_client.post_form(f"/devices/{bad}/resupervise", {})).status == 404
    sync_conn.execute("BEGIN IMMEDIATE")
    sync_conn.execute("UPDATE devices SET supervision_off = 1 WHERE id = ?", (device,))
    sync_conn.execute("COMMIT")
    assert '不监督<span class="muted">（此设备已豁免）' in await (await admin_client.client.get("/devices")).text()


async def test_what_the_phone_read_is_escaped(
    admin_client: AdminClient, make_task: Any, make_device: Any, seed: Any
) -> None:
    task = make_task(start=True)
    device = make_device().device_id
    attempt = sv.supervised_claim(seed, task.id, device, pack_key="p<b>x")
    sv.approval(
        seed,
        task.id,
        attempt,
        device,
        values=sv.readings(
            selected_options=[["颜色", "<script>alert(1)</script>"], ["尺码", "M(建议100-115)"]],
            payment_mode='"><img src=x onerror=alert(1)>',
        ),
    )
    html = await (await admin_client.client.get(f"/tasks/{task.id}", headers=DRAWER)).text()
    assert "<script>alert(1)" not in html and "<img src=x" not in html and "<b>x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "p&lt;b&gt;x" in html
    assert html.count('class="mismatch"') == 2  # colour and payment mode
