"""Several OS processes claiming on one SQLite file: each task is claimed at most once and each
device holds at most one open claim, with SQLite's own locking as the only coordination."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from cmbuyer.server.clock import ManualClock, to_wire
from cmbuyer.server.config import Settings
from tests.server.conftest import Maker
from tests.soak import soak_iterations

WORKER = Path(__file__).with_name("proc_worker.py")


@pytest.mark.slow(seconds_per_iteration=5)  # a soak loop: in `make soak`, timeout scaled
def test_processes_racing_on_one_db_file(
    ready_device: Maker,
    make_task: Maker,
    settings: Settings,
    sync_conn: sqlite3.Connection,
    clock: ManualClock,
    tmp_path: Path,
) -> None:
    for _ in range(soak_iterations(1)):
        start_tasks = sync_conn.execute("SELECT count(*) FROM tasks").fetchone()[0]
        tasks = {make_task(start=True, goods_id=f"{start_tasks + i + 1}").id for i in range(12)}
        procs_n, per_proc = 3, 6
        devices = [[ready_device(f"p{p}d{i}").device_id for i in range(per_proc)] for p in range(procs_n)]
        go = tmp_path / f"go-{start_tasks}"
        secret = settings.claim_token_secret
        assert secret is not None
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(WORKER),
                    str(settings.db_path),
                    secret.reveal().hex(),
                    to_wire(clock.now()),
                    str(go),
                    *group,
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            for group in devices
        ]
        go.touch()
        results = []
        for p in procs:
            out, _ = p.communicate(timeout=60)
            assert p.returncode == 0
            results.extend(json.loads(line) for line in out.splitlines())
        assert len(results) == procs_n * per_proc * 2
        first_round: dict[str, str | None] = {}
        for r in results:
            assert r["status"] in (200, 204), r
            if r["status"] == 200:
                assert first_round.setdefault(r["device"], r["task"]) == r["task"]  # resume: same task again
        won = [t for t in first_round.values() if t is not None]
        assert len(won) == len(set(won)) == len(tasks) and set(won) == tasks
        marks = ",".join("?" * len(tasks))
        rows = sync_conn.execute(
            f"SELECT task_id, device_id FROM attempts WHERE state = 'OPEN' AND task_id IN ({marks})", tuple(tasks)
        ).fetchall()
        assert len(rows) == len(tasks) and len({r[1] for r in rows}) == len(tasks)
        assert sync_conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
