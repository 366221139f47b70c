"""GET /devices and POST /devices/{id}/revoke (same service as the CLI)."""

from __future__ import annotations

from typing import Any

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
    """识别包 (issue 16 §6): the pack id, the runbook hint for NO_PACK, "—" when never reported (NULL)."""
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
