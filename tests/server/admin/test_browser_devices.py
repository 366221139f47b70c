"""Each phone's selector pack on the devices page in real headless Chromium: three phones heartbeat over the real device
API — one with a selector pack id, one with ``NO_PACK``, one older agent that sends no pack id — and the
识别包 column shows the pack id, the Chinese hint pointing to the runbook, and "—". The app version the
heartbeat carried is shown beside it. Screenshot: ``test-artifacts/admin-browser/devices-pack.png``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cmbuyer.server.app import create_app
from tests.server.claims.conftest import HEARTBEAT, heartbeat_body, post

from .browser import ARTIFACTS, BROWSER_MARKS, chromium_page, log_in

pytestmark = BROWSER_MARKS

PACK = "pdd-8.17.0-81700"


async def test_pack_column_shows_pack_no_pack_hint_and_unknown(
    aiohttp_server: Any, aiohttp_client: Any, settings: Any, admin: str, make_device: Any, clock: Any
) -> None:
    from playwright.async_api import expect

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    clock.set(datetime.now(UTC))
    server = await aiohttp_server(create_app(settings))  # real clock
    device_api = await aiohttp_client(server)
    packed, missing, older = make_device("采购机 有包"), make_device("采购机 新版本"), make_device("采购机 旧工具")
    for dev, extra in (
        (packed, {"pack_id": PACK, "pdd_version_code": 81700}),
        (missing, {"pack_id": "NO_PACK", "state": "NO_PACK", "pdd_version": "9.0.0", "pdd_version_code": 90000}),
        (older, {"pdd_version": "8.17.0"}),
    ):
        status, raw, _ = await post(device_api, HEARTBEAT, dev, heartbeat_body(dev.device_id, **extra))
        assert status == 200, raw

    base = str(server.make_url("")).rstrip("/")
    async with chromium_page() as (page, problems):
        await log_in(page, base)
        await page.goto(base + "/devices")
        header = page.locator("table.tasks thead th")
        await expect(header.nth(5)).to_have_text("识别包")

        row = page.locator(f"tr[data-device-id='{packed.device_id}']")
        await expect(row.locator("td.pack")).to_have_text(PACK)
        await expect(row).to_contain_text("8.17.0 (81700)")
        await expect(row.locator(".pack-hint")).to_have_count(0)

        row = page.locator(f"tr[data-device-id='{missing.device_id}']")
        await expect(row.locator("td.pack")).to_contain_text("缺少识别包")
        hint = row.locator("td.pack .pack-hint")
        await expect(hint).to_be_visible()
        await expect(hint).to_contain_text("docs/agent.md")
        await expect(hint).to_contain_text("New app version runbook")
        await expect(row).to_contain_text("9.0.0 (90000)")
        await expect(row).to_contain_text("不允许")  # 9.0.0 is not on the server's allow-list either

        row = page.locator(f"tr[data-device-id='{older.device_id}']")
        await expect(row.locator("td.pack")).to_have_text("—")
        await expect(row.locator("td.pack")).not_to_contain_text(PACK)
        await page.screenshot(path=str(ARTIFACTS / "devices-pack.png"), full_page=True)

        # a newer agent's report is not kept when an older agent takes the phone over: unknown again
        status, _, _ = await post(device_api, HEARTBEAT, packed, heartbeat_body(packed.device_id))
        assert status == 200
        await page.reload()
        await expect(page.locator(f"tr[data-device-id='{packed.device_id}'] td.pack")).to_have_text("—")
    assert problems == [], problems


async def test_lost_phone_turns_lost_without_reload_and_pause_button(
    aiohttp_server: Any, aiohttp_client: Any, settings: Any, admin: str, make_device: Any, clock: Any
) -> None:
    """A READY phone shows 空闲 while it heartbeats; once its heartbeat is older than
    interval × factor (here 1 s × 2) the open page says 已失联 — never 空闲 — by itself, within the stale
    window plus one 3-s refresh. 暂停领取 on the row pauses the device (恢复领取 then shows)."""
    import asyncio
    import dataclasses

    from playwright.async_api import expect

    fast = dataclasses.replace(settings, heartbeat_interval=1, heartbeat_stale_factor=2)
    server = await aiohttp_server(create_app(fast))  # real clock
    device_api = await aiohttp_client(server)
    phone = make_device("采购机 会失联")

    async def beating() -> None:  # the agent's heartbeat, until the phone "drops off"
        while True:
            status, raw, _ = await post(device_api, HEARTBEAT, phone, heartbeat_body(phone.device_id))
            assert status == 200, raw
            await asyncio.sleep(0.5)

    beats = asyncio.create_task(beating())

    base = str(server.make_url("")).rstrip("/")
    async with chromium_page() as (page, problems):
        await log_in(page, base)
        await page.goto(base + "/devices")
        state = page.locator(f"tr[data-device-id='{phone.device_id}'] td.device-state")
        await expect(state).to_contain_text("空闲")
        await expect(state).not_to_contain_text("已失联")
        beats.cancel()
        # no more heartbeats: stale after 2 s, seen at the next refresh (every 3 s), no reload
        await expect(state.locator(".lost")).to_have_text("已失联", timeout=9000)
        await expect(state).not_to_contain_text("空闲")
        await page.screenshot(path=str(ARTIFACTS / "devices-lost.png"), full_page=True)

        await page.locator(f"tr[data-device-id='{phone.device_id}'] button.pause-toggle").click()
        await expect(page.locator(".notice")).to_contain_text("设备已暂停")
        row = page.locator(f"tr[data-device-id='{phone.device_id}']")
        await expect(row.locator(".paused")).to_contain_text("暂停领取")
        await expect(row.locator("button.pause-toggle")).to_have_text("恢复领取")
    assert problems == [], problems
