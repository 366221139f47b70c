"""Whole-system tests through the real processes: `cmbuyer-server serve`,
`cmbuyer-phonesim` and one `cmbuyer-agent run` per phone, exactly as `make demo` runs them."""

from __future__ import annotations

import http.cookiejar
import json
import random
import re
import sqlite3
import time
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from cmbuyer.phonesim.journal import order_counts, payment_taps, submit_taps
from demo.stack import SETTLED, Stack, TaskSpec
from tests.e2e.conftest import SCENARIO, agent_log, wait_until
from tests.soak import soak_iterations
from tests.tally import fences, scenario_with_goods_per_task, tally

pytestmark = pytest.mark.e2e


def wait_settled(stack: Stack, specs: list[TaskSpec], timeout: float = 120.0) -> dict[str, dict]:
    deadline = time.monotonic() + timeout
    details: dict[str, dict] = {}
    while time.monotonic() < deadline:
        details = stack.task_details(specs)
        if all(d["task"]["state"] in SETTLED for d in details.values()):
            return details
        time.sleep(0.3)
    states = {s.title: details[s.task_id]["task"]["state"] for s in specs} if details else {}
    raise AssertionError(f"tasks did not settle in {timeout}s: {states}")


def shirt(
    title: str, quantity: int = 1, color: str = "黑色CHA(纯棉)", size: str = "M(建议100-115)", cap: str = "100.00"
) -> TaskSpec:
    return TaskSpec(title, "937122477375", color, size, quantity, cap)


def goods_per_task(stack: Stack, specs: list[TaskSpec]) -> Path:
    """Give each spec its own copy of its goods (tests/tally.py) so the phone's journal names the task
    of every tap; returns the scenario to start the simulator with."""
    out = stack.data_dir / "scenario-goods-per-task.json"
    for spec, gid in zip(specs, scenario_with_goods_per_task(SCENARIO, out, [s.goods_id for s in specs]), strict=True):
        spec.goods_id = gid
    return out


def test_happy_path_one_task_one_order(stack: Stack) -> None:
    stack.start_server()
    stack.start_sim(["sim-1"], SCENARIO)
    stack.add_device("sim-1")
    specs = [shirt("happy", quantity=2, cap="30.00")]
    stack.create_tasks(specs)
    stack.start_agent("sim-1")
    detail = wait_settled(stack, specs)[specs[0].task_id]
    assert detail["task"]["state"] == "WAITING_PAYMENT"
    assert detail["submission"]["state"] == "SUBMITTED"
    kinds = {e["kind"] for e in detail["evidence"]}
    assert {"SKU_PANEL_GATE_1", "QUANTITY_GATE_2", "CONFIRM_PAGE_GATE_3"} <= kinds
    assert detail["events"], "step events must be stored"
    journal = stack.phone_journal()
    assert len(submit_taps(journal, goods_id="937122477375")) == 1
    assert payment_taps(journal) == []
    assert order_counts(journal) == {"937122477375": 1}


