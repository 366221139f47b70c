"""The runner loop (heartbeat → recovery → claim-next → flow), the lease keeper and signal handling.

Phone: the REAL PhoneAdapter over the simulator's app model (tests/agent/simphone.py). Server: the
rule-enforcing in-process fake with heartbeat + a claim queue (tests/agent/fakes.py) — the same loop
against the real server is in tests/agent/test_real_server.py. Signals are real: the test process
sends itself SIGTERM/SIGINT with ``os.kill`` while the runner runs in the main thread.
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.agent.errors import ExitCode, ServerRejected, ServerUnreachable, Unauthorized
from cmbuyer.agent.journal import Journal
from cmbuyer.agent.lease import LeaseKeeper
from cmbuyer.agent.model import AttemptFailure, Lease
from cmbuyer.agent.phone.adapter import Deadlines, PhoneAdapter
from cmbuyer.agent.recovery import send_fail
from cmbuyer.agent.runner import Backoff, Runner, RunnerConfig, StopNow
from cmbuyer.agent.waits import FlowWaits

from .fakes import FakeApi, journal_claim, make_purchase
from .simphone import SimPhone

FAST_WAITS = FlowWaits(screen=2.0, observe=2.0)  # the simulated app answers at once


@pytest.fixture(autouse=True)
def _fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("cmbuyer.agent.capabilities.time.sleep", lambda s: None)


@pytest.fixture
def restore_signals() -> Any:
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


def make_runner(
    tmp_path: Path, api: FakeApi, sim: SimPhone | None = None, *, once: bool = False, poll: float = 0.02
) -> tuple[Runner, SimPhone, Journal]:
    sim = sim or SimPhone()
    journal = api.keys or Journal(tmp_path / "j.sqlite3")
    phone = PhoneAdapter("sim-1", sim, sim, Deadlines(dump=5, shell=5, screenshot=5, tap=5))
    lines: list[str] = []
    runner = Runner(
        RunnerConfig("sim-1", poll_seconds=poll, once=once, waits=FAST_WAITS), phone, api, journal, lines.append
    )
    runner.backoff = Backoff(first=0.01, cap=0.04, log_every=60)  # the rule, on a test's time scale
    runner.lines = lines  # type: ignore[attr-defined]
    return runner, sim, journal


def run_in_thread(runner: Runner) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(runner.run()), daemon=True)
    t.start()
    return t, out


def run_until_stop_now(tmp_path: Path, api: FakeApi) -> tuple[Runner, SimPhone]:
    """Run the loop in this (main) thread with the real signal handlers; it must end in StopNow."""
    runner, sim, _ = make_runner(tmp_path, api)
    runner.install_signals()
    with pytest.raises(StopNow):
        runner.run()
    return runner, sim


def pause(seconds: float) -> None:
    """Sleep that the ``_fast`` fixture's no-op ``time.sleep`` does not touch."""
    threading.Event().wait(seconds)


