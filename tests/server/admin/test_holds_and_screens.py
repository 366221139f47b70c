"""Holds handled from the admin pages (docs/api.md "Holds and screens", docs/admin.md "Devices
page") over the real device API and admin routes: the heartbeat's hold shows on the devices page with its
reason (Chinese and code), since when, the task and the failure screenshot; 释放 (CSRF, required note,
audited) comes back as ``hold_released`` for that hold only; 查看当前屏幕 goes out as ``screenshot_request``
and comes back as an image (stored for the device, kept by evidence gc) or as the package in front (no
image)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from cmbuyer.schemas import validate
from cmbuyer.server.tx.common import new_id
from tests.server.claims.conftest import HEARTBEAT, heartbeat_body, post
from tests.server.evidence.conftest import gc  # noqa: F401 — fixture
from tests.server.submissions.helpers import evidence_fields, fail_body, fail_path, multipart, png, upload

from .conftest import AdminClient

FEATURES = ["pause", "hold_release", "screenshot"]
SCREEN = "/api/v1/devices/screen"


async def _beat(client: Any, dev: Any, **extra: Any) -> dict[str, Any]:
    body = heartbeat_body(dev.device_id, pdd_version_code=81700, **{"features": FEATURES, **extra})
    status, raw, _ = await post(client, HEARTBEAT, dev, body)
    assert status == 200, raw
    answer: dict[str, Any] = json.loads(raw)
    validate("heartbeat.response", answer)
    return answer


def _row(html: str, device_id: str) -> str:
    return html.split(f'data-device-extra="{device_id}"')[1].split("</tr>")[0]


async def test_hold_shows_with_task_and_screenshot_and_release_goes_back_once(
    admin_client: AdminClient, make_device: Any, make_task: Any, clock: Any, sync_conn: Any
) -> None:
    from tests.server.submissions.helpers import claim_http

    client = admin_client.client
    make_task(title="被风控拦下的任务", start=True)
    dev_creds = make_device("held-phone")
    claim = await claim_http(client, dev_creds)
    shot = png()
    status, raw = await upload(
        client, claim.device, claim.task_id, *multipart(evidence_fields(claim, shot, kind="FAILURE"), shot)
    )
    assert status == 201, raw
    asset_id = json.loads(raw)["asset_id"]
    status, raw, _ = await post(
        client,
        fail_path(claim.attempt_id),
        claim.device,
        fail_body(claim, reason_code="RISK_WALL", evidence_asset_id=asset_id),
    )
    assert status == 200, raw

    hold = {"code": "RISK_WALL", "reason": "RISK_WALL: a phone-level stop", "attempt_id": claim.attempt_id}
    answer = await _beat(client, claim.device, state="NEEDS_PERSON", hold=hold)
    assert "hold_released" not in answer
    html = await (await client.get("/devices")).text()
    row = _row(html, claim.device.device_id)
    for expected in (
        "需要人工处理",
        "遇到风控拦截",
        "RISK_WALL",
        "被风控拦下的任务",
        f"/tasks/{claim.task_id}",
        f"/evidence/{asset_id}",
        "释放",
    ):
        assert expected in row, expected

    # 释放 needs a note (and CSRF); then the next heartbeat that still reports this hold gets it back
    assert (
        await admin_client.post_form(f"/devices/{claim.device.device_id}/release-hold", {"note": " "})
    ).status == 400
    assert (await client.post(f"/devices/{claim.device.device_id}/release-hold", data={"note": "x"})).status == 403
    resp = await admin_client.post_form(
        f"/devices/{claim.device.device_id}/release-hold", {"note": "手机已解锁，风控验证已完成"}
    )
    assert resp.status == 303 and resp.headers["Location"] == "/devices?notice=released"
    answer = await _beat(client, claim.device, state="NEEDS_PERSON", hold=hold)
    assert answer["hold_released"] == {
        "by": "admin:ops",
        "at": answer["hold_released"]["at"],
        "note": "手机已解锁，风控验证已完成",
    }
    assert "hold_released" not in await _beat(client, claim.device, state="NEEDS_PERSON", hold=hold, features=[])
    # the agent dropped its hold: the server forgets hold and release; a later, new hold is not released
    await _beat(client, claim.device)
    clock.advance(5)
    newer = {"code": "APP_UPDATE_PROMPT", "reason": "APP_UPDATE_PROMPT: update", "attempt_id": None}
    assert "hold_released" not in await _beat(client, claim.device, state="NEEDS_PERSON", hold=newer)
    audit = sync_conn.execute(
        "SELECT actor_kind, actor_id, action, detail_json FROM audit_log"
        " WHERE subject_id = ? AND action LIKE 'device.hold%' ORDER BY id",
        (claim.device.device_id,),
    ).fetchall()
    assert [(r[0], r[2]) for r in audit] == [
        ("device", "device.hold"),
        ("admin", "device.hold_release"),
        ("device", "device.hold_cleared"),
        ("device", "device.hold"),
    ]
    assert (
        json.loads(audit[1][3]) == {"note": "手机已解锁，风控验证已完成", "code": "RISK_WALL"} and audit[1][1] == "ops"
    )
    # a phone that reports no hold cannot be released
    other = make_device("fine-phone")
    await _beat(client, other)
    assert (await admin_client.post_form(f"/devices/{other.device_id}/release-hold", {"note": "看过了"})).status == 409


async def test_screen_request_image_or_package_and_gc_keeps_it(
    admin_client: AdminClient,
    make_device: Any,
    sync_conn: Any,
    gc: Any,  # noqa: F811
) -> None:
    client = admin_client.client
    dev = make_device("idle-phone")
    assert "screenshot_request" not in await _beat(client, dev)
    resp = await admin_client.post_json(f"/devices/{dev.device_id}/screen-request", {})
    request_id = (await resp.json())["request_id"]
    assert (await _beat(client, dev))["screenshot_request"] == request_id
    assert "screenshot_request" not in await _beat(client, dev, features=["pause"])  # an agent that cannot answer
    assert "已请求当前屏幕" in _row(await (await client.get("/devices")).text(), dev.device_id)

    shot = png(size=(36, 64))
    fields = {"request_id": request_id, "sha256": hashlib.sha256(shot).hexdigest()}
    body, ctype = multipart(fields, shot)
    first = await client.post(SCREEN, data=body, headers={"Content-Type": ctype, **dev.headers()})
    assert first.status == 201, await first.text()
    screen_id = (await first.json())["screen_id"]
    again = await client.post(SCREEN, data=body, headers={"Content-Type": ctype, **dev.headers()})
    assert again.status == 200 and (await again.json())["screen_id"] == screen_id  # a retry, same answer
    assert "screenshot_request" not in await _beat(client, dev)
    html = _row(await (await client.get("/devices")).text(), dev.device_id)
    assert f"/device-screens/{screen_id}" in html
    image = await client.get(f"/device-screens/{screen_id}")
    assert image.status == 200 and await image.read() == shot and image.headers["Content-Type"] == "image/png"
    assert (await client.get(f"/device-screens/{new_id()}")).status == 404
    gc_report = gc.ok("--older-than", "0")
    assert gc_report["removed"] == 0 and (await client.get(f"/device-screens/{screen_id}")).status == 200

    # not pending any more / unknown / bad PNG / no auth → refused, nothing stored
    unknown = {"request_id": new_id(), "sha256": hashlib.sha256(shot).hexdigest()}
    b2, c2 = multipart(unknown, shot)
    assert (await client.post(SCREEN, data=b2, headers={"Content-Type": c2, **dev.headers()})).status == 409
    b3, c3 = multipart({**unknown, "sha256": "0" * 64}, shot)
    assert (await client.post(SCREEN, data=b3, headers={"Content-Type": c3, **dev.headers()})).status == 400
    assert (await client.post(SCREEN, data=b2, headers={"Content-Type": c2})).status == 401

    # with a cashier in front the phone answers with the package only: shown, no image stored
    resp = await admin_client.post_json(f"/devices/{dev.device_id}/screen-request", {})
    second = (await resp.json())["request_id"]
    assert (await _beat(client, dev))["screenshot_request"] == second
    cashier = {"request_id": second, "foreground_package": "com.eg.android.AlipayGphone"}
    assert "screenshot_request" not in await _beat(client, dev, screen=cashier)
    html = _row(await (await client.get("/devices")).text(), dev.device_id)
    assert "com.eg.android.AlipayGphone" in html and "未截图" in html and "/device-screens/" not in html
    rows = sync_conn.execute("SELECT sha256, foreground_package FROM device_screens ORDER BY rowid").fetchall()
    assert [tuple(r) for r in rows][-1] == (None, "com.eg.android.AlipayGphone")
    bad = {"request_id": new_id(), "foreground_package": "com.x\n"}
    status, _, _ = await post(client, HEARTBEAT, dev, heartbeat_body(dev.device_id, screen=bad))
    assert status == 400
    actions = [
        r[0]
        for r in sync_conn.execute("SELECT action FROM audit_log WHERE subject_id = ? ORDER BY id", (dev.device_id,))
    ]
    assert actions.count("device.screen_request") == 2 and actions.count("device.screen") == 2


async def test_a_release_without_a_note_field_is_refused_with_the_tables_sentence(
    admin_client: AdminClient, make_device: Any
) -> None:
    """No ``note`` at all (a form without the field, JSON with a non-text note) is the same refusal as an empty
    one: 400 with the one sentence the refusal table has for ``release_note``, and nothing released."""
    device = make_device()
    path = f"/devices/{device.device_id}/release-hold"
    resp = await admin_client.post_form(path, {})
    assert resp.status == 400
    assert "请写明检查了什么（1–500 个字符）" in await resp.text()
    resp = await admin_client.post_json(path, {"note": 5})
    assert resp.status == 400
    assert "请写明检查了什么（1–500 个字符）" in await resp.text()
