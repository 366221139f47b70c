"""A phone held by a risk wall, handled from the devices page in real headless Chromium.

Real processes (demo/stack.py): `cmbuyer-server serve` (heartbeat every second), `cmbuyer-phonesim` with
one phone and one `cmbuyer-agent run`. The simulator shows a risk wall (安全验证) on the first product page
(its ``popup`` fault, injected into the live process): the agent fails that task with RISK_WALL and holds.
Then, as a person would:

1. the devices page shows the hold — 遇到风控拦截 and ``RISK_WALL``, since when, the failed task and its
   failure screenshot (the image loads);
2. 查看当前屏幕 → a fresh screenshot of the phone shows up (within a few heartbeats, without a reload);
3. the person closes the app on the phone, then 释放 with a note → the agent clears its hold and buys the
   next task; the audit trail names the admin;
4. with a cashier app in front (the ``wrong_focus`` fault) 查看当前屏幕 shows that app's package and no
   image is stored.

Screenshots go to ``test-artifacts/fleet-e2e/``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import adbutils
import pytest

from cmbuyer.phonesim.process import remote_inject
from cmbuyer.server.db import connect_sync
from demo.stack import Stack, TaskSpec
from tests.browser import ARTIFACTS_ROOT, BROWSER_MARKS, CHROMIUM, LAUNCH_ARGS
from tests.e2e.conftest import SCENARIO, admin_page, agent_log, new_stack, stop_and_show_logs, wait_until

ARTIFACTS = ARTIFACTS_ROOT / "fleet-e2e"
CASHIER = "com.eg.android.AlipayGphone"

pytestmark = [pytest.mark.e2e, *BROWSER_MARKS]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = new_stack(tmp_path, CMBUYER_HEARTBEAT_INTERVAL="1")
    try:
        yield s
    finally:
        stop_and_show_logs(s)


def _rows(stack: Stack, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = connect_sync(stack.data_dir / "cmbuyer.sqlite3", read_only=True)
    try:
        return [tuple(r) for r in conn.execute(sql, args).fetchall()]
    finally:
        conn.close()


def _state(stack: Stack, spec: TaskSpec) -> str:
    return str(stack.task_details([spec])[spec.task_id]["task"]["state"])


def test_risk_wall_hold_released_and_screens_from_the_devices_page(stack: Stack) -> None:
    from playwright.sync_api import expect, sync_playwright

    walled, after = (
        TaskSpec("风控拦下的一单", "937122477375", "黑色CHA(纯棉)", "M(建议100-115)", 1, "30.00"),
        TaskSpec("释放后的一单", "700000000002", "黑色", "L", 1, "100.00"),
    )
    stack.start_server()
    stack.start_sim(["sim-1"], SCENARIO)
    stack.add_device("sim-1")
    device_id = next(iter(stack.serial_of))
    wall = {"kind": "popup", "popup": "risk_wall", "text": "操作过于频繁，请稍后再试", "when": {"on_screen": "product"}}
    remote_inject(stack.sim_port, "sim-1", wall)
    stack.create_tasks([walled])
    stack.start_agent("sim-1", ("--poll-seconds", "0.2"))

    def log() -> str:
        return agent_log(stack, "sim-1")

    wait_until(lambda: _state(stack, walled) == "FAILED", 90, "the risk wall failing the task", log, 0.3)
    wait_until(
        lambda: _rows(stack, "SELECT hold_code FROM devices WHERE id = ?", device_id) == [("RISK_WALL",)],
        30,
        "the hold reported in a heartbeat",
        log,
        0.3,
    )
    stack.create_tasks([after])
    time.sleep(3)  # the held phone claims nothing meanwhile
    assert _state(stack, after) == "PENDING"

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        try:
            page = admin_page(browser, stack, problems)
            page.goto(f"{stack.url}/devices")

            # 1. the hold with its reason, since when, the task and the failure screenshot
            extra = page.locator(f"tr[data-device-extra='{device_id}']")
            expect(extra).to_contain_text("需要人工处理")
            expect(extra).to_contain_text("遇到风控拦截")
            expect(extra.locator(".hold-code")).to_have_text("RISK_WALL")
            expect(extra).to_contain_text(walled.title)
            shot = extra.locator("img.hold-shot")
            expect(shot).to_be_visible()
            assert shot.evaluate("img => img.complete && img.naturalWidth > 0"), "failure screenshot did not load"

            # 2. 查看当前屏幕: a fresh screenshot, shown without a reload (the page re-reads itself)
            page.locator(f"tr[data-device-id='{device_id}'] button.screen-request").click()
            expect(page.locator(".notice")).to_contain_text("已请求当前屏幕")
            screen = page.locator(f"tr[data-device-extra='{device_id}'] img.device-screen")
            expect(screen).to_be_visible(timeout=20_000)
            page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=screen.element_handle())
            page.screenshot(path=str(ARTIFACTS / "devices-held-with-screen.png"), full_page=True)

            # 3. the person clears the wall on the phone (a wall cannot be backed out of: the app is closed),
            # then 释放 with a note: the agent clears its hold and buys the next task
            adbutils.AdbClient(host="127.0.0.1", port=stack.sim_port).device("sim-1").shell(
                "am force-stop com.xunmeng.pinduoduo"
            )
            extra = page.locator(f"tr[data-device-extra='{device_id}']")
            extra.locator("textarea[name=note]").fill("已在手机上完成安全验证")
            extra.locator("button.release-button").click()
            expect(page.locator(".notice")).to_contain_text("已释放")
            wait_until(lambda: _state(stack, after) == "WAITING_PAYMENT", 90, "the released phone buying", log, 0.3)
            assert "暂停接单（HOLD）已在服务器上由 admin:admin" in log()
            audit = _rows(
                stack,
                "SELECT actor_kind, actor_id, detail_json FROM audit_log WHERE subject_id = ? AND action = ?",
                device_id,
                "device.hold_release",
            )
            assert [(a[0], a[1], json.loads(a[2])["note"]) for a in audit] == [
                ("admin", "admin", "已在手机上完成安全验证")
            ]
            expect(page.locator(f"tr[data-device-extra='{device_id}'] .hold")).to_have_count(0, timeout=20_000)

            # 4. a cashier app in front: its package is shown, no image stored
            remote_inject(stack.sim_port, "sim-1", {"kind": "wrong_focus", "package": CASHIER, "times": None})
            images_before = _rows(stack, "SELECT COUNT(*) FROM device_screens WHERE sha256 IS NOT NULL")
            page.goto(f"{stack.url}/devices")
            page.locator(f"tr[data-device-id='{device_id}'] button.screen-request").click()
            foreign = page.locator(f"tr[data-device-extra='{device_id}'] .screen-foreign")
            expect(foreign).to_contain_text(CASHIER, timeout=20_000)
            expect(page.locator(f"tr[data-device-extra='{device_id}'] img.device-screen")).to_have_count(0)
            page.screenshot(path=str(ARTIFACTS / "devices-screen-cashier-in-front.png"), full_page=True)
            assert _rows(stack, "SELECT COUNT(*) FROM device_screens WHERE sha256 IS NOT NULL") == images_before
            assert _rows(stack, "SELECT foreground_package FROM device_screens ORDER BY rowid DESC LIMIT 1") == [
                (CASHIER,)
            ]
        finally:
            browser.close()
    assert problems == [], problems
