"""A broken operator pack dir under the REAL runner: real server (tests/agent/realserver.py), the
phone simulator through the real uiautomator2/adbutils, the real journal. The agent keeps its other
duties — heartbeats ``NO_PACK``, claims nothing, never crashes or loops on the error, says the error
once — and picks up the repaired pack at its next loop, without a restart, and orders with it."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from pathlib import Path

from cmbuyer.agent.client import HttpDeviceApi
from cmbuyer.agent.journal import Journal
from cmbuyer.agent.phone.adapter import PhoneAdapter
from cmbuyer.agent.runner import Runner, RunnerConfig
from cmbuyer.agent.waits import FlowWaits
from cmbuyer.phonesim.journal import payment_taps
from cmbuyer.phonesim.testing import adbutils_leaks_ignored, running_sim
from tests.agent.packtools import evidence_path, flip_byte, make_pack_dir, rebound, write_pack
from tests.agent.realserver import RealServer
from tests.agent.test_real_server import _scenario, fast_phone  # noqa: F401  (fixture)


def _wait(cond: Callable[[], bool], seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_broken_pack_dir_heartbeats_no_pack_and_the_repaired_pack_orders(tmp_path: Path, fast_phone: FlowWaits) -> None:  # noqa: F811
    pack_dir = make_pack_dir(tmp_path / "packs")
    data = rebound("8.17.0", "8.23.0", 82300)
    write_pack(pack_dir, data)
    dump = evidence_path(pack_dir, data, "sim-confirm", "dump")
    good = dump.read_bytes()
    flip_byte(dump)  # the pack for the phone's version: evidence changed after it was written
    (pack_dir / "notes.json").write_text("{not json", encoding="utf-8")  # a file of no known version
    (pack_dir / "notes.json").chmod(0o644)
    scenario = _scenario(
        app={"package": "com.xunmeng.pinduoduo", "version_name": "8.23.0", "version_code": 82300}, layout="sku_sheet"
    )  # the 8.17.0 layout the re-bound pack declares
    env = {"CMBUYER_ALLOWED_APP_VERSIONS": "8.17.0,8.23.0", "CMBUYER_HEARTBEAT_INTERVAL": "1"}
    with RealServer(tmp_path, env=env) as srv, adbutils_leaks_ignored(), running_sim(scenario) as sim:
        creds = srv.add_device()
        task = srv.add_task()
        journal = Journal(tmp_path / "agent-state" / "sim-1.sqlite3")
        lines: list[str] = []
        runner = Runner(
            RunnerConfig("sim-1", poll_seconds=0.05, pack_dir=pack_dir, waits=fast_phone),
            PhoneAdapter.connect("sim-1"),
            HttpDeviceApi(srv.url, creds, journal, backoff=0.2),
            journal,
            lines.append,
        )
        ended: list[int] = []
        thread = threading.Thread(target=lambda: ended.append(runner.run()), daemon=True)
        thread.start()
        try:
            assert _wait(lambda: runner.heartbeats >= 3, 10), lines
            assert thread.is_alive() and not ended
            row = srv.device_row(creds.device_id)
            assert (row["reported_state"], row["pdd_version"]) == ("NO_PACK", "8.23.0")
            assert srv.state(task.id) == "PENDING" and runner.claims == 0
            assert [e for e in sim.journal("sim-1").entries() if e["kind"] == "tap"] == []
            said = [line for line in lines if "evidence mismatch" in line]
            assert said == [
                "NO_PACK: ops-8.23.0-82300.json: $.evidence['sim-confirm'].files.dump: evidence mismatch: "
                f"evidence/pdd-8.17.0-81700/sim-confirm/dump.xml (sha256 {_sha(dump)[:12]}… but the pack "
                f"says {_sha_bytes(good)[:12]}…)"
            ], lines  # once, however many loops

            dump.write_bytes(good)  # the operator repairs the evidence: no restart
            assert _wait(lambda: srv.state(task.id) == "WAITING_PAYMENT", 90), "\n".join(lines)
        finally:
            runner.stop.set()
            thread.join(30)
        assert ended == [0]
        assert f"识别包 ops-8.23.0-82300（运维识别包 {pack_dir / 'ops-8.23.0-82300.json'}）" in lines
        entries = sim.journal("sim-1").entries()
        assert [e["role"] for e in entries if e["kind"] == "tap"].count("submit") == 1
        assert payment_taps(entries) == []


def _sha(path: Path) -> str:
    return _sha_bytes(path.read_bytes())


def _sha_bytes(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()
