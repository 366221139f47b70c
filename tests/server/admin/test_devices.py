"""GET /devices and POST /devices/{id}/revoke (same service as the CLI)."""

from __future__ import annotations

from typing import Any

from cmbuyer.server.clock import to_wire
from cmbuyer.server.tx.common import new_id

from .conftest import AdminClient


async def test_devices_page_lists_heartbeat_version_and_claim(
    admin_client: AdminClient, make_device: Any, make_task: Any, seed: Any, sync_conn: Any
) -> None:
    busy, idle = make_device("busy-phone"), make_device("idle-phone")
    sync_conn.execute("BEGIN IMMEDIATE")
    sync_conn.execute(
        "UPDATE devices SET last_heartbeat_at = '2026-08-04T08:59:55.000000Z', client_version = '0.1.0',"
        " pdd_version = '8.17.0', pdd_version_code = 81700, app_version_allowed = 1 WHERE id = ?",
        (busy.device_id,),
    )
    sync_conn.execute(
        "UPDATE devices SET pdd_version = '9.0.0', app_version_allowed = 0 WHERE id = ?", (idle.device_id,)
    )
    sync_conn.execute("COMMIT")
    task = make_task(title="正在采购的任务", start=True)
    seed.claim(task.id, busy.device_id)
    html = await (await admin_client.client.get("/devices")).text()
    for expected in (
        "busy-phone",
        "idle-phone",
        "2026-08-04 16:59:55",
        "8.17.0",
        "81700",
        "允许",
        "不允许",
        "正在采购的任务",
        f"/tasks/{task.id}",
        "从未",
        "已失联",
    ):
        assert expected in html, expected


async def test_revoke_requires_confirmation(admin_client: AdminClient, make_device: Any, sync_conn: Any) -> None:
    device = make_device("p1")
    resp = await admin_client.post_form(f"/devices/{device.device_id}/revoke", {})
    assert resp.status == 400 and "确认" in await resp.text()
    assert sync_conn.execute("SELECT state FROM devices").fetchone()[0] == "ACTIVE"
    resp = await admin_client.post_form(f"/devices/{device.device_id}/revoke", {"confirm": "revoke"})
    assert resp.status == 303 and resp.headers["Location"] == "/devices?notice=revoked"
    assert sync_conn.execute("SELECT state FROM devices").fetchone()[0] == "REVOKED"
    assert sync_conn.execute("SELECT actor_kind, action FROM audit_log WHERE action = 'device.revoke'").fetchone()[
        :
    ] == ("admin", "device.revoke")
    again = await admin_client.post_json(f"/devices/{device.device_id}/revoke", {"confirm": "revoke"})
    assert again.status == 200 and (await again.json())["changed"] is False
    assert (await admin_client.post_json(f"/devices/{new_id()}/revoke", {"confirm": "revoke"})).status == 404
    html = await (await admin_client.client.get("/devices?notice=revoked")).text()
    assert "已撤销" in html


async def test_revoked_device_token_stops_working(admin_client: AdminClient, make_device: Any) -> None:
    device = make_device("p2")
    client = admin_client.client
    paths = {r.resource.canonical for r in client.app.router.routes() if r.resource is not None}
    await admin_client.post_form(f"/devices/{device.device_id}/revoke", {"confirm": "revoke"})
    if "/api/v1/tasks/claim-next" in paths:
        client.session.cookie_jar.clear()
        resp = await client.post(
            "/api/v1/tasks/claim-next",
            headers=device.headers(),
            json={"session_id": new_id(), "claim_request_id": new_id()},
        )
        assert resp.status == 401


async def test_devices_page_pack_column(admin_client: AdminClient, make_device: Any, sync_conn: Any) -> None:
    """识别包: the pack id, the runbook hint for NO_PACK, "—" when never reported (NULL)."""
    packed, missing, unknown = make_device("packed"), make_device("missing"), make_device("unknown")
    sync_conn.execute("BEGIN IMMEDIATE")
    sync_conn.execute("UPDATE devices SET pack_id = 'pdd-8.17.0-81700' WHERE id = ?", (packed.device_id,))
    sync_conn.execute("UPDATE devices SET pack_id = 'NO_PACK' WHERE id = ?", (missing.device_id,))
    sync_conn.execute("COMMIT")
    html = await (await admin_client.client.get("/devices")).text()
    assert "<th>识别包</th>" in html

    def cell(device_id: str) -> str:
        row = html.split(f'data-device-id="{device_id}"', 1)[1].split("</tr>", 1)[0]
        return row.split('<td class="pack">', 1)[1].split("</td>", 1)[0]

    assert "<code>pdd-8.17.0-81700</code>" in cell(packed.device_id)
    assert "缺少识别包" in cell(missing.device_id) and "New app version runbook" in cell(missing.device_id)
    assert "NO_PACK" not in cell(missing.device_id)  # the hint, not the wire marker
    assert "—" in cell(unknown.device_id) and "缺少识别包" not in cell(unknown.device_id)


