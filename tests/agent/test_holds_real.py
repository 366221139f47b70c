"""The phone stops, not the queue — against the real server and the real uiautomator2/adbutils
talking to the phone simulator's adb server.

- a phone showing a risk wall: with 10 PENDING tasks exactly one fails, the phone reports
  ``NEEDS_PERSON`` to the server, the other 9 stay PENDING;
- the simulator's ``emoji_dump`` fault in ``broken`` mode on the SKU sheet (unpaired UTF-16
  surrogates in every dump there): each attempt is a ``DUMP_INVALID`` stop, never a crash, and after
  three of them in a row the phone holds (``REPEATED_FAILURES``) instead of burning the queue;
- the crash-loop breaker with real process deaths: the agent process SIGKILLed twice with an attempt
  open → on the next start it holds, claims nothing, until ``cmbuyer-agent journal --clear-hold``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.agent.client import HttpDeviceApi
from cmbuyer.agent.journal import Journal
from cmbuyer.agent.phone.adapter import PhoneAdapter
from cmbuyer.agent.runner import Runner, RunnerConfig
from cmbuyer.phonesim.server import PhoneSim
from cmbuyer.phonesim.testing import adbutils_leaks_ignored, running_sim

from .realserver import RealServer, TaskRef
from .test_kill_restart import AGENT, AgentProcess, _journal_state, _stop, _wait


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[RealServer]:
    with RealServer(tmp_path) as server:
        yield server


@pytest.fixture
def sim() -> Iterator[PhoneSim]:
    with adbutils_leaks_ignored(), running_sim() as phone_sim:
        yield phone_sim


class LoopingAgent:
    """The long-running loop (not ``--once``) in a thread, wired as ``cmbuyer-agent run`` wires it."""

    def __init__(self, root: Path, srv: RealServer, serial: str = "sim-1") -> None:
        self.creds = srv.add_device()
        self.journal = Journal(root / "agent-state" / f"{serial}.sqlite3")
        api = HttpDeviceApi(srv.url, self.creds, self.journal, backoff=0.2)
        self.lines: list[str] = []
        self.runner = Runner(
            RunnerConfig(serial, poll_seconds=0.1), PhoneAdapter.connect(serial), api, self.journal, self.lines.append
        )
        self.result: list[Any] = []
        self._thread = threading.Thread(target=lambda: self.result.append(self.runner.run()), daemon=True)

    def __enter__(self) -> LoopingAgent:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.runner.stop.set()
        self._thread.join(60)

    def alive(self) -> bool:
        return self._thread.is_alive()


def _until(cond: Callable[[], bool], agent: LoopingAgent, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert agent.alive(), f"the agent loop died before {what}: {agent.lines[-10:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {agent.lines[-10:]}"
        time.sleep(0.1)


def _states(srv: RealServer, refs: list[TaskRef]) -> list[str]:
    return [srv.state(r.id) for r in refs]


def _until_one_failed_and_the_phone_holds(srv: RealServer, refs: list[TaskRef], agent: LoopingAgent) -> None:
    """Wait for the first FAILED task, then for the phone to report NEEDS_PERSON (its hold) to the server."""
    _until(lambda: "FAILED" in _states(srv, refs), agent, 120, "the first failed task")
    _until(
        lambda: srv.device_row(agent.creds.device_id)["reported_state"] == "NEEDS_PERSON",
        agent,
        30,
        "NEEDS_PERSON on the server",
    )


def test_risk_wall_fails_one_task_and_holds_the_phone_not_the_queue(
    tmp_path: Path, srv: RealServer, sim: PhoneSim
) -> None:
    refs = [srv.add_task(quantity=1) for _ in range(10)]
    phone = sim.phone("sim-1")
    phone.inject({"kind": "popup", "popup": "risk_wall", "text": "请将正脸置于框内"})  # on screen from now on
    with LoopingAgent(tmp_path, srv) as agent:
        _until_one_failed_and_the_phone_holds(srv, refs, agent)
        time.sleep(2.0)  # the loop keeps polling (20 polls): still nothing claimed
        assert agent.alive()
        claims = agent.runner.claims
    states = _states(srv, refs)
    assert states.count("FAILED") == 1 and states.count("PENDING") == 9, states
    failed = next(r for r in refs if srv.state(r.id) == "FAILED")
    assert srv.detail(failed.id)["task"]["state_reason"] == "RISK_WALL"
    assert claims == 1
    assert (agent.journal.hold() or "").startswith("RISK_WALL")
    assert phone.journal.taps("submit") == [] and phone.orders == []
    phone.journal.assert_no_payment_taps()


# Every unsafe payment variant of the order-sheet scenario (phonesim/scenarios/order_sheet.yaml): the
# phone is the problem, so one task fails with PAYMENT_MODE_UNSAFE and the phone holds itself.
UNSAFE_PAYMENT_PHONES = [
    "sim-paylater",
    "sim-nopw",
    "sim-balance",
    "sim-unreadable",
    "sim-tworows",
    "sim-paynow",
    "sim-confirmpay",
]


@pytest.mark.parametrize("serial", [UNSAFE_PAYMENT_PHONES[0], UNSAFE_PAYMENT_PHONES[3]])
def test_unsafe_payment_mode_fails_one_task_and_holds_the_phone_not_the_queue(
    tmp_path: Path, srv: RealServer, serial: str
) -> None:
    refs = [
        srv.add_task(goods_id="710000000001", color="黑色", size="L", quantity=1, max_total_price="40.00")
        for _ in range(10)
    ]
    with adbutils_leaks_ignored(), running_sim("order_sheet", serials=(serial,)) as order_sim:
        phone = order_sim.phone(serial)
        with LoopingAgent(tmp_path, srv, serial) as agent:
            _until_one_failed_and_the_phone_holds(srv, refs, agent)
            time.sleep(2.0)  # the loop keeps polling: still nothing claimed
            assert agent.alive()
            claims = agent.runner.claims
        states = _states(srv, refs)
        assert states.count("FAILED") == 1 and states.count("PENDING") == 9, states
        failed = next(r for r in refs if srv.state(r.id) == "FAILED")
        detail = srv.detail(failed.id)
        assert detail["task"]["state_reason"] == "PAYMENT_MODE_UNSAFE"
        assert detail["submission"] is None  # no fence was requested
        assert "FAILURE" in {e["kind"] for e in detail["evidence"]}
        assert claims == 1
        assert (agent.journal.hold() or "").startswith("PAYMENT_MODE_UNSAFE")
        assert phone.journal.taps("submit") == [] and phone.orders == []
        phone.journal.assert_no_payment_taps()


def test_broken_emoji_dump_is_a_dump_invalid_stop_and_no_crash_loop(
    tmp_path: Path, srv: RealServer, sim: PhoneSim
) -> None:
    """On main the first such dump raised UnicodeEncodeError out of the parser: the loop died with the
    task left ORDERING (and each restart burned the next task)."""
    refs = [srv.add_task(quantity=1) for _ in range(5)]
    phone = sim.phone("sim-1")
    phone.inject({"kind": "emoji_dump", "mode": "broken", "when": {"on_screen": "sku"}, "times": None})
    with LoopingAgent(tmp_path, srv) as agent:
        _until(lambda: _states(srv, refs).count("FAILED") >= 3, agent, 240, "three failed tasks")
        _until(
            lambda: srv.device_row(agent.creds.device_id)["reported_state"] == "NEEDS_PERSON",
            agent,
            30,
            "NEEDS_PERSON on the server",
        )
        time.sleep(1.5)
        assert agent.alive()
    states = _states(srv, refs)
    assert states.count("FAILED") == 3 and states.count("PENDING") == 2, states
    reasons = {srv.detail(r.id)["task"]["state_reason"] for r in refs if srv.state(r.id) == "FAILED"}
    assert reasons == {"DUMP_INVALID"}
    assert (agent.journal.hold() or "").startswith("REPEATED_FAILURES")
    assert any(e.get("fault") == "emoji_dump" for e in phone.journal.entries("fault"))
    assert phone.journal.taps("submit") == []


@contextmanager
def _agent_process(agent: AgentProcess, pause_after: str | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """One ``cmbuyer-agent run`` process, killed on the way out if the test left it running."""
    proc = agent.start(pause_after)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_crash_loop_breaker_holds_after_two_process_deaths_until_clear_hold(tmp_path: Path) -> None:
    with RealServer(tmp_path) as srv, running_sim(set_env=False) as sim:
        refs = [srv.add_task(quantity=1) for _ in range(3)]
        agent = AgentProcess(tmp_path, srv, sim.port)
        for n in (1, 2):  # SIGKILL with the attempt open (right after the claim is journaled)
            with _agent_process(agent, pause_after="CLAIMED") as proc:
                want = ["FAILED_REPORTED"] * (n - 1) + ["ACTIVE"]
                _wait(
                    lambda w=want: _journal_state(agent.journal).get("claims", []) == w,  # type: ignore[misc]
                    proc,
                    60,
                    f"claim {n} journaled",
                )
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=10)
        device_id = agent.creds_file.read_text().split("device_id=")[1].split()[0]
        with _agent_process(agent) as proc:
            _wait(
                lambda: srv.device_row(device_id).get("reported_state") == "NEEDS_PERSON",
                proc,
                60,
                "NEEDS_PERSON after the second crash",
            )
            time.sleep(1.5)  # polls every 0.2 s: nothing claimed
            assert _states(srv, refs).count("PENDING") == 1
            assert _stop(proc) == 0
        assert sorted(srv.detail(r.id)["task"]["state_reason"] or "" for r in refs if srv.state(r.id) == "FAILED") == [
            "INTERNAL_ERROR",
            "INTERNAL_ERROR",
        ]
        assert "暂停接单（HOLD）：REPEATED_FAILURES: 反复崩溃（crash loop）" in agent.log.read_text(errors="replace")

        shown = subprocess.run(
            [AGENT, "journal", "--device", "sim-1", "--clear-hold"],
            env=agent.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        summary = json.loads(shown.stdout)
        assert shown.returncode == 0 and summary["hold"] is None
        assert summary["streaks"] == {"crashes": 0, "failures": 0}

        pending = next(r for r in refs if srv.state(r.id) == "PENDING")
        with _agent_process(agent) as proc:  # cleared: the last task is claimed and bought
            _wait(lambda: srv.state(pending.id) == "WAITING_PAYMENT", proc, 120, "the last task bought")
            assert _stop(proc) == 0
        sim.journal("sim-1").assert_single_submit_tap()
