"""After the demo's tasks settled, the admin pages in real headless Chromium:
a screenshot of the task table is saved as an artifact, and the detail page of a purchased task shows
the gate screenshots the simulated phone produced (the images load, served by /evidence/{id})."""

from __future__ import annotations

import time

import pytest

from demo.run import demo_tasks
from demo.stack import SETTLED, Stack
from tests.browser import ARTIFACTS_ROOT, BROWSER_MARKS, CHROMIUM, LAUNCH_ARGS
from tests.e2e.conftest import SCENARIO

ARTIFACTS = ARTIFACTS_ROOT / "demo"

pytestmark = [pytest.mark.e2e, *BROWSER_MARKS]


def test_admin_pages_after_the_demo(stack: Stack) -> None:
    from playwright.sync_api import expect, sync_playwright

    specs = demo_tasks()
    stack.start_server()
    stack.start_sim(["sim-1", "sim-2"], SCENARIO)
    for serial in ("sim-1", "sim-2"):
        stack.add_device(serial)
    stack.create_tasks(specs)
    for serial in ("sim-1", "sim-2"):
        stack.start_agent(serial)
    deadline = time.monotonic() + 240
    details = stack.task_details(specs)
    while time.monotonic() < deadline and not all(d["task"]["state"] in SETTLED for d in details.values()):
        time.sleep(0.5)
        details = stack.task_details(specs)
    assert all(details[s.task_id]["task"]["state"] in s.expect for s in specs), {
        s.title: details[s.task_id]["task"]["state"] for s in specs
    }
    purchased = next(s for s in specs if details[s.task_id]["task"]["state"] == "WAITING_PAYMENT")
    gate_ids = [
        e["id"]
        for e in details[purchased.task_id]["evidence"]
        if e["kind"] in ("SKU_PANEL_GATE_1", "QUANTITY_GATE_2", "CONFIRM_PAGE_GATE_3")
    ]
    assert len(gate_ids) == 3

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        try:
            page = browser.new_context(viewport={"width": 1440, "height": 900}, locale="zh-CN").new_page()
            page.set_default_timeout(15_000)
            page.goto(f"{stack.url}/login")
            page.fill("input[name=username]", "admin")
            page.fill("input[name=password]", stack.admin_password)
            page.click("button:has-text('登录')")
            page.wait_for_url(f"{stack.url}/tasks")
            for spec in specs:
                expect(page.locator("body")).to_contain_text(spec.title)
            # in the rows: the top bar's 待付款 link must not satisfy this
            expect(page.locator("#task-rows")).to_contain_text("待付款")
            expect(page.locator("#task-rows")).to_contain_text("待人工核对")
            page.screenshot(path=str(ARTIFACTS / "task-table-after-demo.png"), full_page=True)

            page.goto(f"{stack.url}/tasks/{purchased.task_id}")
            for asset_id in gate_ids:
                image = page.locator(f"img[src*='/evidence/{asset_id}']")
                expect(image.first).to_be_visible()
                loaded = image.first.evaluate("img => img.complete && img.naturalWidth > 0")
                assert loaded, f"gate screenshot {asset_id} did not load"
            page.screenshot(path=str(ARTIFACTS / "task-detail-with-gate-screenshots.png"), full_page=True)
        finally:
            browser.close()