async def test_pause_resume_and_pacing_from_the_page(
    admin_client: AdminClient, make_device: Any, make_task: Any, seed: Any, sync_conn: Any, clock: Any
) -> None:
    """暂停领取 / 恢复领取 and 领取节奏 forms (CSRF, audited as the admin), shown on the page."""
    device = make_device("节奏手机")
    page = await (await admin_client.client.get("/devices")).text()
    assert "暂停领取" in page and f'action="/devices/{device.device_id}/pause"' in page

    resp = await admin_client.post_form(f"/devices/{device.device_id}/pause", {})
    assert resp.status == 303 and resp.headers["Location"] == "/devices?notice=paused"
    html = await (await admin_client.client.get("/devices?notice=paused")).text()
    assert "设备已暂停" in html and "恢复领取" in html and f'action="/devices/{device.device_id}/resume"' in html
    again = await admin_client.post_json(f"/devices/{device.device_id}/pause", {})
    assert again.status == 200 and await again.json() == {
        "device_id": device.device_id,
        "paused": True,
        "changed": False,
    }
    resp = await admin_client.post_form(f"/devices/{device.device_id}/resume", {})
    assert resp.status == 303 and resp.headers["Location"] == "/devices?notice=resumed"

    resp = await admin_client.post_form(
        f"/devices/{device.device_id}/pacing", {"min_claim_interval_seconds": "600", "max_claims_per_day": ""}
    )
    assert resp.status == 303 and resp.headers["Location"] == "/devices?notice=pacing"
    task = make_task(start=True)
    seed.claim(task.id, device.device_id)
    sync_conn.execute("BEGIN IMMEDIATE")  # the claim as claim-next counts it (seed writes rows directly)
    sync_conn.execute("UPDATE devices SET last_claim_at = ? WHERE id = ?", (to_wire(clock.now()), device.device_id))
    sync_conn.execute("COMMIT")
    html = await (await admin_client.client.get("/devices")).text()
    assert "间隔 ≥ 600 秒" in html and "节奏限制" in html and "领取 1" in html
    for bad in ({"min_claim_interval_seconds": "0"}, {"max_claims_per_day": "abc"}, {"max_claims_per_day": "10001"}):
        assert (await admin_client.post_form(f"/devices/{device.device_id}/pacing", bad)).status == 400
    rows = sync_conn.execute(
        "SELECT actor_kind, action FROM audit_log WHERE subject_id = ?"
        " AND action IN ('device.pause', 'device.resume', 'device.pacing') ORDER BY rowid",
        (device.device_id,),
    ).fetchall()
    assert [tuple(r) for r in rows] == [
        ("admin", "device.pause"),
        ("admin", "device.resume"),
        ("admin", "device.pacing"),
    ]
    # no CSRF token → 403, nothing changed
    resp = await admin_client.client.post(f"/devices/{device.device_id}/pause", data={})
    assert resp.status == 403
    assert sync_conn.execute("SELECT paused_at FROM devices WHERE id = ?", (device.device_id,)).fetchone()[0] is None
    await admin_client.post_form(f"/devices/{device.device_id}/revoke", {"confirm": "revoke"})
    assert (await admin_client.post_json(f"/devices/{device.device_id}/pause", {})).status == 409
    assert (await admin_client.post_json(f"/devices/{new_id()}/pause", {})).status == 404


async def test_stale_heartbeat_shows_lost_never_idle(
    admin_client: AdminClient, make_device: Any, sync_conn: Any
) -> None:
    """A READY phone whose heartbeat is older than interval × factor is 已失联, not 空闲; a fresh
    one shows its age and adb serial."""
    lost, fresh = make_device("lost-phone"), make_device("fresh-phone")
    sync_conn.execute("BEGIN IMMEDIATE")
    for device, at in ((lost, "2026-08-04T08:50:00.000000Z"), (fresh, "2026-08-04T08:59:48.000000Z")):
        sync_conn.execute(
            "UPDATE devices SET last_heartbeat_at = ?, reported_state = 'READY', adb_serial = 'sim-9' WHERE id = ?",
            (at, device.device_id),
        )
    sync_conn.execute("COMMIT")
    html = await (await admin_client.client.get("/devices")).text()
    lost_row = html.split(f'data-device-id="{lost.device_id}"')[1].split("</tr>")[0]
    fresh_row = html.split(f'data-device-id="{fresh.device_id}"')[1].split("</tr>")[0]
    assert "已失联" in lost_row and "空闲" not in lost_row and "10 分钟前" in lost_row
    assert "已失联" not in fresh_row and "空闲" in fresh_row and "12 秒前" in fresh_row and "sim-9" in fresh_row


async def test_task_search_by_phone_name(
    admin_client: AdminClient, make_device: Any, make_task: Any, seed: Any
) -> None:
    """The task table's 手机 filter lists the tasks a phone of that name claimed; the devices page
    links each phone to it."""
    one, two = make_device("采购机 一号"), make_device("采购机 二号")
    mine, theirs, nobody = (make_task(title=t, start=True) for t in ("一号的任务", "二号的任务", "没人领的任务"))
    seed.claim(mine.id, one.device_id)
    seed.claim(theirs.id, two.device_id)
    html = await (await admin_client.client.get("/tasks", params={"phone": "采购机 一号"})).text()
    assert f'data-task-id="{mine.id}"' in html
    assert f'data-task-id="{theirs.id}"' not in html and f'data-task-id="{nobody.id}"' not in html
    assert 'name="phone" value="采购机 一号"' in html
    devices = await (await admin_client.client.get("/devices")).text()
    assert "/tasks?phone=%E9%87%87%E8%B4%AD%E6%9C%BA%20%E4%B8%80%E5%8F%B7" in devices
