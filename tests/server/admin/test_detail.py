"""GET /tasks/{id}: full page vs drawer fragment (docs/admin.md "Detail page and drawer"), what the detail shows, and
the live-view fragments."""

from __future__ import annotations

from typing import Any

import pytest

from cmbuyer.server.tx.common import new_id

from .conftest import AdminClient

DRAWER = {"X-CMBuyer-View": "drawer", "Accept": "text/html"}


async def test_full_page_shows_everything(
    admin_client: AdminClient, make_task: Any, make_device: Any, seed: Any, clock: Any
) -> None:
    task = make_task(start=True)
    device = make_device("Pixel-7 采购机")
    attempt = seed.claim(task.id, device.device_id, ordering=True)
    seed.events(task.id, attempt, [("OPEN_PRODUCT", "OK", None, "商品页已确认"), ("GATE_1", "OK", None, "规格一致")])
    asset = seed.evidence(task.id, attempt, device.device_id)
    sid = seed.fence(task.id, attempt, device.device_id, observation="UNKNOWN")
    resp = await admin_client.client.get(f"/tasks/{task.id}")
    assert resp.status == 200
    html = await resp.text()
    assert html.startswith("<!doctype html>")
    for expected in (
        task.title,
        task.goods_id,
        "待人工核对",
        "Pixel-7 采购机",
        "商品页已确认",
        "GATE_1",
        f'src="/evidence/{asset}"',
        sid,
        "UNKNOWN",
        "task.start_purchase",
        "CONSUMED",
        f"/order-submissions/{sid}/reconcile",
        "已创建待付款订单",
        "确认未创建",
    ):
        assert expected in html, expected
    assert "重置为草稿" not in html and "取消任务" not in html  # fenced: no reset/cancel offered


async def test_lease_expired_needs_a_person(
    admin_client: AdminClient, make_task: Any, make_device: Any, seed: Any, clock: Any
) -> None:
    task = make_task(start=True)
    seed.claim(task.id, make_device().device_id, lease_s=30)
    html = await (await admin_client.client.get(f"/tasks/{task.id}")).text()
    assert "租约已过期" not in html
    clock.advance(30)  # now == lease end: expired
    html = await (await admin_client.client.get(f"/tasks/{task.id}")).text()
    assert "租约已过期 — 需要人工处理" in html


async def test_drawer_fragment_for_same_origin_html_request(admin_client: AdminClient, make_task: Any) -> None:
    task = make_task()
    resp = await admin_client.client.get(
        f"/tasks/{task.id}", headers={**DRAWER, "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}
    )
    assert resp.status == 200
    html = await resp.text()
    assert "<html" not in html and html.lstrip().startswith("{#") is False
    assert f'data-task-id="{task.id}"' in html and "<article" in html
    assert "X-CMBuyer-View" in resp.headers["Vary"]
    assert resp.headers["Cache-Control"] == "no-store"


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 200),  # navigation → full page
        ({"X-CMBuyer-View": ""}, 200),  # empty view → full page
        ({"X-CMBuyer-View": "full"}, 400),  # other non-empty view
        ({"X-CMBuyer-View": "Drawer", "Accept": "text/html"}, 400),
        ({**DRAWER, "Sec-Fetch-Site": "cross-site"}, 403),
        ({**DRAWER, "Sec-Fetch-Site": "same-site"}, 403),
        ({**DRAWER, "Sec-Fetch-Site": "none"}, 403),
        ({**DRAWER, "Origin": "https://evil.example"}, 403),
        ({**DRAWER, "Origin": "null"}, 403),
        ({**DRAWER, "Sec-Fetch-Mode": "navigate"}, 403),
        ({"X-CMBuyer-View": "drawer", "Accept": "application/json"}, 406),
        ({"X-CMBuyer-View": "drawer", "Accept": "text/html;q=0"}, 406),
        ({"X-CMBuyer-View": "drawer"}, 406),
    ],
)
async def test_drawer_rules(admin_client: AdminClient, make_task: Any, headers: dict[str, str], status: int) -> None:
    task = make_task()
    resp = await admin_client.client.get(f"/tasks/{task.id}", headers=headers)
    assert resp.status == status
    if status == 200:
        assert "<!doctype html>" in await resp.text()  # full page


