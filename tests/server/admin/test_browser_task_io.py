"""Tasks in and out in real headless Chromium: a template-filled xlsx of 200 rows with
3 bad ones → preview with the three Chinese errors → confirm → 197 drafts; the same file again → nothing new;
the view exported as xlsx and read back with openpyxl; the pay list grouped by phone, and a bulk mark-paid of
5 orders where one went stale meanwhile marks 4 and names the fifth.

Skip rules and the Chromium set-up: tests/server/admin/browser.py."""

from __future__ import annotations

import asyncio
import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from openpyxl import load_workbook

from cmbuyer.server.app import create_app
from cmbuyer.server.db import run_in_transaction
from cmbuyer.server.services import admin_actions
from cmbuyer.server.tx.common import Actor
from tests.server.sheets.files import HEADER, fill_template, good_row

from .browser import ARTIFACTS, BROWSER_MARKS, chromium_page, log_in

pytestmark = BROWSER_MARKS


async def _download(page: Any, selector: str) -> bytes:
    async with page.expect_download() as info:
        await page.click(selector)
    path = await (await info.value).path()
    return await asyncio.to_thread(Path(path).read_bytes)


async def test_import_200_rows_reupload_and_export(
    aiohttp_server: Any, settings: Any, admin: str, sync_conn: Any, tmp_path: Path
) -> None:
    from playwright.async_api import expect

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    server = await aiohttp_server(create_app(settings))
    base = str(server.make_url("")).rstrip("/")
    async with chromium_page() as (page, problems):
        await log_in(page, base)
        await page.click("#import-link")
        template = await _download(page, "#template-xlsx")
        rows = [good_row(i) for i in range(200)]
        rows[10][HEADER.index("max_total_price")] = 30.125
        rows[50][HEADER.index("quantity")] = 0
        rows[150][HEADER.index("product_url")] = "https://evil.example/goods.html?goods_id=1"
        upload = tmp_path / "采购清单.xlsx"
        upload.write_bytes(fill_template(template, rows))

        await page.set_input_files("input[name=file]", str(upload))
        await page.click("button:has-text('上传并预览')")
        errors = page.locator("#import-rows tr[data-status=error]")
        await expect(errors).to_have_count(3)
        await expect(errors.nth(0)).to_contain_text("最高总价：金额最多两位小数")
        await expect(errors.nth(1)).to_contain_text("数量：数量必须是 1 到 99 的整数")
        await expect(errors.nth(2)).to_contain_text("商品链接：只接受拼多多商品链接")
        assert await errors.evaluate_all("rs => rs.map(r => r.dataset.line)") == ["12", "52", "152"]
        await page.screenshot(path=str(ARTIFACTS / "import-preview.png"))
        await page.click("#import-confirm")
        await expect(page.locator("#import-result")).to_contain_text("已导入 197 个草稿任务")
        assert sync_conn.execute("SELECT count(*) FROM tasks WHERE state = 'DRAFT'").fetchone()[0] == 197

        # the same file again: every row already exists, nothing new
        await page.goto(base + "/tasks/import")
        await page.set_input_files("input[name=file]", str(upload))
        await page.click("button:has-text('上传并预览')")
        await expect(page.locator("#import-rows tr[data-status=exists]")).to_have_count(197)
        await expect(page.locator("#import-confirm")).to_be_disabled()
        assert sync_conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 197

        # the drafts view: counts at the top, then exported and read back
        await page.goto(base + "/tasks?state=DRAFT")
        await expect(page.locator("#state-counts")).to_contain_text("草稿 197")
        exported = await _download(page, "#export-xlsx")
        sheet = load_workbook(io.BytesIO(exported)).worksheets[0]
        lines = list(sheet.iter_rows(values_only=True))
        assert lines[0][:3] == ("任务 id", "标题", "商品 id") and len(lines) == 198
        titles = {line[1] for line in lines[1:]}
        assert titles == {f"导入任务 {i}" for i in range(200) if i not in (10, 50, 150)}
    assert problems == [], problems


async def test_pay_list_bulk_mark_paid_with_one_stale(
    aiohttp_server: Any,
    settings: Any,
    admin: str,
    sync_conn: Any,
    clock: Any,
    make_task: Any,
    make_device: Any,
    seed: Any,
) -> None:
    from playwright.async_api import expect

    clock.set(datetime.now(UTC) - timedelta(minutes=10))  # the orders waited a few minutes, oldest first
    server = await aiohttp_server(create_app(settings))  # before the seeded claims (start-up checks their tokens)
    base = str(server.make_url("")).rstrip("/")
    tasks = []
    for name, k in (("手机1", 3), ("手机2", 2)):
        device = make_device(name)
        for _ in range(k):
            task = make_task(start=True, title=f"{name} 的订单 {len(tasks) + 1}")
            attempt = seed.claim(task.id, device.device_id)
            seed.fence(
                task.id, attempt, device.device_id, observation="SUBMITTED", order_sn=f"231204-{len(tasks) + 1:08d}"
            )
            tasks.append(task)
            clock.advance(60)
    async with chromium_page(http_errors=True) as (page, problems):
        await log_in(page, base)
        await page.click("a:has-text('待付款')")
        await expect(page.locator("h2.device-group")).to_have_text(["手机1（3 笔）", "手机2（2 笔）"])
        await expect(page.locator("table.pay").nth(0).locator(".order-sn")).to_have_text(
            ["231204-00000001", "231204-00000002", "231204-00000003"]
        )
        for box in await page.locator("#pay-form input[name=task]").all():
            await box.check()
        # meanwhile someone else marks the fourth order paid: the page's version for it is now stale
        stale = tasks[3]
        version = sync_conn.execute("SELECT version FROM tasks WHERE id = ?", (stale.id,)).fetchone()[0]
        run_in_transaction(
            sync_conn,
            lambda c: admin_actions.mark_paid(c, stale.id, version, Actor("admin", "other"), datetime.now(UTC)),
        )
        await page.click("#bulk-paid")  # the confirmation prompt is accepted
        await expect(page.locator("#bulk-outcome")).to_contain_text("已标记 4 个为已付款；1 个未标记")
        await expect(page.locator(f"#bulk-outcome li[data-task-id='{stale.id}']")).to_contain_text(stale.title)
        await page.screenshot(path=str(ARTIFACTS / "pay-list-bulk.png"), full_page=True)
        await expect(page.locator("#pay-empty")).to_be_visible()
    assert problems == [], problems
    states = [sync_conn.execute("SELECT state FROM tasks WHERE id = ?", (t.id,)).fetchone()[0] for t in tasks]
    assert states == ["PAID"] * 5
    marked = sync_conn.execute(
        "SELECT count(*) FROM audit_log WHERE action = 'task.mark_paid' AND actor_id = 'ops'"
    ).fetchone()[0]
    assert marked == 4
