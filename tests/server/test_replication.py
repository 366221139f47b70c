"""The database off the host: a real ``cmbuyer-server serve`` with ``cmbuyer-server replicate``
(Litestream) streaming to a file replica, both SIGKILLed mid-run as a lost host would be, then
``cmbuyer-server restore`` into fresh data dirs — from the replica as it was left, and from a copy of it
taken before a fence:

- integrity_check ok, every fence acknowledged before the last replicated position is present;
- every unsettled task is HELD and no phone is offered it (claim-next 204, the old claim refused);
- a task fenced after the copy comes back HELD from CLAIMED, with no submission, and its fence retried
  against the restored server is refused — never a permit;
- released by a person (the admin use-case), a task without a fence goes back to DRAFT and can be started
  and claimed again; one with a fence goes back to SUBMITTING.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.server.cli import update_env_file
from cmbuyer.server.clock import ManualClock
from cmbuyer.server.config import Settings, load_settings
from cmbuyer.server.db import connect_sync, run_in_transaction
from cmbuyer.server.replication import replica_position, restore_into
from cmbuyer.server.services import admin_actions
from cmbuyer.server.services import devices as device_service
from cmbuyer.server.services import tasks as task_service
from cmbuyer.server.tx.common import new_id
from tests.server.conftest import TEST_ACTOR, DeviceCreds, Maker, create_task
from tests.server.submissions.helpers import CLAIM_NEXT, HEARTBEAT, Claim, fence_body, fence_path, heartbeat_body
from tests.server.submissions.live import LiveServer, claim_live, request

UNSETTLED = ("PENDING", "CLAIMED", "ORDERING", "SUBMITTING")
FAR = "2999-01-01T00:00:00.000000Z"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CMBUYER_")}
    return subprocess.run(
        [sys.executable, "-m", "cmbuyer.server.cli", *args], capture_output=True, text=True, timeout=120, env=env
    )


@pytest.fixture
def replica(tmp_path: Path, data_dir: Path) -> str:
    """A file replica on "another disk" (a folder outside the data dir), recorded in the data dir's env file."""
    url = f"file://{tmp_path / 'replica'}"
    update_env_file(data_dir / "cmbuyer.env", {"CMBUYER_REPLICA_URL": url})
    return url