async def test_drawer_requires_login(server_client: Any, make_task: Any) -> None:
    task = make_task()
    resp = await server_client.get(f"/tasks/{task.id}", headers=DRAWER, allow_redirects=False)
    assert resp.status == 401


async def test_unknown_and_malformed_task_ids(admin_client: AdminClient) -> None:
    assert (await admin_client.client.get(f"/tasks/{new_id()}")).status == 404
    assert (await admin_client.client.get("/tasks/NOT-A-UUID")).status == 404
    assert (await admin_client.client.get(f"/tasks/{new_id().upper()}")).status == 404


async def test_live_rows_fragment_follows_state_changes(
    admin_client: AdminClient, make_task: Any, seed: Any, make_device: Any
) -> None:
    task = make_task(start=True)
    headers = {"X-CMBuyer-View": "rows", "Accept": "text/html"}
    html = await (await admin_client.client.get("/tasks", headers=headers)).text()
    assert "<tr" in html and "<html" not in html and "待领取" in html
    device = make_device("phone-A")
    attempt = seed.claim(task.id, device.device_id, ordering=True)
    seed.events(task.id, attempt, [("GATE_1", "OK", None, "ok")])
    html = await (await admin_client.client.get("/tasks", headers=headers)).text()
    assert "下单中" in html and "GATE_1" in html and "phone-A" in html
    assert (await admin_client.client.get("/tasks", headers={**headers, "Sec-Fetch-Site": "cross-site"})).status == 403
    assert (
        await admin_client.client.get("/tasks", headers={"X-CMBuyer-View": "drawer", "Accept": "text/html"})
    ).status == 400


async def test_live_drawer_stamp_changes_with_progress(
    admin_client: AdminClient, make_task: Any, seed: Any, make_device: Any
) -> None:
    import re

    task = make_task(start=True)

    async def stamp() -> str:
        html = await (await admin_client.client.get(f"/tasks/{task.id}", headers=DRAWER)).text()
        m = re.search(r'data-stamp="([^"]+)"', html)
        assert m
        return m.group(1)

    s1 = await stamp()
    device = make_device()
    attempt = seed.claim(task.id, device.device_id)
    s2 = await stamp()
    seed.events(task.id, attempt, [("OPEN_PRODUCT", "STARTED", None, "")])
    s3 = await stamp()
    assert len({s1, s2, s3}) == 3


async def test_detail_without_size_and_with_order_number(
    admin_client: AdminClient, make_task: Any, make_device: Any, seed: Any
) -> None:
    task = make_task(size=None, start=True)
    device = make_device()
    attempt = seed.claim(task.id, device.device_id, ordering=True)
    seed.fence(task.id, attempt, device.device_id, observation="EXTERNAL_PAYMENT_HANDOFF", order_sn="241201-5551234567")
    html = await (await admin_client.client.get(f"/tasks/{task.id}")).text()
    assert "<dt>颜色</dt><dd>黑色CHA(纯棉)</dd>" in html and "<dt>尺码</dt>" not in html and "None" not in html
    for expected in ("241201-5551234567", "订单编号", "支付方式", "微信支付", "闸门三"):
        assert expected in html, expected
    assert 'class="alarm"' not in html  # no banner without PAYMENT_SUSPECTED


async def test_payment_suspected_banner_in_page_and_drawer(
    admin_client: AdminClient, make_task: Any, make_device: Any, seed: Any
) -> None:
    task = make_task(start=True)
    device = make_device()
    attempt = seed.claim(task.id, device.device_id, ordering=True)
    seed.fence(task.id, attempt, device.device_id, observation="UNKNOWN", observation_reason="PAYMENT_SUSPECTED")
    for headers in ({}, DRAWER):
        html = await (await admin_client.client.get(f"/tasks/{task.id}", headers=headers)).text()
        assert 'class="alarm" role="alert"' in html and "疑似已付款：请立即在手机上核对" in html
        assert "PAYMENT_SUSPECTED" in html
        assert "/reconcile" in html  # the person still records the outcome the usual way
