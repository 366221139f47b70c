"""Supervised first orders on the admin pages in real headless Chromium (admin side).

The real app runs on a loopback port against a real SQLite file; the device-side rows (a supervised
claim, its approval request with the gate-3 screenshot, a supervised order) are seeded by
``seed_supervision.py`` (this module is about the pages; the whole path through the real device
routes and a real agent is the supervision end-to-end test). The person:
sees the "等待人工确认" badge appear live in the task table and on the devices page, opens the drawer,
reads the side-by-side values with the mismatch highlighted and the screenshot, approves; rejects
another one on the full page; marks supervised orders right and wrong; puts the device back under
supervision. Screenshots go to ``test-artifacts/admin-browser/supervision-*.png``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from cmbuyer.server.app import create_app

from .browser import ARTIFACTS, BROWSER_MARKS, chromium_page, log_in
from .seed_supervision import (
    PACK_KEY,
    approval,
    pair,
    readings,
    supervised_claim,
    supervised_orders,  # noqa: F401  (fixture: N = 3)
)

pytestmark = BROWSER_MARKS


def _state(sync_conn: Any, approval_id: str) -> str:
    return sync_conn.execute("SELECT state FROM approval_requests WHERE id = ?", (approval_id,)).fetchone()[0]


async def test_approve_reject_badges_verdicts_and_resupervise(
    aiohttp_server: Any,
    settings: Any,
    admin: str,
    make_task: Any,
    make_device: Any,
    seed: Any,
    clock: Any,
    sync_conn: Any,
) -> None:
    from playwright.async_api import expect

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    clock.set(datetime.now(UTC))  # seeded rows use the server's real time
    server = await aiohttp_server(create_app(settings))  # before seeding: its start-up check reads claims
    base = str(server.make_url("")).rstrip("/")
    phone_a, phone_b = make_device("采购机 A").device_id, make_device("采购机 B").device_id
    seed._tx(
        lambda c: c.execute(
            "UPDATE devices SET pack_id = ?, pdd_version = '8.22.0', pdd_version_code = 82200", (PACK_KEY,)
        )
    )
    first = make_task(title="纯棉短袖 监督一", start=True)
    second = make_task(title="纯棉短袖 监督二", start=True)
    a_first = supervised_claim(seed, first.id, phone_a)
    a_second = supervised_claim(seed, second.id, phone_b)
    async with chromium_page(http_errors=True) as (page, problems):
        await log_in(page, base)
        row = page.locator(f"tr[data-task-id='{first.id}']")
        await expect(row).to_be_visible()
        await expect(row.locator(".badge.waiting")).to_have_count(0)

        # the phone asks: the badge appears live (polling), without a reload
        ap_first, asset = approval(seed, first.id, a_first, phone_a, values=readings(gate3_unit_price="13.88"))
        await expect(row.locator(".badge.waiting")).to_have_text("等待人工确认", timeout=8_000)
        await expect(page.locator(f"tr[data-task-id='{second.id}'] .badge.waiting")).to_have_count(0)

        # the drawer: side by side, the mismatch highlighted, the gate-3 screenshot
        await row.locator("a.open-drawer").click()
        drawer = page.locator("#drawer")
        panel = drawer.locator("section.approval")
        await expect(panel).to_be_visible()
        await expect(panel.locator("h3")).to_contain_text("等待人工确认")
        bad = panel.locator("table.compare tr.mismatch")
        await expect(bad).to_have_count(1)
        await expect(bad.locator("th")).to_have_text("闸门三单价")
        await expect(bad.locator("td.read")).to_have_text("¥13.88")
        assert await bad.locator("td.read").evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(254, 226, 226)"
        ok_row = panel.locator("table.compare tr.ok", has_text="颜色")
        await expect(ok_row).to_contain_text("黑色CHA(纯棉)")
        await expect(panel.locator("table.compare tr.ok")).to_have_count(7)
        await expect(panel).to_contain_text("三次读取的单价不一致")
        shot = panel.locator(f"img[src='/evidence/{asset}']")
        await expect(shot).to_be_visible()
        await page.wait_for_function("img => img.complete && img.naturalWidth === 180", arg=await shot.element_handle())
        await drawer.screenshot(path=str(ARTIFACTS / "supervision-drawer.png"))
        await panel.get_by_role("button", name="批准", exact=True).click()
        await expect(page).to_have_url(re.compile(r"/tasks\?notice=approved$"))
        await expect(page.locator(".notice")).to_contain_text("已批准")
        assert _state(sync_conn, ap_first) == "APPROVED"
        await expect(page.locator(f"tr[data-task-id='{first.id}'] .badge.waiting")).to_have_count(0)

        # the devices page: the badge for phone B appears live; supervision state per device
        await page.goto(base + "/devices")
        dev_b = page.locator("#device-rows tr", has_text="采购机 B")
        await expect(dev_b.locator(".badge.waiting")).to_have_count(0)
        ap_second, _ = approval(seed, second.id, a_second, phone_b)
        await expect(dev_b.locator(".badge.waiting")).to_have_text("等待人工确认", timeout=8_000)
        await expect(dev_b).to_contain_text("监督中：已确认 0 / 3")
        await page.screenshot(path=str(ARTIFACTS / "supervision-devices-waiting.png"), full_page=True)

        # reject on the full task page (reached from the devices page)
        await dev_b.get_by_role("link", name="去确认").click()
        await expect(page).to_have_url(re.compile(rf"/tasks/{second.id}#approval$"))
        await expect(page.locator("section.approval table.compare tr.mismatch")).to_have_count(0)
        await page.locator("section.approval").get_by_role("button", name="驳回", exact=True).click()
        await expect(page.locator(".notice")).to_contain_text("已驳回")
        await expect(page.locator("section.approval")).to_have_count(0)
        assert _state(sync_conn, ap_second) == "REJECTED"

        # after supervised orders: right on one, wrong (with a note) on the other
        sid_first = seed.fence(first.id, a_first, phone_a, observation="SUBMITTED")
        seed.fail(second.id, a_second)  # the phone stopped after the rejection
        third = make_task(title="纯棉短袖 监督三", start=True)
        a_third = supervised_claim(seed, third.id, phone_b)
        sid_third = seed.fence(third.id, a_third, phone_b, observation="SUBMITTED")
        await page.goto(f"{base}/tasks/{first.id}")
        verdict = page.locator("section.verdict")
        await verdict.get_by_role("button", name="核对无误", exact=True).click()
        await expect(page.locator(".notice")).to_contain_text("核对无误")
        await expect(page.locator("section.verdict")).to_contain_text("核对无误")
        await expect(page.locator("section.verdict form")).to_have_count(0)  # one verdict per order
        assert tuple(pair(seed, phone_a)) == (1, 0, None)
        await page.goto(f"{base}/tasks/{third.id}")
        await page.locator("section.verdict textarea[name=note]").fill("颜色拿错了")
        await page.locator("section.verdict").get_by_role("button", name="有误", exact=True).click()
        await expect(page.locator(".notice")).to_contain_text("已暂停领取")
        await expect(page.locator("section.verdict")).to_contain_text("颜色拿错了")
        held = pair(seed, phone_b)
        assert held["held"] == 1 and "颜色拿错了" in held["held_reason"]
        verdicts = sync_conn.execute(
            "SELECT submission_id, verdict FROM supervision_verdicts ORDER BY verdict"
        ).fetchall()
        assert [tuple(v) for v in verdicts] == [(sid_first, "RIGHT"), (sid_third, "WRONG")]
        await page.screenshot(path=str(ARTIFACTS / "supervision-verdict.png"), full_page=True)

        # the devices page shows both, and puts phone B back under supervision
        await page.goto(base + "/devices")
        dev_a = page.locator("#device-rows tr", has_text="采购机 A")
        dev_b = page.locator("#device-rows tr", has_text="采购机 B")
        await expect(dev_a).to_contain_text("监督中：已确认 1 / 3")
        await expect(dev_b.locator(".supervision-held")).to_contain_text("颜色拿错了")
        await dev_b.get_by_role("button", name="重新人工监督").click()
        await expect(page.locator(".notice")).to_contain_text("已重新开始人工监督")
        await expect(page.locator("#device-rows tr", has_text="采购机 B").locator(".supervision-held")).to_have_count(0)
        assert tuple(pair(seed, phone_b)) == (0, 0, None)
        assert tuple(pair(seed, phone_a)) == (1, 0, None)  # only that device
        await page.screenshot(path=str(ARTIFACTS / "supervision-resupervised.png"), full_page=True)
    assert problems == [], problems


async def test_waiting_orders_are_counted_filtered_and_counted_down(
    aiohttp_server: Any, settings: Any, admin: str, make_task: Any, make_device: Any, seed: Any, clock: Any
) -> None:
    """The task table says how many orders wait for 批准 and when the first phone gives up — an
    order that starts waiting after the page loaded raises the count with the table's live refresh, no reload;
    the 等待人工确认 filter lists them; each row counts down to its phone's timeout, live."""
    from playwright.async_api import expect

    clock.set(datetime.now(UTC))
    server = await aiohttp_server(create_app(settings))
    base = str(server.make_url("")).rstrip("/")
    phone = make_device("采购机 等待").device_id
    waiting = make_task(title="纯棉短袖 等人确认", start=True)
    other = make_task(title="纯棉短袖 不需确认", start=True)
    claim = supervised_claim(seed, waiting.id, phone)
    async with chromium_page(http_errors=True) as (page, problems):
        await log_in(page, base)
        count = page.locator("#waiting-count")
        await expect(count).to_have_text("没有等待人工确认的订单。")
        await page.evaluate("window.loadedOnce = true")  # gone if the page were reloaded
        approval(seed, waiting.id, claim, phone)  # the phone asks for 批准 after the page loaded
        await expect(count).to_contain_text("1 单等待人工确认", timeout=8_000)
        assert await page.evaluate("window.loadedOnce === true")
        await expect(page.locator("#waiting-count")).to_have_count(1)  # replaced, not added
        await expect(count).to_contain_text(re.compile(r"最早一单 (9:[0-5]\d|10:00) 后超时"))
        await count.locator("a").click()
        await expect(page).to_have_url(re.compile(r"/tasks\?state=waiting_approval$"))
        row = page.locator(f"tr[data-task-id='{waiting.id}']")
        await expect(row.locator(".badge.waiting")).to_have_text("等待人工确认")
        await expect(page.locator(f"tr[data-task-id='{other.id}']")).to_have_count(0)
        first = await row.locator(".countdown").inner_text()
        assert re.fullmatch(r"剩 (9:[0-5]\d|10:00)", first), first
        await expect(row.locator(".countdown")).not_to_have_text(first, timeout=8_000)  # the live view counts down
        await page.screenshot(path=str(ARTIFACTS / "supervision-waiting-filter.png"), full_page=True)
    assert problems == [], problems
