"""Supervised first orders end to end, with every part real.

Real processes (demo/stack.py): `cmbuyer-server serve` with ``CMBUYER_SUPERVISED_ORDERS=2``,
`cmbuyer-phonesim` and one `cmbuyer-agent run` per test (short approval poll), and a person in real
headless Chromium on the admin pages: the badge 等待人工确认 in the task table, the drawer with the
side-by-side readings and the gate-3 screenshot, 批准 / 驳回, 核对无误 / 有误 on the task page, the hold
and 重新人工监督 on the devices page. Nothing is seeded: every approval request is the agent's.

- ``sim-1`` (Pinduoduo 8.17.0, SKU sheet + confirm page): two approved orders confirmed right, then the
  third runs unsupervised (no approval request, no wait).
- ``sim-2`` (8.22.0, one order sheet): a rejection fails the attempt before the fence; a payment-row
  switch while waiting (the simulator's ``payment_mode_change`` fault, flipped on the live process through
  its adb port) fails it with SCREEN_CHANGED_WHILE_WAITING; an approved order marked 有误 holds the pair:
  the next task stays PENDING, the heartbeat says ``supervision_hold``, the devices page shows the hold;
  重新人工监督 lets the phone claim again, supervised.

Screenshots go to ``test-artifacts/supervision-e2e/``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.phonesim.journal import order_counts, payment_taps, submit_taps
from cmbuyer.phonesim.process import remote_inject
from cmbuyer.server.db import connect_sync
from demo.stack import SETTLED, Stack, TaskSpec
from tests.browser import ARTIFACTS_ROOT, BROWSER_MARKS, CHROMIUM, LAUNCH_ARGS
from tests.e2e.conftest import SCENARIO, admin_page, agent_log, new_stack, stop_and_show_logs, wait_until

ARTIFACTS = ARTIFACTS_ROOT / "supervision-e2e"
N = 2  # CMBUYER_SUPERVISED_ORDERS here (the default is 3)

pytestmark = [pytest.mark.e2e, *BROWSER_MARKS]


def _shirt(title: str) -> TaskSpec:
    return TaskSpec(title, "937122477375", "黑色CHA(纯棉)", "M(建议100-115)", 2, "30.00")


def _pants(title: str) -> TaskSpec:
    return TaskSpec(title, "700000000002", "灰色", "XL", 2, "90.00")


class Run:
    """One stack with one phone and its agent, and a logged-in Chromium page."""

    def __init__(self, stack: Stack, serial: str, page: Any) -> None:
        self.stack, self.serial, self.page = stack, serial, page
        self.device_id = next(d for d, s in stack.serial_of.items() if s == serial)

    # -- reading the server's file (read-only) ------------------------------------------------------
    def rows(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        conn = connect_sync(self.stack.data_dir / "cmbuyer.sqlite3", read_only=True)
        try:
            return [tuple(r) for r in conn.execute(sql, args).fetchall()]
        finally:
            conn.close()

    def detail(self, spec: TaskSpec) -> dict[str, Any]:
        return self.stack.task_details([spec])[spec.task_id]

    def state(self, spec: TaskSpec) -> str:
        return str(self.detail(spec)["task"]["state"])

    def approvals(self, spec: TaskSpec) -> list[tuple[str, str | None]]:
        """``[(state, decided_by)]`` of the task's approval requests, oldest first (a request still
        APPROVED when its attempt closes becomes VOID and keeps who decided)."""
        return self.rows(
            "SELECT state, decided_by FROM approval_requests WHERE task_id = ? ORDER BY created_at", spec.task_id
        )

    def supervised(self, spec: TaskSpec) -> list[int]:
        return [
            r[0]
            for r in self.rows("SELECT supervised FROM attempts WHERE task_id = ? ORDER BY created_at", spec.task_id)
        ]

    def pair(self) -> tuple[int, int]:
        got = self.rows("SELECT confirmed_orders, held FROM supervision_pairs WHERE device_id = ?", self.device_id)
        assert len(got) == 1, got  # one pack on this phone: one pair
        return got[0]

    def audit(self, action: str) -> list[tuple[Any, ...]]:
        return self.rows("SELECT actor_kind, actor_id, subject_id FROM audit_log WHERE action = ? ORDER BY id", action)

    def log(self) -> str:
        return agent_log(self.stack, self.serial)

    def wait(self, cond: Callable[[], bool], seconds: float, what: str) -> None:
        wait_until(cond, seconds, what, lambda: self.log()[-3000:], poll=0.2)

    def settled(self, spec: TaskSpec, seconds: float = 40) -> str:
        self.wait(lambda: self.state(spec) in SETTLED, seconds, f"{spec.title} settled")
        return self.state(spec)

    def submit_taps(self, spec: TaskSpec | None = None) -> list[dict[str, Any]]:
        return submit_taps(self.stack.phone_journal(), goods_id=spec.goods_id if spec else None)

    # -- the person in the browser ---------------------------------------------------------------
    def waiting_in_drawer(self, spec: TaskSpec) -> Any:
        """On the task table: the live badge appears on this task's row; open its drawer and check the
        side-by-side readings (all matching the task) and the gate-3 screenshot; returns the panel."""
        from playwright.sync_api import expect

        page = self.page
        if not page.url.endswith("/tasks"):
            page.goto(f"{self.stack.url}/tasks")
        row = page.locator(f"tr[data-task-id='{spec.task_id}']")
        expect(row.locator(".badge.waiting")).to_have_text("等待人工确认", timeout=40_000)
        assert self.approvals(spec)[-1] == ("WAITING", None) and self.supervised(spec)[-1] == 1
        row.locator("a.open-drawer").click()
        panel = page.locator("#drawer section.approval")
        expect(panel).to_be_visible()
        expect(panel.locator("table.compare tr.mismatch")).to_have_count(0)
        expect(panel.locator("table.compare tr.ok", has_text="颜色").locator("td.read")).to_have_text(spec.color)
        expect(panel.locator("table.compare tr.ok", has_text="尺码").locator("td.read")).to_have_text(str(spec.size))
        shot = panel.locator("img[src^='/evidence/']")
        expect(shot).to_be_visible()
        page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=shot.element_handle())
        asset = shot.get_attribute("src").rsplit("/", 1)[1]
        kinds = {e["id"]: e["kind"] for e in self.detail(spec)["evidence"]}
        assert kinds.get(asset) == "CONFIRM_PAGE_GATE_3"
        return panel

    def decide(self, panel: Any, button: str, notice: str) -> None:
        from playwright.sync_api import expect

        panel.get_by_role("button", name=button, exact=True).click()  # its confirm() is accepted
        expect(self.page).to_have_url(re.compile(rf"/tasks\?notice={notice}$"))

    def verdict(self, spec: TaskSpec, button: str, note: str = "") -> None:
        from playwright.sync_api import expect

        page = self.page
        page.goto(f"{self.stack.url}/tasks/{spec.task_id}")
        section = page.locator("section.verdict")
        if note:
            section.locator("textarea[name=note]").fill(note)
        section.get_by_role("button", name=button, exact=True).click()
        expect(page.locator("section.verdict")).to_contain_text(button)
        expect(page.locator("section.verdict form")).to_have_count(0)


@pytest.fixture
def run(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """Returns ``start(serial)``: the stack (N = 2, heartbeat 1 s, approval poll 0.5 s) with that one
    phone, its agent running, and a Chromium page logged in as the admin."""
    from playwright.sync_api import sync_playwright

    stack = new_stack(
        tmp_path,
        CMBUYER_HEARTBEAT_INTERVAL="1",
        CMBUYER_SUPERVISED_ORDERS=str(N),
        CMBUYER_AGENT_APPROVAL_POLL_SECONDS="0.5",
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        problems: list[str] = []
        try:

            def start(serial: str) -> Run:
                stack.start_server()
                stack.start_sim([serial], SCENARIO)
                stack.add_device(serial)
                stack.start_agent(serial, ("--poll-seconds", "0.2"))
                return Run(stack, serial, admin_page(browser, stack, problems))

            yield start
            assert problems == [], problems
        finally:
            browser.close()
            stop_and_show_logs(stack)


def test_approved_orders_confirmed_right_end_supervision(run: Any) -> None:
    r: Run = run("sim-1")
    first, second, third = _shirt("监督 第一单"), _pants("监督 第二单"), _shirt("监督结束后 第三单")

    # (a) the first order of a new device waits at gate 3; approving in the drawer lets it complete
    r.stack.create_tasks([first])
    panel = r.waiting_in_drawer(first)
    r.page.locator("#drawer").screenshot(path=str(ARTIFACTS / "drawer-waiting.png"))
    assert r.submit_taps() == [] and r.state(first) not in SETTLED
    r.decide(panel, "批准", "approved")
    assert r.settled(first) == "WAITING_PAYMENT"
    assert len(r.submit_taps(first)) == 1 and payment_taps(r.stack.phone_journal()) == []
    assert r.approvals(first) == [("VOID", "admin:admin")]  # approved, then closed with its attempt
    assert [a[0] for a in r.audit("approval.approve")] == ["admin"]
    assert r.pair() == (0, 0)
    r.verdict(first, "核对无误")
    assert r.pair() == (1, 0)

    # the second order: still supervised (1 of 2 confirmed)
    r.stack.create_tasks([second])
    r.decide(r.waiting_in_drawer(second), "批准", "approved")
    assert r.settled(second) == "WAITING_PAYMENT"
    r.verdict(second, "核对无误")
    assert r.pair() == (N, 0)
    assert len(r.audit("supervision.verdict")) == 2

    # (c) N confirmed: the third order runs unsupervised, no approval request, no badge
    r.stack.create_tasks([third])
    assert r.settled(third) == "WAITING_PAYMENT"
    assert r.approvals(third) == [] and r.supervised(third) == [0]
    steps = [e["step"] for e in r.detail(third)["events"]]
    assert "APPROVAL_REQUEST" not in steps and "APPROVAL_WAIT" not in steps
    from playwright.sync_api import expect

    r.page.goto(f"{r.stack.url}/devices")
    expect(r.page.locator("#device-rows tr", has_text="sim-1")).to_contain_text(f"已确认 {N} / {N}，不再监督")
    journal = r.stack.phone_journal()
    assert order_counts(journal) == {first.goods_id: 2, second.goods_id: 1}
    assert len(submit_taps(journal)) == 3 and payment_taps(journal) == []


def test_reject_screen_change_and_a_wrong_order_holds_the_phone(run: Any) -> None:
    from playwright.sync_api import expect

    r: Run = run("sim-2")
    rejected, switched, wrong, held = (
        _shirt("驳回的一单"),
        _shirt("等待时换了支付方式"),
        _pants("核对有误的一单"),
        _shirt("暂停期间的一单"),
    )

    # (b) 驳回 in the drawer: the attempt fails before the fence, no submit tap
    r.stack.create_tasks([rejected])
    r.decide(r.waiting_in_drawer(rejected), "驳回", "rejected")
    assert r.settled(rejected) == "FAILED"
    detail = r.detail(rejected)
    assert detail["task"]["state_reason"] == "REJECTED_BY_REVIEWER", detail["task"]
    assert detail["submission"] is None and r.approvals(rejected) == [("REJECTED", "admin:admin")]
    assert r.submit_taps() == [] and [a[0] for a in r.audit("approval.reject")] == ["admin"]

    # (e) the payment row switches while the agent waits: SCREEN_CHANGED_WHILE_WAITING, no fence
    r.stack.create_tasks([switched])
    r.waiting_in_drawer(switched)
    remote_inject(r.stack.sim_port, r.serial, {"kind": "payment_mode_change", "mode": "pay_later"})
    assert r.settled(switched) == "FAILED"
    detail = r.detail(switched)
    assert detail["task"]["state_reason"] == "SCREEN_CHANGED_WHILE_WAITING", detail["task"]
    assert detail["submission"] is None and r.approvals(switched) == [("VOID", None)]
    assert r.submit_taps() == []
    remote_inject(r.stack.sim_port, r.serial, {"kind": "payment_mode_change", "mode": "wechat"})

    # (d) an approved order marked 有误 holds the pair: the phone stops claiming
    r.stack.create_tasks([wrong])
    r.decide(r.waiting_in_drawer(wrong), "批准", "approved")
    assert r.settled(wrong) == "WAITING_PAYMENT" and len(r.submit_taps(wrong)) == 1
    r.verdict(wrong, "有误", note="尺码拿错了")
    assert r.pair() == (0, 1)
    r.stack.create_tasks([held])
    r.wait(lambda: "组合已暂停" in r.log(), 15, "the agent's supervision_hold line")
    time.sleep(3)  # three more heartbeats / claim loops: still nothing claimed
    assert r.state(held) == "PENDING" and r.detail(held)["attempts"] == []
    r.page.goto(f"{r.stack.url}/devices")
    device = r.page.locator("#device-rows tr", has_text="sim-2")
    expect(device.locator(".supervision-held")).to_contain_text("尺码拿错了")
    r.page.screenshot(path=str(ARTIFACTS / "devices-held.png"), full_page=True)

    # 重新人工监督: the phone claims the waiting task again, supervised
    device.get_by_role("button", name="重新人工监督").click()
    expect(r.page.locator(".notice")).to_contain_text("已重新开始人工监督")
    assert [a[2] for a in r.audit("supervision.resupervise")] == [r.device_id]
    expect(r.page.locator("#device-rows tr", has_text="sim-2").locator(".badge.waiting")).to_have_text(
        "等待人工确认", timeout=30_000
    )
    assert r.supervised(held) == [1] and r.approvals(held) == [("WAITING", None)] and r.pair() == (0, 0)
    r.decide(r.waiting_in_drawer(held), "驳回", "rejected")
    assert r.settled(held) == "FAILED"
    journal = r.stack.phone_journal()
    assert order_counts(journal) == {wrong.goods_id: 1} and payment_taps(journal) == []
