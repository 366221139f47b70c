"""Readability of the list, drawer and detail page in real headless Chromium: Chinese labels, the
reconcile action under 操作, headers that do not wrap one character per line, the collapsed 技术细节.
Screenshots go to ``test-artifacts/admin-browser/readable-*.png`` (for people to look at)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cmbuyer.server.app import create_app

from .browser import ARTIFACTS, BROWSER_MARKS, chromium_page, log_in

pytestmark = BROWSER_MARKS


# the steps every seeded order went through before it parted ways
THROUGH_GATE_1 = [("OPEN_PRODUCT", "OK", None, "open product"), ("GATE_1", "OK", None, "gate 1")]


async def test_readable_pages_in_chromium(
    aiohttp_server: Any, settings: Any, admin: str, make_task: Any, make_device: Any, seed: Any, clock: Any
) -> None:
    from playwright.async_api import expect

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    clock.set(datetime.now(UTC))
    server = await aiohttp_server(create_app(settings))  # before seeding: its start-up check reads claims
    device = make_device("采购机 A")
    # a task backed out at gate 3, one waiting for a person, one draft
    failed = make_task(title="加绒卫衣 超价", start=True)
    a1 = seed.claim(failed.id, device.device_id, ordering=True)
    seed.events(
        failed.id,
        a1,
        [
            *THROUGH_GATE_1,
            ("GATE_3", "FAILED", "PRICE_OVER_CAP", "gate 3: total over the cap"),
            ("BACK_OUT", "OK", "PRICE_OVER_CAP", "backed out before fence"),
        ],
    )
    seed.evidence(failed.id, a1, device.device_id, kind="FAILURE")
    seed.fail(failed.id, a1)
    seed._tx(lambda c: c.execute("UPDATE tasks SET state_reason = 'PRICE_OVER_CAP' WHERE id = ?", (failed.id,)))
    recon = make_task(title="纯棉短袖 待核对", start=True)
    a2 = seed.claim(recon.id, device.device_id, ordering=True)
    seed.events(
        recon.id,
        a2,
        [
            *THROUGH_GATE_1,
            ("GATE_2", "OK", None, "gate 2"),
            ("GATE_3", "OK", None, "gate 3"),
            ("FENCE", "OK", None, "fenced"),
            ("SUBMIT_TAP", "OK", None, "tapped"),
            ("OBSERVE_RESULT", "OK", None, "security challenge"),
        ],
    )
    seed.evidence(recon.id, a2, device.device_id)
    seed.fence(recon.id, a2, device.device_id, observation="SECURITY_CHALLENGE")
    seed._tx(
        lambda c: c.execute("UPDATE tasks SET state_reason = 'result:SECURITY_CHALLENGE' WHERE id = ?", (recon.id,))
    )
    make_task(title="草稿 牛仔裤")

    base = str(server.make_url("")).rstrip("/")
    async with chromium_page() as (page, problems):
        await log_in(page, base)

        row = page.locator(f"tr[data-task-id='{failed.id}']")
        await expect(row).to_contain_text("退出下单（未提交） · 确认页总价超过上限")
        await expect(page.locator(f"tr[data-task-id='{recon.id}'] .state")).to_have_text("待人工核对")
        await page.screenshot(path=str(ARTIFACTS / "readable-list.png"), full_page=True)

        # drawer of the task waiting for a person: the action is under 操作
        await page.click(f"tr[data-task-id='{recon.id}'] a.open-drawer")
        drawer = page.locator("#drawer")
        await expect(drawer).to_be_visible()
        await expect(drawer.locator("section.actions form.reconcile")).to_be_visible()
        header = drawer.locator("th:has-text('锁定版本')")
        line = await drawer.locator("th").first.bounding_box()
        box = await header.bounding_box()
        assert box is not None and line is not None and box["height"] <= line["height"] * 1.5, box
        assert box["width"] > box["height"] * 1.5, box  # not one character per line
        await expect(drawer.locator("details.tech")).not_to_have_attribute("open", "")
        await drawer.screenshot(path=str(ARTIFACTS / "readable-drawer.png"))

        # full detail page; 技术细节 stays collapsed until opened
        await page.goto(f"{base}/tasks/{recon.id}")
        detail = page.locator("article.detail")
        await expect(detail).to_contain_text("提交结果：出现安全验证")
        assert not await page.locator("details.tech ol.audit").is_visible()
        await page.screenshot(path=str(ARTIFACTS / "readable-detail.png"), full_page=True)
        await page.click("details.tech summary")
        await expect(page.locator("details.tech ol.audit")).to_be_visible()
        await expect(page.locator("details.tech")).to_contain_text("开始采购")
        await page.screenshot(path=str(ARTIFACTS / "readable-detail-tech.png"), full_page=True)

        await page.goto(f"{base}/tasks/{failed.id}")
        await expect(page.locator("article.detail")).to_contain_text("确认页总价超过上限")
        await page.screenshot(path=str(ARTIFACTS / "readable-detail-failed.png"), full_page=True)
    assert problems == [], problems