def test_two_phones_ten_tasks_no_task_purchased_twice(stack: Stack) -> None:
    """Ten tasks on two phones, never one bought twice. On the way: sim-2 is paused while every
    task is PENDING — it claims nothing while sim-1 works — then resumed, and it claims again; the audit
    trail shows both, and sim-2's agent said once that it is paused. Afterwards ``/metrics``
    counts the claims, fences and results, and no log line of the run holds a secret."""
    stack.env["CMBUYER_METRICS"] = "1"
    stack.start_server()
    specs = [shirt(f"t{i}", color=["黑色CHA(纯棉)", "白色CHA(纯棉)"][i % 2]) for i in range(8)]
    specs += [TaskSpec(f"pants{i}", "700000000002", "黑色", "L", 1, "100.00") for i in range(2)]
    stack.start_sim(["sim-1", "sim-2"], goods_per_task(stack, specs))
    for serial in ("sim-1", "sim-2"):
        stack.add_device(serial)
    device_of = {serial: device_id for device_id, serial in stack.serial_of.items()}
    assert stack.cli("device", "pause", device_of["sim-2"])["changed"] is True
    stack.create_tasks(specs)
    stack.start_agent("sim-1")
    stack.start_agent("sim-2", ("--json-logs",))

    def worked_by(serial: str) -> int:
        details = stack.task_details(specs).values()
        return sum(any(a["device_id"] == device_of[serial] for a in d["attempts"]) for d in details)

    wait_until(lambda: worked_by("sim-1") >= 3, 120, "sim-1 working alone", lambda: agent_log(stack, "sim-1"), 0.3)
    assert worked_by("sim-2") == 0, "a paused phone claimed a task"
    assert "管理员暂停了这台手机的领取" in agent_log(stack, "sim-2")
    assert stack.cli("device", "resume", device_of["sim-2"])["changed"] is True

    details = wait_settled(stack, specs, timeout=240)
    assert all(d["task"]["state"] == "WAITING_PAYMENT" for d in details.values())
    journal = stack.phone_journal()
    assert sum(order_counts(journal).values()) == len(specs)
    assert order_counts(journal) == dict(Counter(s.goods_id for s in specs))
    assert payment_taps(journal) == []
    _assert_tally(stack, specs, details)
    devices = {d["attempts"][0]["device_id"] for d in details.values()}
    assert len(devices) == 2, "both phones should have worked (sim-2 after it was resumed)"
    log = agent_log(stack, "sim-2")
    assert log.count("管理员暂停了这台手机的领取") == 1 and "已恢复领取" in log
    conn = sqlite3.connect(stack.data_dir / "cmbuyer.sqlite3")
    try:
        audited = conn.execute(
            "SELECT action, actor_kind FROM audit_log WHERE subject_id = ? AND action LIKE 'device.%' "
            "AND action != 'device.heartbeat' ORDER BY id",
            (device_of["sim-2"],),
        ).fetchall()
    finally:
        conn.close()
    assert audited == [("device.add", "cli"), ("device.pause", "cli"), ("device.resume", "cli")]
    json_lines = [json.loads(line) for line in agent_log(stack, "sim-2").splitlines() if line.startswith("{")]
    assert any(line.get("attempt_id") and line.get("step") for line in json_lines)
    with urllib.request.urlopen(stack.url + "/metrics", timeout=10) as resp:
        metrics = resp.read().decode()
    for counter in ("cmbuyer_claims_total", "cmbuyer_fences_total", 'cmbuyer_results_total{observation="SUBMITTED"}'):
        value = next(line.rsplit(" ", 1)[1] for line in metrics.splitlines() if line.startswith(counter + " "))
        assert float(value) >= len(specs), (counter, value)
    _assert_no_secret_in_any_log(stack)
    _assert_pay_list(stack, details)


def _assert_no_secret_in_any_log(stack: Stack) -> None:
    """Every log line of the run (server, simulator, agents) is free of the device tokens, the
    claim tokens the agents held, the server's secrets and the admin password."""
    secrets = [stack.admin_password]
    for cred in (stack.data_dir / "agents").glob("*.credentials"):
        secrets += [line.split("=", 1)[1] for line in cred.read_text().splitlines() if line.startswith("token=")]
    for line in (stack.data_dir / "cmbuyer.env").read_text().splitlines():
        if line.startswith(("CMBUYER_CLAIM_TOKEN_SECRET=", "CMBUYER_SESSION_SECRET=")):
            secrets.append(line.split("=", 1)[1].strip())
    claim_tokens = []
    for journal in (stack.data_dir / "agent-state").glob("*.sqlite3"):
        conn = sqlite3.connect(journal)
        try:
            claim_tokens += [r[0] for r in conn.execute("SELECT claim_token FROM claims")]
        finally:
            conn.close()
    assert len(secrets) == 5 and claim_tokens, (len(secrets), len(claim_tokens))
    logs = {log.name: log.read_text(errors="replace") for log in stack.logs.glob("*.log")}
    assert {"server.log", "agent-sim-1.log", "agent-sim-2.log"} <= set(logs)
    for name, text in logs.items():
        for secret in secrets + claim_tokens:
            assert secret not in text, f"a secret in {name}"


