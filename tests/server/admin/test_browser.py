"""The admin pages in real headless Chromium (Debian ``chromium`` driven by Playwright for Python).

The real app runs in-process on a loopback port (pytest-aiohttp's ``aiohttp_server``) against a real
SQLite file; the browser does everything a purchaser does: log in, create two tasks, select both,
start purchases, watch the table update live while a (seeded) phone claims one, open a drawer, reset
one, cancel the other, log out. Screenshots of every step go to ``test-artifacts/admin-browser/``.

Skip rules and the Chromium set-up: tests/server/admin/browser.py.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from cmbuyer.server.app import create_app

from .browser import ARTIFACTS, BROWSER_MARKS, chromium_page, create_draft
from .conftest import ADMIN_PASSWORD, ADMIN_USER

pytestmark = BROWSER_MARKS


async def test_purchaser_flow_in_chromium(
    aiohttp_server: Any, settings: Any, admin: str, make_device: Any, seed: Any, sync_conn: Any, clock: Any
) -> None:
    from playwright.async_api import expect

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    clock.set(datetime.now(UTC))  # seeded rows use the same time as the server's real clock
    server = await aiohttp_server(create_app(settings))  # real clock
    base = str(server.make_url("")).rstrip("/")
    shot_no = 0

    async with chromium_page(http_errors=True) as (page, problems):

        async def shot(name: str) -> None:
            nonlocal shot_no
            shot_no += 1
            await page.screenshot(path=str(ARTIFACTS / f"{shot_no:02d}-{name}.png"), full_page=True)

        # log in
        await page.goto(base + "/tasks")
        await expect(page).to_have_url(re.compile(r"/login$"))
        await page.fill("input[name=username]", ADMIN_USER)
        await page.fill("input[name=password]", ADMIN_PASSWORD)
        await shot("login")
        await page.click("button:has-text('登录')")
        await expect(page).to_have_url(re.compile(r"/tasks$"))
        await expect(page.locator("header .who")).to_have_text(ADMIN_USER)

        # create two tasks through the form
        for title, color in (("纯棉短袖 浏览器一", "黑色"), ("加绒卫衣 浏览器二", "藏青")):
            await page.click("details.create summary")
            await create_draft(page, title, [("颜色", color), ("尺码", "M")])
        rows = page.locator("#task-rows tr[data-task-id]")
        await expect(rows).to_have_count(2)
        await expect(page.locator("#task-rows .state")).to_have_text(["草稿", "草稿"])
        await shot("two-drafts")

        # select both and start purchases with the exact button
        await page.check("#select-all")
        await expect(page.locator("#selected-count")).to_have_text("已选 2 个。")
        button = page.get_by_role("button", name="开始采购（只创建待付款订单）", exact=True)
        await expect(button).to_have_text("开始采购（只创建待付款订单）")
        await shot("selected")
        await button.click()
        # the confirmation says what the start will do: 2 tasks, ¥60.00, no READY phone
        await expect(page.locator("#confirm-count")).to_have_text("2")
        await expect(page.locator("#confirm-total")).to_have_text("¥60.00")
        await expect(page.locator("#no-ready-warning")).to_be_visible()
        await shot("start-confirmation")
        await page.click("#confirm-start")
        await expect(page.locator(".notice")).to_contain_text("已开始采购")
        await expect(page.locator("#task-rows .state")).to_have_text(["待领取", "待领取"])
        await shot("started")
        ids = await rows.evaluate_all("rs => rs.map(r => r.dataset.taskId)")

        # live view: a phone claims the first task; the table updates without a reload
        device = make_device("浏览器测试机")
        attempt = seed.claim(ids[0], device.device_id, ordering=True)
        seed.events(ids[0], attempt, [("GATE_1", "OK", None, "规格一致")])
        await expect(page.locator(f"tr[data-task-id='{ids[0]}'] .state")).to_have_text("下单中", timeout=10_000)
        await expect(page.locator(f"tr[data-task-id='{ids[0]}']")).to_contain_text("浏览器测试机")
        await shot("live-update")

        # open the drawer of the claimed task and reset it to draft
        await page.click(f"tr[data-task-id='{ids[0]}'] a.open-drawer")
        drawer = page.locator("#drawer")
        await expect(drawer).to_be_visible()
        await expect(drawer.locator("article.detail")).to_contain_text("浏览器测试机")
        await expect(drawer.locator("article.detail")).to_contain_text("GATE_1")
        await expect(page).to_have_url(re.compile(r"/tasks"))  # still the list: it is a drawer
        await shot("drawer")
        await drawer.get_by_role("button", name="重置为草稿").click()
        await expect(page.locator(".notice")).to_contain_text("任务已重置为草稿")
        await expect(page.locator(f"tr[data-task-id='{ids[0]}'] .state")).to_have_text("草稿")
        await shot("reset")

        # cancel the other one from its drawer
        await page.click(f"tr[data-task-id='{ids[1]}'] a.open-drawer")
        await expect(drawer).to_be_visible()
        await drawer.get_by_role("button", name="取消任务").click()
        await expect(page.locator(".notice")).to_contain_text("任务已取消")
        await expect(page.locator(f"tr[data-task-id='{ids[1]}'] .state")).to_have_text("已取消")
        await shot("cancelled")

        # the full detail page of the reset task keeps its history
        await page.goto(f"{base}/tasks/{ids[0]}")
        await expect(page.locator("article.detail")).to_contain_text("task.reset_to_draft")
        await shot("detail-page")

        # log out
        await page.click("button:has-text('退出登录')")
        await expect(page).to_have_url(re.compile(r"/login\?notice=logged_out$"))
        await expect(page.locator(".notice")).to_contain_text("已退出登录")
        await shot("logged-out")
        await page.goto(base + "/tasks")
        await expect(page).to_have_url(re.compile(r"/login$"))

    assert problems == [], problems  # no CSP violations, no script errors
    states = dict(sync_conn.execute("SELECT id, state FROM tasks").fetchall())
    assert states == {ids[0]: "DRAFT", ids[1]: "CANCELLED"}
    assert sorted(p.name for p in ARTIFACTS.glob("*.png"))[:1] == ["01-login.png"]
