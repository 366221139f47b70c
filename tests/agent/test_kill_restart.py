"""SIGKILL the real `cmbuyer-agent run` process at each journal phase, restart it, and check that the
phone never sees a second submit tap and the server ends in the right state.

Processes: the agent is a real subprocess (`cmbuyer.agent.cli.main` with a credentials file,
ANDROID_ADB_SERVER_PORT, CMBUYER_AGENT_STATE_DIR — exactly what tests/e2e and the demo run; the restart
is the installed `cmbuyer-agent` entry point itself);
the server is the real app on a loopback port (tests/agent/realserver.py) and the phone is the
simulator's real adb server, both in the test process so the test can read their state directly.

Kill points: the first run starts through tests/agent/pausing_agent.py, which gives the agent's journal
a ``commit_hook`` that stops the process right after ``<phase>`` is committed (agent/journal.py
``COMMIT_POINTS``); the test waits until the journal file shows it, then sends SIGKILL from outside.
``OBSERVED`` = the result is decided and journaled but not reported.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.phonesim.testing import running_sim

from .pausing_agent import PAUSE_MARK
from .realserver import RealServer

AGENT = str(Path(sys.executable).parent / "cmbuyer-agent")
PAUSING_AGENT = [sys.executable, str(Path(__file__).with_name("pausing_agent.py"))]


def _journal_state(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        claims = conn.execute("SELECT state FROM claims").fetchall()
        subs = conn.execute("SELECT phase, observation FROM submissions").fetchall()
    except sqlite3.Error:
        return {}
    finally:
        conn.close()
    return {"claims": [c[0] for c in claims], "phases": [s[0] for s in subs], "observations": [s[1] for s in subs]}


def _wait(cond: Any, proc: subprocess.Popen[bytes], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc.poll() is not None:
            raise AssertionError(f"agent exited ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class AgentProcess:
    def __init__(self, tmp: Path, srv: RealServer, sim_port: int) -> None:
        creds = srv.add_device()
        self.creds_file = tmp / "sim-1.credentials"
        fd = os.open(self.creds_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"device_id={creds.device_id}\ntoken={creds.token}\n")
        self.state_dir = tmp / "agent-state"
        self.journal = self.state_dir / "sim-1.sqlite3"
        self.url = srv.url
        keep = "CMBUYER_AGENT_LOCK_DIR"  # the suite's own lock dir (tests/conftest.py)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("CMBUYER_", "ANDROID_ADB")) or k == keep}
        self.env.update({"ANDROID_ADB_SERVER_PORT": str(sim_port), "CMBUYER_AGENT_STATE_DIR": str(self.state_dir)})
        self.log = tmp / "agent.log"

    def start(self, pause_after: str | None = None) -> subprocess.Popen[bytes]:
        launcher = [*PAUSING_AGENT, pause_after] if pause_after else [AGENT]
        with self.log.open("ab") as log:  # the child keeps its own descriptor
            return subprocess.Popen(
                [
                    *launcher,
                    "run",
                    "--device",
                    "sim-1",
                    "--server",
                    self.url,
                    "--credentials-file",
                    str(self.creds_file),
                    "--poll-seconds",
                    "0.2",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
            )


def kill_paused(agent: AgentProcess, proc: subprocess.Popen[bytes], point: str, reached: Callable[[], bool]) -> None:
    """Wait until ``reached()`` (what the journal shows once ``point`` is committed), check that the pausing
    hook holds the agent there, then SIGKILL it."""
    try:
        _wait(reached, proc, 60, f"journal phase {point}")
        time.sleep(0.3)  # paused: nothing more happens
        assert f"{PAUSE_MARK} {point}" in agent.log.read_text("utf-8", "replace")  # the hook, not luck
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=30)


@pytest.mark.parametrize(
    "phase,submit_taps,task_state,observation",
    [
        # the server claimed, the journal has nothing yet: the restart re-sends the journaled claim-next key
        # under its old session, the server replays the same claim and the agent buys it (on main the new
        # session got claim_requires_manual forever: the phone was blocked until a person acted)
        ("CLAIM_ANSWERED", 1, "WAITING_PAYMENT", "SUBMITTED"),
        ("CLAIMED", 0, "FAILED", None),  # before the fence: recovery fails the attempt
        ("PERMIT_RECEIVED", 0, "RECONCILIATION_REQUIRED", "UNKNOWN"),
        ("TAP_INTENT_RECORDED", 0, "RECONCILIATION_REQUIRED", "UNKNOWN"),
        ("TAPPED", 1, "RECONCILIATION_REQUIRED", "UNKNOWN"),
        ("OBSERVED", 1, "WAITING_PAYMENT", "SUBMITTED"),  # the stored result is re-sent with its key
        ("RESULT_REPORTED", 1, "WAITING_PAYMENT", "SUBMITTED"),
    ],
)
def test_sigkill_at_each_journal_phase_then_restart(
    tmp_path: Path, phase: str, submit_taps: int, task_state: str, observation: str | None
) -> None:
    with RealServer(tmp_path) as srv, running_sim(set_env=False) as sim:
        task = srv.add_task()
        agent = AgentProcess(tmp_path, srv, sim.port)
        first = agent.start(pause_after=phase)
        want = "ACTIVE" if phase == "CLAIMED" else None
        kill_paused(
            agent,
            first,
            phase,
            lambda: (
                srv.state(task.id) == "CLAIMED"
                if phase == "CLAIM_ANSWERED"
                else (want in _journal_state(agent.journal).get("claims", []))
                if want
                else (
                    phase in _journal_state(agent.journal).get("phases", [])
                    or (phase == "OBSERVED" and any(_journal_state(agent.journal).get("observations", [None])))
                )
            ),
        )
        taps_before = len(sim.journal("sim-1").taps("submit"))
        assert taps_before == (0 if phase == "CLAIM_ANSWERED" else submit_taps)

        log_offset = agent.log.stat().st_size if agent.log.exists() else 0
        second = agent.start()
        try:
            _wait(lambda: srv.state(task.id) == task_state, second, 60, f"server state {task_state}")
            # SIGTERM only once the restarted agent is up (its signal handlers are installed
            # before its first heartbeat); with RESULT_REPORTED the state is already final.
            _wait(
                lambda: "心跳：状态".encode() in agent.log.read_bytes()[log_offset:],
                second,
                60,
                "the restarted agent's first heartbeat",
            )
            time.sleep(1.0)  # the restarted agent keeps polling: still no new tap
            assert _stop(second) == 0
        finally:
            if second.poll() is None:
                second.kill()
                second.wait()
        assert len(sim.journal("sim-1").taps("submit")) == submit_taps
        sim.journal("sim-1").assert_no_payment_taps()
        detail = srv.detail(task.id)
        if observation is None:
            assert detail["submission"] is None and detail["task"]["state_reason"] == "INTERNAL_ERROR"
        else:
            assert detail["submission"]["observation"] == observation
        js = _journal_state(agent.journal)
        assert all(p == "RESULT_REPORTED" for p in js["phases"])
        assert "ACTIVE" not in js["claims"] and "FAIL_PENDING" not in js["claims"]
        log = agent.log.read_text("utf-8", "replace")
        assert "Traceback" not in log, log[-3000:]
