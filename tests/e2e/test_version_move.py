"""A phone moves to an app version no shipped pack knows — with NO code change.

Real processes throughout (demo/stack.py): `cmbuyer-server serve`, `cmbuyer-phonesim` with one phone
("canary") running Pinduoduo 8.23.0 / 82300 (the simulator shows the order-sheet layout for
versionCode >= 82200), and ONE `cmbuyer-agent run --pack-dir DIR` process that is never restarted.
The operator's part is exactly the commands of docs/agent.md "New app version runbook", run as
`cmbuyer-agent` subprocesses in an operator's working folder; the pack is a real file in a real
directory (written by the small helpers in tests/agent/packtools.py the way a person edits it).

Supervised first orders are switched off here (`CMBUYER_SUPERVISED_ORDERS=0`): with them
on, the first orders of the new pack wait for a person's approval, which is the subject of its own
tests.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from cmbuyer.phonesim.journal import order_counts, payment_taps, submit_taps
from cmbuyer.server.db import connect_sync
from demo.stack import BIN, Stack, TaskSpec, free_port
from tests.agent.packtools import add_capture_evidence, flip_byte, rebound, write_pack
from tests.e2e.conftest import SCENARIO, agent_log, stop_and_show_logs, wait_until

pytestmark = pytest.mark.e2e

NEW_NAME, NEW_CODE = "8.23.0", 82300
PACK_ID = "pdd-8.23.0-82300"
PACK_FILE = f"{PACK_ID}.json"
SERIAL = "canary"
SHIRT = TaskSpec("canary shirt", "937122477375", "黑色CHA(纯棉)", "M(建议100-115)", 2, "30.00")
ORDER = (
    "--goods-id",
    SHIRT.goods_id,
    "--color",
    SHIRT.color,
    "--size",
    str(SHIRT.size),
    "--quantity",
    "2",
    "--max-total",
    "30.00",
)
OLD_VERSIONS = "8.17.0,8.22.0"


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str

    def lines(self) -> list[str]:
        return self.out.strip().splitlines()


class Operator:
    """A person at the phone host's shell: runs ``cmbuyer-agent ARGS`` in their working folder with the
    host's environment (adb → the simulator)."""

    def __init__(self, stack: Stack, home: Path) -> None:
        self.stack = stack
        self.home = home
        home.mkdir(mode=0o700, parents=True, exist_ok=True)

    def __call__(self, *args: str) -> Ran:
        done = subprocess.run(
            [str(BIN / "cmbuyer-agent"), *args],
            cwd=self.home,
            env=self.stack.agent_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return Ran(done.returncode, done.stdout, done.stderr)


def _wait(cond: Callable[[], bool], seconds: float, what: str, stack: Stack) -> None:
    wait_until(cond, seconds, what, lambda: _agent_log(stack), poll=0.1)


def _agent_log(stack: Stack) -> str:
    return agent_log(stack, SERIAL)


def _device(stack: Stack) -> dict[str, Any]:
    conn = connect_sync(stack.data_dir / "cmbuyer.sqlite3", read_only=True)
    try:
        cur = conn.execute(
            "SELECT pdd_version, pdd_version_code, reported_state, pack_id, app_version_allowed, "
            "last_heartbeat_at FROM devices WHERE name=?",
            (SERIAL,),
        )
        cols = [d[0] for d in cur.description]
        return dict(zip(cols, cur.fetchone(), strict=True))
    finally:
        conn.close()


def _task(stack: Stack) -> dict[str, Any]:
    return stack.task_details([SHIRT])[SHIRT.task_id]


def _heartbeats_pass(stack: Stack, count: int) -> None:
    """Wait until the server has recorded ``count`` further heartbeats (interval 1 s here)."""
    seen = {_device(stack)["last_heartbeat_at"]}
    _wait(
        lambda: seen.add(_device(stack)["last_heartbeat_at"]) or len(seen) > count,
        15,
        f"{count} more heartbeats",
        stack,
    )


def _taps(stack: Stack) -> list[dict[str, Any]]:
    return [e for e in stack.phone_journal() if e["kind"] == "tap"]


@pytest.fixture
def canary(tmp_path: Path) -> Any:
    """The stack with the canary phone on 8.23.0, one PENDING task, and the agent running with an empty
    operator pack dir (0700); yields (stack, pack_dir, operator)."""
    data = yaml.safe_load(SCENARIO.read_text(encoding="utf-8"))
    data["phones"] = {
        SERIAL: {"app": {"package": "com.xunmeng.pinduoduo", "version_name": NEW_NAME, "version_code": NEW_CODE}}
    }
    scenario = tmp_path / "canary-scenario.json"
    scenario.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    stack = Stack(
        tmp_path / "data",
        server_port=free_port(),
        env={
            "CMBUYER_ALLOWED_APP_VERSIONS": OLD_VERSIONS,
            "CMBUYER_HEARTBEAT_INTERVAL": "1",
            "CMBUYER_SUPERVISED_ORDERS": "0",
        },
    )
    stack.init()
    pack_dir = tmp_path / "agent-packs"
    pack_dir.mkdir(mode=0o700)
    try:
        stack.start_server()
        stack.start_sim([SERIAL], scenario)
        stack.add_device(SERIAL)
        stack.create_tasks([SHIRT])
        stack.start_agent(SERIAL, ("--pack-dir", str(pack_dir), "--poll-seconds", "0.2"))
        yield stack, pack_dir, Operator(stack, tmp_path / "operator")
    finally:
        stop_and_show_logs(stack)


def _assert_no_pack_and_idle(stack: Stack) -> None:
    """The agent reports NO_PACK for the new version and has claimed nothing, tapped nothing."""
    _wait(lambda: _device(stack)["pack_id"] == "NO_PACK", 20, "a NO_PACK heartbeat", stack)
    _heartbeats_pass(stack, 2)
    row = _device(stack)
    assert (row["pdd_version"], row["pdd_version_code"], row["reported_state"], row["pack_id"]) == (
        NEW_NAME,
        NEW_CODE,
        "NO_PACK",
        "NO_PACK",
    )
    detail = _task(stack)
    assert detail["task"]["state"] == "PENDING" and detail["attempts"] == []
    assert _taps(stack) == []


def _write_and_prove_pack(stack: Stack, op: Operator) -> Path:
    """Runbook steps 2-8 in the operator's folder; returns the proven pack file (work/<id>.json)."""
    # 2. no pack for the new version yet: dry-run refuses, says why
    ran = op("dry-run", "--device", SERIAL, *ORDER, "--out", "captures/canary/dryrun-1")
    assert (ran.code, json.loads(ran.out)) == (
        2,
        {"error": "NO_SELECTOR_PACK", "detail": "没有适用于应用版本 8.23.0（82300）的识别包"},
    )
    # 3. candidate pack: the nearest shipped pack (8.22.0) and its evidence copied, bound to 8.23.0
    work = op.home / "work"
    work.mkdir(mode=0o700)
    candidate = rebound("8.22.0", NEW_NAME, NEW_CODE, PACK_ID)
    candidate["description"] = (
        f"Pinduoduo {NEW_NAME} ({NEW_CODE}), copied from pdd-8.22.0-82200 by the operator; "
        "order sheet proven on the canary's dry-run captures (evidence v823-*), "
        "other screens still justified by 8.22.0's simulator captures."
    )
    candidate["authored"] = {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "by": "张三",
        "note": "copied from pdd-8.22.0-82200 for the canary's update",
    }
    pack = write_pack(work, candidate, PACK_FILE)
    assert op("pack", "verify", f"work/{PACK_FILE}").code == 0
    # 4. dry run on the canary with the candidate: every gate, captures + proposed expectations
    ran = op("dry-run", "--device", SERIAL, *ORDER, "--pack-dir", "work", "--out", "captures/canary/dryrun-1")
    summary = json.loads(ran.lines()[-1])
    assert ran.code == 0 and summary["result"] == "PASSED" and summary["layout"] == "order_sheet", ran
    assert summary["app_version"] == f"{NEW_NAME}:{NEW_CODE}" and summary["pack_id"] == PACK_ID
    # 5. a person compares screenshots with the proposals and accepts them
    ran = op("pack", "accept", "captures/canary/dryrun-1", "--by", "张三")
    assert ran.code == 0 and ran.lines()[-1] == f"已确认 {len(summary['capture_names'])} 份采集样本", ran
    # 6. the captures become the pack's evidence (files next to the pack, sha256), then verify
    new_ids = add_capture_evidence(
        pack,
        op.home / "captures/canary/dryrun-1",
        prefix="v823-",
        source="simulator",
        justify={"product": "sim822-product", "confirm_order": "sim822-sheet-tshirt"},
    )
    assert new_ids == [f"v823-{name}" for name in summary["capture_names"]]
    ran = op("pack", "verify", f"work/{PACK_FILE}")
    assert ran.code == 0 and ran.lines()[-1] == f"{PACK_FILE}：56 个证据文件，56 个正常，0 个失败 -> 通过 (OK)", ran
    # 7. pack test on the accepted captures; 8. dry-run again with the final pack: zero submit taps
    ran = op("pack", "test", f"work/{PACK_FILE}", "captures/canary/dryrun-1")
    assert (
        ran.code == 0 and ran.lines()[-1] == f"通过 (OK)：用识别包 {PACK_ID} 测试了 4 份采集样本：通过 4 份 (PASS)"
    ), ran
    ran = op("dry-run", "--device", SERIAL, *ORDER, "--pack-dir", "work", "--out", "captures/canary/dryrun-2")
    assert ran.code == 0 and json.loads(ran.lines()[-1])["result"] == "PASSED", ran
    assert [line.split()[:2] for line in ran.lines()[:-1]] == [
        [gate, "PASS"] for gate in ("PAYMENT_MODE_AT_OPEN", "GATE_1", "GATE_2", "PAYMENT_MODE", "GATE_3")
    ]
    journal = stack.phone_journal()
    assert submit_taps(journal) == [] and payment_taps(journal) == [] and order_counts(journal) == {}
    return pack


def _install(pack: Path, pack_dir: Path) -> None:
    """Runbook step 10: the pack file and its evidence folder into the operator pack dir."""
    shutil.copytree(pack.parent / "evidence", pack_dir / "evidence", dirs_exist_ok=True)
    shutil.copy(pack, pack_dir / pack.name)  # last: the agent sees the pack only with its evidence


def test_new_version_becomes_an_order_with_an_operator_pack_and_no_code_change(canary: Any) -> None:
    stack, pack_dir, op = canary
    agent = stack.agents[SERIAL]
    _assert_no_pack_and_idle(stack)
    pack = _write_and_prove_pack(stack, op)

    _install(pack, pack_dir)
    # the running agent picks the pack up at its next loop; the server does not allow 8.23.0 yet
    _wait(lambda: _device(stack)["pack_id"] == PACK_ID, 20, "the new pack id in a heartbeat", stack)
    _heartbeats_pass(stack, 2)
    row = _device(stack)
    assert (row["reported_state"], row["app_version_allowed"]) == ("READY", 0)
    assert _task(stack)["task"]["state"] == "PENDING" and submit_taps(stack.phone_journal()) == []

    # step 11: allow the version on the server; the allow-list is read at start: restart, same data dir
    stack.stop_server()
    stack.env["CMBUYER_ALLOWED_APP_VERSIONS"] = f"{OLD_VERSIONS},{NEW_NAME}"
    stack.start_server()
    _wait(lambda: _task(stack)["task"]["state"] == "WAITING_PAYMENT", 60, "WAITING_PAYMENT", stack)

    assert agent.poll() is None and stack.agents[SERIAL] is agent  # the same process, never restarted
    # The task reaches WAITING_PAYMENT when the result is reported; the phone's next heartbeat (1 s later)
    # is the first to say READY again, so wait for it instead of racing it on a loaded machine.
    _wait(lambda: _device(stack)["reported_state"] == "READY", 20, "a READY heartbeat after the order", stack)
    row = _device(stack)
    assert (row["pack_id"], row["reported_state"], row["app_version_allowed"]) == (PACK_ID, "READY", 1)
    detail = _task(stack)
    assert detail["submission"]["state"] == "SUBMITTED" and len(detail["attempts"]) == 1
    journal = stack.phone_journal()
    assert len(submit_taps(journal, goods_id=SHIRT.goods_id)) == 1 and payment_taps(journal) == []
    assert order_counts(journal) == {SHIRT.goods_id: 1}
    log = _agent_log(stack)
    assert f"识别包 {PACK_ID}（运维识别包 {pack_dir / PACK_FILE}）" in log
    assert "服务器不允许拼多多版本 8.23.0：不领取任务" in log


def test_an_evidence_byte_changed_after_verify_keeps_the_agent_at_no_pack(canary: Any) -> None:
    stack, pack_dir, op = canary
    agent = stack.agents[SERIAL]
    # here the server allows 8.23.0 from the start: the missing pack alone keeps the phone idle
    stack.stop_server()
    stack.env["CMBUYER_ALLOWED_APP_VERSIONS"] = f"{OLD_VERSIONS},{NEW_NAME}"
    stack.start_server()
    _assert_no_pack_and_idle(stack)
    pack = _write_and_prove_pack(stack, op)
    taps_before = len(_taps(stack))

    dump = pack.parent / "evidence" / PACK_ID / "03-confirm_order" / "dump.xml"
    flip_byte(dump)  # after `pack verify` said OK
    _install(pack, pack_dir)
    _wait(lambda: "evidence mismatch" in _agent_log(stack), 20, "the evidence error", stack)
    _heartbeats_pass(stack, 3)

    row = _device(stack)
    assert (row["pack_id"], row["reported_state"], row["app_version_allowed"]) == ("NO_PACK", "NO_PACK", 1)
    detail = _task(stack)
    assert detail["task"]["state"] == "PENDING" and detail["attempts"] == []
    assert len(_taps(stack)) == taps_before and agent.poll() is None
    said = [line for line in _agent_log(stack).splitlines() if "evidence mismatch" in line]
    assert len(said) == 1, said  # once, however many loops
    assert (
        said[0]
        .split(" ", 1)[1]  # after the ISO-8601 UTC time of the line
        .startswith(
            f"NO_PACK: {PACK_FILE}: $.evidence['v823-03-confirm_order'].files.dump: evidence mismatch: "
            f"evidence/{PACK_ID}/03-confirm_order/dump.xml (sha256 "
        )
    ), said
    # what the operator sees when checking the installed pack
    ran = op("pack", "verify", str(pack_dir / PACK_FILE))
    assert ran.code == 1 and ran.lines()[-1] == f"{PACK_FILE}：56 个证据文件，55 个正常，1 个失败 -> 失败 (FAILED)"
    assert [line.split()[:2] for line in ran.lines() if not line.startswith("OK")][:1] == [
        ["MISMATCH", "v823-03-confirm_order"]
    ], ran
