"""One-dimension goods and the order sheet on the admin pages in real headless Chromium: a one-dimension task created
through the form
(empty size), fenced and reported over the real device API with an order number and PAYMENT_SUSPECTED;
the list shows "—" for the size, the drawer and the full page show the order number, the read gate-3
price and payment mode, and the red "疑似已付款" banner; the person then records the outcome through the
usual reconcile form. Screenshots go to ``test-artifacts/admin-browser/order-sheet-*.png``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from cmbuyer.server.app import create_app
from tests.server.submissions.helpers import claim_http, fence_body, fence_path, post_json, result_body, result_path

from .browser import ARTIFACTS, BROWSER_MARKS, chromium_page, create_draft, log_in

pytestmark = BROWSER_MARKS

ORDER_SN = "241201-7788990011"


async def test_order_number_and_payment_suspected_banner(
    aiohttp_server: Any, aiohttp_client: Any, settings: Any, admin: str, make_device: Any, clock: Any, sync_conn: Any
) -> None:
    from playwright.async_api import expect

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    clock.set(datetime.now(UTC))
    server = await aiohttp_server(create_app(settings))  # real clock
    device_api = await aiohttp_client(server)
    base = str(server.make_url("")).rstrip("/")
    async with chromium_page() as (page, problems):
        await log_in(page, base)

        # a one-dimension task: one option row, the other rows left empty
        await page.click("details.create summary")
        await expect(page.locator("details.create")).to_contain_text("页面显示几项就填几项")
        await create_draft(page, "口红 单规格", [("颜色", "#01 正红色")])
        row = page.locator("#task-rows tr[data-task-id]")
        await expect(row).to_have_count(1)
        await expect(row).to_contain_text("颜色=#01 正红色")
        await page.check("#select-all")
        await page.get_by_role("button", name="开始采购（只创建待付款订单）", exact=True).click()
        await page.click("#confirm-start")
        await expect(page.locator(".notice")).to_contain_text("已开始采购")
        task_id = await row.get_attribute("data-task-id")

        # the phone's side, over the real device API: claim (size null), fence on the values read, then
        # the result with the order number read on 待付款 and a paid state seen after the tap
        claim = await claim_http(device_api, make_device("采购机 B"))
        assert claim.task_id == task_id and claim.sku_options == [["颜色", "#01 正红色"]]
        status, raw = await post_json(
            device_api,
            fence_path(claim.attempt_id),
            claim.device,
            fence_body(claim, payment_mode="支付宝", confirm_page_amount="25.00"),
        )
        assert status == 200, raw
        sid = json.loads(raw)["submission_id"]
        status, raw = await post_json(
            device_api,
            result_path(sid),
            claim.device,
            result_body(claim, "UNKNOWN", order_sn=ORDER_SN, observation_reason="PAYMENT_SUSPECTED"),
        )
        assert status == 200, raw

        await expect(page.locator(f"tr[data-task-id='{task_id}'] .state")).to_have_text("待人工核对")
        await page.click(f"tr[data-task-id='{task_id}'] a.open-drawer")
        drawer = page.locator("#drawer")
        await expect(drawer).to_be_visible()
        banner = drawer.locator("p.alarm[role=alert]")
        await expect(banner).to_be_visible()
        await expect(banner).to_contain_text("疑似已付款：请立即在手机上核对")
        color = await banner.evaluate("b => getComputedStyle(b).backgroundColor")
        assert color == "rgb(185, 28, 28)", color  # red, not the pale warning box
        await expect(drawer.locator("code.order-sn")).to_have_text(ORDER_SN)
        await drawer.screenshot(path=str(ARTIFACTS / "order-sheet-drawer.png"))

        await page.goto(f"{base}/tasks/{task_id}")
        detail = page.locator("article.detail")
        await expect(detail.locator("p.alarm")).to_be_visible()
        await expect(detail.locator("code.order-sn")).to_have_text(ORDER_SN)
        for text in ("支付宝", "闸门三 ¥12.88", "疑似已付款", "PAYMENT_SUSPECTED", "颜色=#01 正红色 × "):
            await expect(detail).to_contain_text(text)
        await page.screenshot(path=str(ARTIFACTS / "order-sheet-detail.png"), full_page=True)

        # the usual reconciliation still settles it
        form = detail.locator("form.reconcile")
        await form.locator("input[value=created]").check()
        await form.locator("textarea[name=note]").fill(f"手机上看到订单 {ORDER_SN} 待付款，未付款")
        await form.locator("button[type=submit]").click()
        await expect(page.locator(".notice")).to_be_visible()
        state = sync_conn.execute("SELECT state FROM order_submissions WHERE id = ?", (sid,)).fetchone()[0]
        assert state == "CREATED"
        await expect(page.locator("code.order-sn")).to_have_text(ORDER_SN)  # kept after reconciliation
        await expect(page.locator("p.alarm")).to_have_count(0)  # attended to: the alarm goes
        await expect(page.locator("article.detail")).to_contain_text("PAYMENT_SUSPECTED")  # the fact stays
    assert problems == [], problems
