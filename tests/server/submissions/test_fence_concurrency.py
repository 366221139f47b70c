"""At most one click permit per authorization under concurrency: 50 fence requests for one attempt from
several OS processes against the real server (same key and different keys), and the fence job itself
from several processes on one SQLite file."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cmbuyer.server.clock import SystemClock
from cmbuyer.server.config import Settings
from tests.server.conftest import Maker
from tests.server.submissions import direct_worker
from tests.server.submissions.helpers import claim_direct, fence_body, fence_path
from tests.server.submissions.live import LiveServer, claim_live

STORM = Path(__file__).with_name("storm_client.py")


def run_storm(plans: list[dict[str, Any]], tmp: Path) -> list[dict[str, Any]]:
    tmp.mkdir(parents=True, exist_ok=True)
    procs = []
    outs = []
    for i, plan in enumerate(plans):
        plan_path, out_path = tmp / f"plan{i}.json", tmp / f"out{i}.jsonl"
        plan_path.write_text(json.dumps(plan))
        outs.append(out_path)
        procs.append(subprocess.Popen([sys.executable, str(STORM), str(plan_path), str(out_path)]))
    for p in procs:
        assert p.wait(120) == 0
    lines: list[dict[str, Any]] = []
    for out in outs:
        if out.exists():
            lines += [json.loads(x) for x in out.read_text().splitlines() if x.strip()]
    return lines


def _submissions(db: Path) -> list[sqlite3.Row]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return list(conn.execute("SELECT * FROM order_submissions"))
    finally:
        conn.close()


def test_fifty_concurrent_fences_one_permit(
    live: LiveServer, make_device: Maker, make_task: Maker, settings: Settings, tmp_path: Path
) -> None:
    make_task(start=True)  # the fixture clock's start time is in the past for the live server: re-date
    conn = sqlite3.connect(settings.db_path)
    far = "2999-01-01T00:00:00.000000Z"
    conn.execute("UPDATE authorizations SET expires_at = ?", (far,))
    conn.commit()
    conn.close()
    c = claim_live(live, make_device())
    body = fence_body(c)
    headers = {"Content-Type": "application/json", **c.device.headers()}
    start = time.time() + 1.5
    same = {"path": fence_path(c.attempt_id), "headers": headers, "body": body, "fresh_key": False}
    fresh = {**same, "fresh_key": True}
    plans = [
        {
            "port": live.port,
            "threads": 10,
            "seconds": 30,
            "start_at": start,
            "once": True,
            "seed": i,
            "requests": [same if i < 3 else fresh],
        }
        for i in range(5)
    ]
    lines = run_storm(plans, tmp_path)
    assert len(lines) == 50 and not [x for x in lines if "error" in x]
    permits = [x for x in lines if x["status"] == 200 and json.loads(x["body"])["click_permitted"]]
    assert len(permits) == 1
    sid = json.loads(permits[0]["body"])["submission_id"]
    for x in lines:
        parsed = json.loads(x["body"])
        if x is permits[0]:
            continue
        assert (
            x["status"] == 200
            and parsed["click_permitted"] is False
            and parsed["reconciliation_required"]
            and parsed["submission_id"] == sid
        ) or (x["status"] == 409 and parsed == {"error": "submission_fenced"})
    subs = _submissions(settings.db_path)
    assert len(subs) == 1 and subs[0]["id"] == sid


def test_fence_job_from_several_processes_one_permit(
    make_device: Maker, make_task: Maker, settings: Settings, sync_conn: sqlite3.Connection
) -> None:
    make_task(start=True)
    sync_conn.execute("UPDATE authorizations SET expires_at = ?", ("2999-01-01T00:00:00.000000Z",))
    c = claim_direct(sync_conn, settings, SystemClock().now(), make_device())
    body = fence_body(c)
    start = time.time() + 1.0
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(6) as pool:
        jobs = [
            pool.apply_async(
                direct_worker.fence_many,
                (str(settings.db_path), c.device.device_id, c.attempt_id, body, 8, i % 2 == 0, start),
            )
            for i in range(6)
        ]
        results = [r for job in jobs for r in job.get(120)]
    assert sum(1 for permit, _ in results if permit) == 1
    others = {
        text if not text.startswith("{") else json.loads(text)["reconciliation_required"]
        for permit, text in results
        if not permit
    }
    assert others <= {True, "submission_fenced", "storage"}
    assert sync_conn.execute("SELECT count(*) FROM order_submissions").fetchone()[0] == 1