def wait_for(cond: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        pause(0.01)


# --- the loop ----------------------------------------------------------------------------------
def test_loop_heartbeat_claim_flow_then_idle_polls_until_stopped(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    api = FakeApi([make_purchase()], keys=journal)
    runner, sim, _ = make_runner(tmp_path, api)
    t, out = run_in_thread(runner)
    wait_for(lambda: runner.claims == 1 and api.claim_calls >= 4)  # the task, then idle polls
    runner.stop.set()
    t.join(10)
    assert out == [0]
    assert api.heartbeat_states[0] == "READY"
    assert api.task_state == "WAITING_PAYMENT"
    assert sim.roles().count("submit") == 1 and "payment" not in sim.roles()
    # claim_request keys: journaled before each claim-next, dropped after the final answer
    assert not [k for k in journal.summary()["pending_keys"] if k["purpose"] == "claim_request"]
    # heartbeats follow the server's interval (10 s here), not the short idle poll
    assert len([s for s in api.heartbeat_states if s == "READY"]) <= 2


def test_idle_poll_interval_is_short_and_heartbeat_follows_server_interval(tmp_path: Path) -> None:
    api = FakeApi([], keys=Journal(tmp_path / "j.sqlite3"), interval=1)
    runner, _, _ = make_runner(tmp_path, api, poll=0.1)
    t, _ = run_in_thread(runner)
    pause(2.3)
    runner.stop.set()
    t.join(10)
    assert 12 <= api.claim_calls <= 30  # ~every 0.1 s
    assert 2 <= len(api.heartbeat_states) <= 4  # ~every 1 s (the server's interval)


def test_no_pack_for_app_version_never_claims(tmp_path: Path) -> None:
    sim = SimPhone()
    sim.version = ("8.18.0", 81800)
    api = FakeApi([make_purchase()], keys=Journal(tmp_path / "j.sqlite3"))
    runner, _, _ = make_runner(tmp_path, api, sim, once=True)
    assert runner.run() == 3
    assert api.heartbeat_states == ["NO_PACK"]
    assert api.claim_calls == 0 and sim.taps == []


def test_server_disallows_version_never_claims(tmp_path: Path) -> None:
    api = FakeApi([make_purchase()], keys=Journal(tmp_path / "j.sqlite3"), allowed=False)
    runner, sim, _ = make_runner(tmp_path, api)
    t, _ = run_in_thread(runner)
    pause(0.3)
    runner.stop.set()
    t.join(10)
    assert api.claim_calls == 0 and sim.taps == []
    assert any("服务器不允许拼多多版本" in line for line in runner.lines)  # type: ignore[attr-defined]


def test_hold_reports_needs_person_and_does_not_claim(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    journal.set_hold("lease lost mid-flow")
    api = FakeApi([make_purchase()], keys=journal)
    runner, _sim, _ = make_runner(tmp_path, api)
    t, _ = run_in_thread(runner)
    pause(0.3)
    assert api.heartbeat_states[0] == "NEEDS_PERSON" and api.claim_calls == 0
    journal.clear_hold()  # what `cmbuyer-agent journal --clear-hold` does
    wait_for(lambda: runner.claims == 1)
    runner.stop.set()
    t.join(10)
    assert "READY" in api.heartbeat_states


def test_heartbeat_failure_does_not_kill_the_loop(tmp_path: Path) -> None:
    api = FakeApi([make_purchase()], keys=Journal(tmp_path / "j.sqlite3"))
    api.down = 3  # heartbeat fails three times, then the server is back
    runner, _, _ = make_runner(tmp_path, api)
    t, _ = run_in_thread(runner)
    wait_for(lambda: runner.claims == 1)
    runner.stop.set()
    t.join(10)
    lines = runner.lines  # type: ignore[attr-defined]
    failed = [line for line in lines if "秒后重试" in line]
    assert len(failed) == 1 and "fake server down" in failed[0] and "秒后重试" in failed[0]  # logged once
    assert "服务器：已恢复应答" in lines


def test_backoff_doubles_to_the_cap_and_logs_a_repeat_once_a_minute() -> None:
    b = Backoff()
    waits = [b.failed("Unauthorized", now=float(t)) for t in range(8)]
    assert [w for w, _ in waits] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert [logged for _, logged in waits] == [True] + [False] * 7  # the same failure within a minute: once
    assert b.failed("Unauthorized", now=60.0) == (60, True)
    assert b.failed("ServerUnreachable", now=61.0) == (60, True)  # another kind of failure: at once
    assert b.succeeded() is True and b.succeeded() is False
    assert b.failed("Unauthorized", now=62.0) == (1, True)


def test_revoked_credentials_give_a_few_clear_lines_and_back_off(tmp_path: Path) -> None:
    """401 on every heartbeat → one line naming 401 and what to check, then back-off; no
    claim-next at all. ``--once`` ends with exit code 2 after that line."""
    api = FakeApi([make_purchase()], keys=Journal(tmp_path / "j.sqlite3"))
    calls: list[float] = []

    def refused(**_: Any) -> dict[str, Any]:
        calls.append(time.monotonic())
        raise Unauthorized()

    api.heartbeat = refused  # type: ignore[method-assign]
    runner, _, _ = make_runner(tmp_path, api)
    runner.backoff = Backoff(first=0.05, cap=0.2, log_every=60)
    t, _ = run_in_thread(runner)
    pause(1.2)
    runner.stop.set()
    t.join(10)
    lines = [line for line in runner.lines if not line.startswith("识别包")]  # type: ignore[attr-defined]
    assert lines == [
        "心跳：服务器拒绝了设备凭据（401）：请检查 --credentials-file，或这台设备已被撤销；"
        "0.05 秒后重试（间隔逐步延长到 0.2 秒）"
    ], lines
    assert api.claim_calls == 0
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert 4 <= len(calls) <= 10 and gaps[-1] >= 0.15  # 0.05, 0.1, 0.2, 0.2 … not every 0.02 s poll

    once, _, _ = make_runner(tmp_path / "once", FakeApi([], keys=Journal(tmp_path / "j2.sqlite3")), once=True)
    once.api.heartbeat = refused  # type: ignore[method-assign]
    assert once.run() == ExitCode.USAGE
    assert [line for line in once.lines if "（401）" in line] == once.lines[-1:]  # type: ignore[attr-defined]
    # --once ends right after the line: it promises no retry
    assert once.lines[-1].endswith("已被撤销；--once：不重试") and "重试（" not in once.lines[-1]  # type: ignore[attr-defined]


@pytest.mark.serial  # "at once": an upper bound on wall time
def test_unreachable_server_is_one_line_with_one_prefix_at_once(tmp_path: Path) -> None:
    """A down server in ``run --once``: one line ``心跳：无法连接服务器 URL（…）`` (the call named once, the same
    ``心跳：`` as the state lines), sent after a single attempt — the runner's back-off is the retry, so the line
    does not wait out the client's transport retries (~7 s) — then exit 1."""
    from cmbuyer.agent.client import Credentials, HttpDeviceApi

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there: connection refused
    journal = Journal(tmp_path / "j.sqlite3")
    api = HttpDeviceApi(f"http://127.0.0.1:{port}", Credentials(str(uuid.uuid4()), "ab" * 32), journal)
    sim = SimPhone()
    phone = PhoneAdapter("sim-1", sim, sim, Deadlines(dump=5, shell=5, screenshot=5, tap=5))
    printed: list[str] = []
    runner = Runner(
        RunnerConfig("sim-1", poll_seconds=0.02, once=True, waits=FAST_WAITS), phone, api, journal, printed.append
    )
    started = time.monotonic()
    assert runner.run() == ExitCode.FAILED
    assert time.monotonic() - started < 3
    lines = [line for line in printed if "无法连接服务器" in line]
    assert lines == [
        f"心跳：无法连接服务器 http://127.0.0.1:{port}（ConnectionRefusedError: Connection refused）；--once：不重试"
    ]


def test_pause_and_pacing_are_logged_once_when_they_change(tmp_path: Path) -> None:
    api = FakeApi([], keys=Journal(tmp_path / "j.sqlite3"), interval=1)
    answers = [{"paused": True}] * 3 + [{"paced_until": "2099-01-01T00:10:00.000000Z"}] * 2 + [{}]
    real = api.heartbeat

    def heartbeat(**kw: Any) -> dict[str, Any]:
        return {**real(**kw), **(answers.pop(0) if answers else {})}

    api.heartbeat = heartbeat  # type: ignore[method-assign]
    runner, _, _ = make_runner(tmp_path, api)
    runner._hb_interval = 0
    for _ in range(7):
        runner._heartbeat(runner._status(), "READY")
    lines = [line for line in runner.lines if line.startswith("服务器：")]  # type: ignore[attr-defined]
    assert lines == [
        "服务器：管理员暂停了这台手机的领取：恢复之前不领新任务（设备页面或 `cmbuyer-server device resume`）",
        "服务器：这台手机已恢复领取：重新领取任务",
        "服务器：这台手机的领取节奏：下一次领取不早于 2099-01-01T00:10:00.000000Z",
    ]


def test_undelivered_fail_blocks_claims_until_resent_with_the_same_key(tmp_path: Path) -> None:
    """Gap fix: a fail that could not be delivered (server down) stays FAIL_PENDING; the runner
    claims nothing until recovery delivered exactly that fail under the same fail_key."""
    journal = Journal(tmp_path / "j.sqlite3")
    old = make_purchase()
    c = old.claim
    journal_claim(journal, c)
    api = FakeApi([make_purchase()], keys=journal)
    api.down = 1
    send_fail(journal, api, c, AttemptFailure("PRICE_OVER_CAP", "total above cap", None))
    assert journal.claim(c.attempt_id).state == "FAIL_PENDING"
    api.down = 2  # recovery at start-up and the first heartbeat fail too
    runner, _, _ = make_runner(tmp_path, api)
    t, _ = run_in_thread(runner)
    wait_for(lambda: runner.claims == 1)
    runner.stop.set()
    t.join(10)
    assert journal.claim(c.attempt_id).state == "FAILED_REPORTED"
    assert api.fails[0].reason_code == "PRICE_OVER_CAP"  # the stored fail, not INTERNAL_ERROR
    assert len(set(api.fail_keys[:-1])) == 1  # every re-send of that fail used one key


def test_fail_refused_abandons_and_holds(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    purchase = make_purchase()
    c = purchase.claim
    journal_claim(journal, c)

    class Refusing(FakeApi):
        def fail_attempt(self, claim: Any, failure: Any) -> None:
            raise ServerRejected(409, "claim_not_current")

    api = Refusing([], keys=journal)
    send_fail(journal, api, c, AttemptFailure("SHUTDOWN", "stop", None))
    assert journal.claim(c.attempt_id).state == "ABANDONED"
    assert journal.hold() and not journal.recovery_pending()


# --- signals -----------------------------------------------------------------------------------
def test_first_sigterm_stops_after_the_current_step_before_the_fence(tmp_path: Path, restore_signals: Any) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    api = FakeApi([make_purchase(), make_purchase()], keys=journal)
    api.on_event = lambda e: (e.step, e.outcome) == ("SELECT_SKU", "STARTED") and os.kill(os.getpid(), signal.SIGTERM)
    runner, sim, _ = make_runner(tmp_path, api)
    runner.install_signals()
    assert runner.run() == 0
    assert api.fails and api.fails[0].reason_code == "SHUTDOWN"
    assert "submit" not in sim.roles() and not api.fences
    assert runner.claims == 1 and len(api.queue) == 1  # stopped: the second task is not claimed
    assert journal.claims()[0].state == "FAILED_REPORTED"


def test_second_signal_outside_the_window_stops_now(tmp_path: Path, restore_signals: Any) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    api = FakeApi([make_purchase()], keys=journal)

    def twice(e: Any) -> None:
        if (e.step, e.outcome) == ("OPEN_SKU_PANEL", "STARTED"):
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)

    api.on_event = twice
    _, sim = run_until_stop_now(tmp_path, api)
    assert "submit" not in sim.roles() and not api.fences and not api.fails
    # The claim is left ACTIVE: the next start's recovery fails it (INTERNAL_ERROR), never taps.
    assert journal.claims()[0].state == "ACTIVE"
    api2 = FakeApi([], keys=journal)
    api2.purchase = api.purchase
    runner2, _sim2, _ = make_runner(tmp_path, api2, sim, once=True)
    t, _ = run_in_thread(runner2)
    wait_for(lambda: api2.fails)
    runner2.stop.set()
    t.join(10)
    assert api2.fails[0].reason_code == "INTERNAL_ERROR"
    assert "submit" not in sim.roles()


def test_second_signal_inside_the_window_finishes_tap_and_report_then_exits(
    tmp_path: Path, restore_signals: Any
) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    api = FakeApi([make_purchase(), make_purchase()], keys=journal)

    def signals_at_fence() -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)

    api.on_fence = signals_at_fence
    runner, sim = run_until_stop_now(tmp_path, api)
    assert sim.roles().count("submit") == 1
    assert api.task_state == "WAITING_PAYMENT"
    assert journal.submission(api.claimed[0].claim.attempt_id).phase == "RESULT_REPORTED"
    assert len(api.queue) == 1  # nothing claimed after it
    assert any("正处于提交窗口" in line for line in runner.lines)  # type: ignore[attr-defined]


# --- lease keeper --------------------------------------------------------------------------------
class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class _Source:
    def __init__(self) -> None:
        self.calls = 0
        self.mode = "ok"

    def claim_next(self, session: Any) -> None:
        return None

    def renew_lease(self, claim: Any) -> Lease:
        self.calls += 1
        if self.mode == "refuse":
            raise ServerRejected(409, "claim_not_current")
        if self.mode == "down":
            raise ServerUnreachable("down")
        return Lease("2099-01-01T00:02:00Z", "2099-01-01T00:00:00Z")


def test_lease_keeper_schedule_on_its_own_monotonic_clock() -> None:
    clock, src = _Clock(), _Source()
    claim = make_purchase().claim  # lease 300 s after server_now
    keeper = LeaseKeeper(src, claim, "2099-01-01T00:00:00Z", clock=clock)
    assert keeper.ttl == 300 and keeper.interval == 100  # renew every TTL/3
    clock.t += 250
    assert keeper.remaining() == 50 and not keeper.lost
    keeper.renew_once()  # new lease: 120 s from when the request was sent
    assert keeper.remaining() == 120 and keeper.claim.lease_expires_at == "2099-01-01T00:02:00Z"
    keeper.ensure(5)
    clock.t += 118
    with pytest.raises(Exception) as info:
        keeper.ensure(5)
    assert getattr(info.value, "reason_code", "") == "LEASE_TOO_SHORT"


def test_lease_keeper_refusal_marks_lost_transport_error_does_not() -> None:
    clock, src = _Clock(), _Source()
    keeper = LeaseKeeper(src, make_purchase().claim, "2099-01-01T00:00:00Z", clock=clock)
    src.mode = "down"
    keeper.renew_once()
    assert not keeper.lost  # keeps trying while the lease lasts
    clock.t += 301
    assert keeper.lost  # ran out on our own clock
    keeper2 = LeaseKeeper(src, make_purchase().claim, "2099-01-01T00:00:00Z", clock=clock)
    src.mode = "refuse"
    keeper2.renew_once()
    assert keeper2.lost
    with pytest.raises(Exception) as info:
        keeper2.ensure(5)
    assert getattr(info.value, "reason_code", "") == "LEASE_LOST"


def test_lease_keeper_thread_renews_and_stops() -> None:
    src = _Source()
    purchase = make_purchase()
    # a 0.6 s lease → renew every 0.2 s
    from dataclasses import replace

    claim = replace(purchase.claim, lease_expires_at="2099-01-01T00:00:00.600000Z")
    renewed: list[str] = []
    keeper = LeaseKeeper(src, claim, "2099-01-01T00:00:00Z", on_renewed=lambda c: renewed.append(c.attempt_id))
    keeper.start()
    pause(0.75)
    keeper.stop()
    n = src.calls
    assert 2 <= n <= 5 and len(renewed) == n
    pause(0.3)
    assert src.calls == n  # stopped


def test_json_logs_carry_utc_time_ids_step_and_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``run --json-logs`` lines: ISO-8601 UTC ``ts``; during an attempt ``task_id`` and
    ``attempt_id``; a step's line its ``step`` and ``reason_code`` (the event's); never the claim token."""
    import json
    import re

    from cmbuyer.agent.cli import _progress_fn

    journal = Journal(tmp_path / "j.sqlite3")
    purchase = make_purchase(sku_color="不存在的颜色")  # stops before the fence: SKU_VALUE_MISSING
    api = FakeApi([purchase], keys=journal)
    sim = SimPhone()
    phone = PhoneAdapter("sim-1", sim, sim, Deadlines(dump=5, shell=5, screenshot=5, tap=5))
    runner = Runner(
        RunnerConfig("sim-1", poll_seconds=0.02, once=True, waits=FAST_WAITS), phone, api, journal, _progress_fn(True)
    )
    assert runner.run() == ExitCode.OK
    err = capsys.readouterr().err
    lines = [json.loads(line) for line in err.splitlines()]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["ts"]) for line in lines)
    during = [line for line in lines if "attempt_id" in line]
    assert during and all(line["task_id"] == purchase.task.id for line in during)
    assert {line["attempt_id"] for line in during} == {purchase.claim.attempt_id}
    assert any(line.get("step") and line.get("reason_code") is None for line in during)
    assert any(line.get("reason_code") == "SKU_VALUE_MISSING" for line in during)
    assert not [line for line in lines if "attempt_id" not in line and "step" in line]  # no step outside a claim
    assert purchase.claim.claim_token not in err

    text = _progress_fn(False)
    text("hello")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z hello\n", capsys.readouterr().err)


def test_release_from_the_admin_page_clears_the_hold_and_the_phone_claims_again(tmp_path: Path) -> None:
    """The heartbeat reports the journal's hold (its code and the attempt it was set on); the
    answer's ``hold_released`` clears it, the agent logs who released it and why, and claims again."""
    journal = Journal(tmp_path / "j.sqlite3")
    attempt = make_purchase().claim.attempt_id
    journal.settle_attempt(attempt, lambda c, f: (c, f, "RISK_WALL: a phone-level stop; a person must check"))
    api = FakeApi([make_purchase()], keys=journal)
    real = api.heartbeat
    release = {"by": "admin:ops", "at": "2099-01-01T00:00:00.000000Z", "note": "解锁了"}

    def heartbeat(**kw: Any) -> dict[str, Any]:
        answer = real(**kw)
        return {**answer, "hold_released": release} if kw.get("hold") else answer

    api.heartbeat = heartbeat  # type: ignore[method-assign]
    runner, _, _ = make_runner(tmp_path, api)
    t, _ = run_in_thread(runner)
    wait_for(lambda: runner.claims == 1)
    runner.stop.set()
    t.join(10)
    assert api.heartbeat_holds[0] == {
        "code": "RISK_WALL",
        "reason": "RISK_WALL: a phone-level stop; a person must check",
        "attempt_id": attempt,
    }
    assert api.heartbeat_states[0] == "NEEDS_PERSON" and "READY" in api.heartbeat_states
    assert journal.hold() is None and journal.hold_attempt() is None
    lines = runner.lines  # type: ignore[attr-defined]
    assert any(line.startswith("暂停接单（HOLD）已在服务器上由 admin:ops") and "解锁了" in line for line in lines)


def test_screen_request_sends_a_screenshot_or_names_the_app_in_front(tmp_path: Path) -> None:
    api = FakeApi([], keys=Journal(tmp_path / "j.sqlite3"))
    uploads: list[tuple[str, bytes]] = []
    api.upload_device_screen = lambda rid, png: uploads.append((rid, png)) or "s"  # type: ignore[attr-defined]
    sent: list[dict[str, str] | None] = []
    real = api.heartbeat

    def heartbeat(**kw: Any) -> dict[str, Any]:
        sent.append(kw.get("screen"))
        return {**real(**kw), "screenshot_request": "9c1b6a3e-2f4d-4e5a-8b7c-0d1e2f3a4b5c"}

    api.heartbeat = heartbeat  # type: ignore[method-assign]
    runner, sim, _ = make_runner(tmp_path, api)
    runner.phone.open_goods("937122477375")  # Pinduoduo in front
    runner._heartbeat(runner._status(), "READY")
    runner._heartbeat(runner._status(), "READY")  # the same request again: answered once only
    assert [rid for rid, _ in uploads] == ["9c1b6a3e-2f4d-4e5a-8b7c-0d1e2f3a4b5c"]
    assert uploads[0][1].startswith(b"\x89PNG")
    assert sent == [None, None]

    # a cashier in front (the simulator's foreign window): the package goes back, never an image
    sim.app.foreign = "com.eg.android.AlipayGphone"
    runner2, _, _ = make_runner(tmp_path / "b", api, sim)
    runner2._heartbeat(runner2._status(), "READY")
    runner2._heartbeat(runner2._status(), "READY")
    assert sent[-1] == {
        "request_id": "9c1b6a3e-2f4d-4e5a-8b7c-0d1e2f3a4b5c",
        "foreground_package": "com.eg.android.AlipayGphone",
    }
    assert len(uploads) == 1  # no image of a foreign app


def test_the_printed_clear_hold_command_runs_as_printed(tmp_path: Path) -> None:
    """The HOLD line names the state dir and the program, so pasting its command into a shell on
    another directory clears exactly this phone's hold."""
    import re
    import subprocess

    journal = Journal(tmp_path / "state dir" / "sim-1.sqlite3")
    journal.set_hold("RISK_WALL: a phone-level stop")
    runner, _, _ = make_runner(tmp_path, FakeApi([], keys=journal))
    runner.stop.set()
    runner.run()
    line = next(line for line in runner.lines if line.startswith("暂停接单（HOLD，启动前就有）"))  # type: ignore[attr-defined]
    command = re.search(r"在这台主机上运行：(.*)$", line)
    assert command is not None, line
    env = {k: v for k, v in os.environ.items() if not k.startswith("CMBUYER_")}
    ran = subprocess.run(command.group(1), shell=True, cwd="/", env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert Journal(tmp_path / "state dir" / "sim-1.sqlite3").hold() is None