@pytest.fixture
def replicated(
    data_dir: Path, replica: str, settings: Settings
) -> Iterator[tuple[LiveServer, subprocess.Popen[bytes]]]:
    """The server and ``cmbuyer-server replicate`` (Litestream) on the same data dir, killed at the end."""
    assert settings.replica_url == replica
    live = LiveServer(data_dir)
    live.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CMBUYER_")}
    with (data_dir / "litestream.log").open("ab") as log:
        litestream = subprocess.Popen(
            [sys.executable, "-m", "cmbuyer.server.cli", "--data-dir", str(data_dir), "replicate"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        yield live, litestream
    finally:
        live.stop()
        if litestream.poll() is None:
            litestream.kill()
        litestream.wait(10)


def _fence(live: LiveServer, claim: Claim) -> str:
    status, raw = request(live, "POST", fence_path(claim.attempt_id), claim.device, fence_body(claim))
    assert status == 200, raw
    return str(json.loads(raw)["submission_id"])


def _wait_replicated(url: str, probe_dir: Path, submission_ids: list[str], timeout: float = 30.0) -> None:
    """Until a restore of the replica holds every one of ``submission_ids`` (the replica's position is then
    past their acknowledgement)."""
    deadline = time.monotonic() + timeout
    n = 0
    while time.monotonic() < deadline:
        n += 1
        probe = probe_dir / f"probe-{n}.sqlite3"
        try:
            restore_into(url, probe)
        except Exception:
            time.sleep(0.2)
            continue
        with sqlite3.connect(probe) as conn:
            have = {r[0] for r in conn.execute("SELECT id FROM order_submissions")}
        if set(submission_ids) <= have:
            return
        time.sleep(0.2)
    raise AssertionError(f"the replica did not catch up in {timeout}s")


def _restore(url: str, source_env: Path, target: Path) -> dict[str, Any]:
    target.mkdir(mode=0o700)
    shutil.copy(source_env, target / "cmbuyer.env")  # the env file an operator keeps off the host
    done = _cli("--data-dir", str(target), "restore", "--from", url, "--to", str(target), "--json")
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def _states(db: Path) -> dict[str, str]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT id, state FROM tasks").fetchall())


def test_sigkill_mid_run_then_restore_holds_every_unsettled_task(
    tmp_path: Path,
    data_dir: Path,
    replica: str,
    replicated: tuple[LiveServer, subprocess.Popen[bytes]],
    settings: Settings,
    sync_conn: sqlite3.Connection,
    clock: ManualClock,
    make_device: Maker,
) -> None:
    live, litestream = replicated
    tasks = [create_task(sync_conn, settings, clock, goods_id=str(937122400000 + i), start=True) for i in range(7)]
    sync_conn.execute("UPDATE authorizations SET expires_at = ? WHERE state = 'ACTIVE'", (FAR,))
    claims = [claim_live(live, make_device(f"phone-{i}")) for i in range(6)]  # the 7th task stays PENDING

    # Fences acknowledged, then replicated: they must survive whatever happens next.
    acknowledged = [_fence(live, c) for c in claims[:2]]
    probes = tmp_path / "probes"
    probes.mkdir()
    _wait_replicated(replica, probes, acknowledged)
    doctor = _cli("--data-dir", str(data_dir), "doctor", "--json")
    replication = next(c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "replication")
    assert replication["ok"], replication  # lag reported: positions and the age of the last upload
    assert "replica at txid" in replication["detail"] and "last upload" in replication["detail"]
    before_fence = tmp_path / "replica-before-fence"
    shutil.copytree(Path(replica.removeprefix("file://")), before_fence)  # claims[2:4] CLAIMED, not fenced

    late = [_fence(live, c) for c in claims[2:4]]  # acknowledged, may or may not reach the replica
    os.kill(live.proc.pid, signal.SIGKILL)  # type: ignore[union-attr]
    os.kill(litestream.pid, signal.SIGKILL)  # the host is gone: Litestream with it
    live.proc.wait(10)  # type: ignore[union-attr]
    litestream.wait(10)

    # 1. The replica as the lost host left it.
    restored = _restore(replica, data_dir / "cmbuyer.env", tmp_path / "restored")
    db = tmp_path / "restored" / "cmbuyer.sqlite3"
    assert restored["integrity_ok"] is True
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        have = {r[0] for r in conn.execute("SELECT id FROM order_submissions")}
    assert set(acknowledged) <= have, "a fence acknowledged before the replicated position is missing"
    states = _states(db)
    assert not [s for s in states.values() if s in UNSETTLED], states
    assert {states[t.id] for t in tasks} == {"HELD"}
    assert sorted(restored["held_tasks"]) == sorted(t.id for t in tasks)
    assert set(have) - set(acknowledged) <= set(late)

    # 2. The copy taken before claims[2:4] were fenced: those tasks come back HELD from CLAIMED.
    early = _restore(f"file://{before_fence}", data_dir / "cmbuyer.env", tmp_path / "early")
    early_db = tmp_path / "early" / "cmbuyer.sqlite3"
    with sqlite3.connect(early_db) as conn:
        reasons = dict(conn.execute("SELECT id, state_reason FROM tasks WHERE state = 'HELD'").fetchall())
        fenced_tasks = {r[0] for r in conn.execute("SELECT task_id FROM order_submissions")}
    for c in claims[2:4]:
        assert reasons[c.task_id] == "restored_from_replica:CLAIMED"
        assert c.task_id not in fenced_tasks
    assert len(early["held_tasks"]) == len(tasks)

    # Served again: nothing is offered to any phone, and the fence the phone got a permit for on the lost
    # host is refused — never a second permit for a task that may already have its order.
    server = LiveServer(tmp_path / "early")
    server.start()
    try:
        for c in claims[2:4]:
            status, raw = request(server, "POST", fence_path(c.attempt_id), c.device, fence_body(c))
            assert status == 409, raw
        fresh = _new_device(early_db, clock)
        assert request(server, "POST", HEARTBEAT, fresh, heartbeat_body(fresh.device_id))[0] == 200
        body = {"session_id": "9b0e8f57-8d1c-4d3e-9a47-2a1c3e5f7b10", "claim_request_id": _uuid()}
        assert request(server, "POST", CLAIM_NEXT, fresh, body)[0] == 204
    finally:
        server.stop()

    # A person releases: a task without a fence → DRAFT (then started and claimable again), one with a
    # fence → SUBMITTING.
    restored_settings = load_settings(tmp_path / "early")
    conn = connect_sync(early_db)
    try:
        unfenced = claims[2].task_id
        version = conn.execute("SELECT version FROM tasks WHERE id = ?", (unfenced,)).fetchone()[0]
        result = run_in_transaction(
            conn, lambda c: admin_actions.release_held(c, unfenced, version, TEST_ACTOR, clock.now())
        )
        assert result.state == "DRAFT"
        fenced = claims[0].task_id
        version = conn.execute("SELECT version FROM tasks WHERE id = ?", (fenced,)).fetchone()[0]
        result = run_in_transaction(
            conn, lambda c: admin_actions.release_held(c, fenced, version, TEST_ACTOR, clock.now())
        )
        assert result.state == "SUBMITTING"
        run_in_transaction(
            conn,
            lambda c: task_service.start_purchases(
                c, _uuid(), [(unfenced, result_version(c, unfenced))], TEST_ACTOR, clock.now(), restored_settings
            ),
        )
        conn.execute("UPDATE authorizations SET expires_at = ? WHERE state = 'ACTIVE'", (FAR,))
    finally:
        conn.close()
    server = LiveServer(tmp_path / "early")
    server.start()
    try:
        again = claim_live(server, _new_device(early_db, clock))
        assert again.task_id == unfenced
    finally:
        server.stop()


def result_version(conn: sqlite3.Connection, task_id: str) -> int:
    return int(conn.execute("SELECT version FROM tasks WHERE id = ?", (task_id,)).fetchone()[0])


def _uuid() -> str:
    return new_id()


def _new_device(db: Path, clock: ManualClock) -> DeviceCreds:
    conn = connect_sync(db)
    try:
        issued = run_in_transaction(
            conn, lambda c: device_service.add_device(c, f"new-{_uuid()[:8]}", TEST_ACTOR, clock.now())
        )
    finally:
        conn.close()
    return DeviceCreds(issued.device_id, issued.token)


def test_restore_refuses_an_empty_replica_a_used_dir_and_missing_secrets(tmp_path: Path, data_dir: Path) -> None:
    empty = tmp_path / "empty-replica"
    empty.mkdir()
    target = tmp_path / "t1"
    target.mkdir()
    shutil.copy(data_dir / "cmbuyer.env", target / "cmbuyer.env")
    done = _cli("--data-dir", str(target), "restore", "--from", f"file://{empty}", "--to", str(target))
    assert done.returncode == 4 and "holds no backup" in done.stderr
    assert not (target / "cmbuyer.sqlite3").exists()
    done = _cli("restore", "--from", f"file://{empty}", "--to", str(data_dir))
    assert done.returncode == 2 and "只能恢复到新的数据目录" in done.stderr
    done = _cli("restore", "--from", f"file://{empty}", "--to", str(tmp_path / "no-env"))
    assert done.returncode == 3 and "cmbuyer.env" in done.stderr


def test_replica_position_of_an_empty_replica_is_zero(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    assert replica_position(f"file://{tmp_path / 'r'}").txid == 0


def test_replicate_needs_a_replica_url_and_doctor_reports_a_replica_never_written(
    tmp_path: Path, data_dir: Path
) -> None:
    done = _cli("--data-dir", str(data_dir), "replicate")
    assert done.returncode == 3 and "CMBUYER_REPLICA_URL" in done.stderr
    update_env_file(data_dir / "cmbuyer.env", {"CMBUYER_REPLICA_URL": f"file://{tmp_path / 'never'}"})
    doctor = _cli("--data-dir", str(data_dir), "doctor", "--json")
    replication = next(c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "replication")
    assert doctor.returncode == 1 and not replication["ok"] and "never uploaded" in replication["detail"]
    assert (data_dir / "litestream.yml").stat().st_mode & 0o077 == 0