def _admin_get(stack: Stack, path: str) -> str:
    """``path`` as the demo's administrator sees it: log in through the real form, then GET."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(stack.url + "/login", timeout=10).read().decode()
    token = re.search(r'name="csrf_token" value="([0-9a-f]{64})"', page)
    assert token is not None
    form = {"username": "admin", "password": stack.admin_password, "csrf_token": token.group(1)}
    opener.open(stack.url + "/login", urllib.parse.urlencode(form).encode(), timeout=10).read()
    return str(opener.open(stack.url + path, timeout=10).read().decode())


def _assert_pay_list(stack: Stack, details: dict[str, dict]) -> None:
    """The pay list after the run: one group per phone, every waiting order under the phone that
    made it, with the order number the phone read (or the placeholder when it read none)."""
    html = _admin_get(stack, "/pay-list")
    groups = re.split(r'<h2 class="device-group" data-device-id="', html)[1:]
    by_device = {g.split('"', 1)[0]: g for g in groups}
    assert set(by_device) == {d["submission"]["device_id"] for d in details.values()}
    for d in details.values():
        group = by_device[d["submission"]["device_id"]]
        assert f'data-task-id="{d["task"]["id"]}"' in group
        assert (d["submission"]["order_sn"] or "（未读到）") in group
    assert any(d["submission"]["order_sn"] for d in details.values()), "the confirmation read some order numbers"
    for device_id, group in by_device.items():
        assert group.split("（", 1)[0].endswith(stack.serial_of[device_id])  # the group is named after its phone


def test_server_restart_mid_run(stack: Stack) -> None:
    stack.start_server()
    specs = [shirt(f"r{i}") for i in range(6)]
    _two_phones_working_on(stack, specs)
    time.sleep(1.5)
    stack.kill_server()
    time.sleep(1.0)
    stack.start_server()
    details = wait_settled(stack, specs, timeout=240)
    _assert_tally(stack, specs, details)


def _two_phones_working_on(stack: Stack, specs: list[TaskSpec]) -> None:
    """Simulated phones sim-1 and sim-2 (each task on its own goods), both registered, the tasks created,
    then one agent per phone started."""
    stack.start_sim(["sim-1", "sim-2"], goods_per_task(stack, specs))
    for serial in ("sim-1", "sim-2"):
        stack.add_device(serial)
    stack.create_tasks(specs)
    for serial in ("sim-1", "sim-2"):
        stack.start_agent(serial)


def _assert_tally(stack: Stack, specs: list[TaskSpec], details: dict[str, dict]) -> None:
    """Per task (each on its own goods): every submit tap inside that task's fence, at most one per
    fenced submission, orders ≤ submissions (tests/tally.py); every task in an explained state."""
    journal = stack.phone_journal()
    goods_of = {s.task_id: s.goods_id for s in specs}
    assert tally(journal, goods_of, fences(stack.data_dir / "cmbuyer.sqlite3", goods_of)) == []
    per_goods = order_counts(journal)
    assert sum(per_goods.values()) <= len(specs)
    settled_with_order = [d for d in details.values() if d["task"]["state"] == "WAITING_PAYMENT"]
    assert len(settled_with_order) <= sum(per_goods.values())
    for d in details.values():
        state = d["task"]["state"]
        assert state in {"WAITING_PAYMENT", "RECONCILIATION_REQUIRED", "FAILED", "PENDING", "CLAIMED", "ORDERING"}
        if state == "RECONCILIATION_REQUIRED":
            assert d["submission"] is not None and (
                d["submission"]["observation"] or d["submission"]["reconciliation_reason"]
            )
        if state == "FAILED":
            assert d["task"]["state_reason"], "a failed task says why"
    conn = sqlite3.connect(stack.data_dir / "cmbuyer.sqlite3")
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        dup = conn.execute("SELECT authorization_id, count(*) FROM order_submissions GROUP BY 1 HAVING count(*) > 1")
        assert dup.fetchall() == []
    finally:
        conn.close()


@pytest.mark.slow(seconds_per_iteration=15)
def test_agent_sigkill_at_random_points(stack: Stack) -> None:
    """Kill the agent with SIGKILL at random moments, restart it, repeat; the per-task tally (each
    task on its own goods: no submit tap outside a fence, at most one per fence) must hold."""
    rng = random.Random(20261129)
    iterations = soak_iterations(3)
    # Two kills mid-attempt would (rightly) trip the crash-loop breaker and hold the phone; this test
    # is about what the kills leave behind, so the breaker's limits are set out of reach here.
    stack.env.update(
        {
            "CMBUYER_AGENT_CRASH_LOOP_LIMIT": str(10 * iterations + 10),
            "CMBUYER_AGENT_FAILURE_LIMIT": str(10 * iterations + 10),
        }
    )
    stack.start_server()
    specs = [shirt(f"k{i}") for i in range(iterations)]
    stack.start_sim(["sim-1"], goods_per_task(stack, specs))
    stack.add_device("sim-1")
    stack.create_tasks(specs)
    for _ in range(iterations):
        stack.start_agent("sim-1")
        time.sleep(rng.uniform(0.2, 2.5))
        proc = stack.agents.pop("sim-1")
        proc.kill()
        proc.wait(timeout=10)
    stack.start_agent("sim-1")
    deadline = time.monotonic() + 60 + 10 * iterations  # ~3 s a task on this VM; generous
    while time.monotonic() < deadline:
        details = stack.task_details(specs)
        if all(d["task"]["state"] in SETTLED or _needs_person(d) for d in details.values()):
            break
        time.sleep(0.5)
    _assert_tally(stack, specs, stack.task_details(specs))


def _needs_person(detail: dict) -> bool:
    attempts = [a for a in detail["attempts"] if a["state"] == "OPEN"]
    return detail["task"]["state"] in ("CLAIMED", "ORDERING") and bool(attempts)


def test_demo_once(tmp_path) -> None:
    import subprocess
    import sys

    from demo.stack import free_port

    result = subprocess.run(
        [sys.executable, "-m", "demo.run", "--once", "--port", str(free_port()), "--data-dir", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "demo：每个任务都到达了预期状态" in result.stdout
