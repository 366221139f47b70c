"""The real runner reports its selector pack in the heartbeat to the REAL server
(tests/agent/realserver.py), on the simulator's app model behind the real PhoneAdapter:

- the idle loop sends the pack in use, ``NO_PACK`` once the installed app version has no pack, and no
  pack id at all when the app is gone (the server then stores unknown), following the phone as it changes;
- the side-thread ``BUSY`` heartbeat during a flow carries the same pack id (the devices page must not
  flip to unknown while a phone is buying).

What the server stored is read from its SQLite file (``devices.pack_id``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.agent.client import HttpDeviceApi
from cmbuyer.agent.model import TaskEvent
from cmbuyer.agent.waits import FlowWaits
from tests.agent.packtools import pack_for_version

from .realserver import RealServer
from .simphone import SimPhone
from .test_real_server import Agent, fast_phone, sim_phone  # noqa: F401  (fast_phone: fixture)

PACK_8_17 = pack_for_version("8.17.0", 81700).id


class PhoneWhoseAppCanGo(SimPhone):
    """``version = None`` → ``dumpsys package`` knows no Pinduoduo (the runner's APP_MISSING)."""

    def shell(self, cmd: list[str], timeout: float | None = None) -> str:
        if cmd[:2] == ["dumpsys", "package"] and self.version is None:
            return ""
        return super().shell(cmd, timeout)


def _wait_for(what: Callable[[], Any], want: Any, seconds: float = 10.0) -> Any:
    deadline = time.monotonic() + seconds
    got = what()
    while got != want and time.monotonic() < deadline:
        time.sleep(0.05)
        got = what()
    return got


def _reported(srv: RealServer, device_id: str) -> Callable[[], tuple[Any, Any]]:
    """Reads the device's stored (reported_state, pack_id) from the server's database."""

    def seen() -> tuple[Any, Any]:
        row = srv.device_row(device_id)
        return row.get("reported_state"), row.get("pack_id")

    return seen


def test_idle_heartbeat_follows_the_installed_version(tmp_path: Path) -> None:
    sim = PhoneWhoseAppCanGo()
    with RealServer(tmp_path) as srv:
        creds = srv.add_device()
        agent = Agent(tmp_path, srv, creds, sim_phone(sim))
        seen = _reported(srv, creds.device_id)
        with agent.running():
            assert _wait_for(seen, ("READY", PACK_8_17)) == ("READY", PACK_8_17)
            sim.version = ("8.18.0", 81800)  # the app updated itself: no pack for it
            assert _wait_for(seen, ("NO_PACK", "NO_PACK")) == ("NO_PACK", "NO_PACK")
            sim.version = None  # uninstalled: the version, and so the pack, is unknown
            assert _wait_for(seen, ("APP_MISSING", None)) == ("APP_MISSING", None)
            sim.version = ("8.17.0", 81700)
            assert _wait_for(seen, ("READY", PACK_8_17)) == ("READY", PACK_8_17)
        assert sim.taps == []  # no task: nothing claimed, nothing tapped


def test_busy_heartbeat_carries_the_pack_id(tmp_path: Path, fast_phone: FlowWaits) -> None:  # noqa: F811
    sim = SimPhone()
    seen_busy: list[dict[str, Any]] = []
    with RealServer(tmp_path, env={"CMBUYER_HEARTBEAT_INTERVAL": "1"}) as srv:

        class WaitsForBusy(HttpDeviceApi):
            """Holds the flow at gate 2 until the server has stored a BUSY heartbeat (side thread, every
            second), so the test does not depend on how long a flow takes."""

            def append_events(self, claim: Any, events: list[TaskEvent]) -> None:
                if any((e.step, e.outcome) == ("GATE_2", "STARTED") for e in events):
                    row = _wait_for(lambda: srv.device_row(creds.device_id)["reported_state"], "BUSY")
                    assert row == "BUSY"
                    seen_busy.append(srv.device_row(creds.device_id))
                super().append_events(claim, events)

        creds = srv.add_device()
        task = srv.add_task()
        agent = Agent(tmp_path, srv, creds, sim_phone(sim), api_cls=WaitsForBusy, waits=fast_phone)
        assert agent.run_once() == 0
        assert srv.state(task.id) == "WAITING_PAYMENT"
    (row,) = seen_busy
    assert (row["reported_state"], row["pack_id"], row["pdd_version"]) == ("BUSY", PACK_8_17, "8.17.0")


def test_a_100000_deep_pack_is_one_line_and_the_heartbeat_says_no_pack(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A 100,000-deep nested pack for the installed version in the operator pack dir
    (it crashed ``run`` with a RecursionError traceback): one line naming the file, the runner keeps
    heartbeating ``NO_PACK`` and claims nothing."""
    pack_dir = tmp_path / "packs"
    pack_dir.mkdir(mode=0o755)
    path = pack_dir / "pdd-8.23.0-82300.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    path.chmod(0o644)
    sim = SimPhone()
    sim.version = ("8.23.0", 82300)
    env = {"CMBUYER_ALLOWED_APP_VERSIONS": "8.17.0,8.23.0", "CMBUYER_HEARTBEAT_INTERVAL": "1"}
    with RealServer(tmp_path, env=env) as srv:
        creds = srv.add_device()
        task = srv.add_task()
        agent = Agent(tmp_path, srv, creds, sim_phone(sim))
        agent.runner.cfg.pack_dir = pack_dir
        with agent.running() as t:
            assert _wait_for(_reported(srv, creds.device_id), ("NO_PACK", "NO_PACK")) == ("NO_PACK", "NO_PACK")
            assert _wait_for(lambda: agent.runner.heartbeats >= 3, True) is True
            assert t.is_alive()
        assert srv.state(task.id) == "PENDING" and sim.taps == []
    said = [line for line in agent.lines if "pdd-8.23.0-82300.json" in line]
    assert said == ["NO_PACK: pdd-8.23.0-82300.json: $: more than 50000 values"], agent.lines
    assert "Traceback" not in caplog.text and "RecursionError" not in caplog.text
