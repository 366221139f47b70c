"""SIGKILL the real server in the middle of a fence storm from several processes, restart it, check:
integrity_check ok, at most one submission per authorization, every acknowledged permit is in the
database, no authorization ever got two permits (also across the restart). The number of kill/restart
rounds comes from CMBUYER_SOAK_ITERATIONS (default 1)."""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.server.config import Settings
from tests.server.conftest import Maker
from tests.server.submissions.helpers import Claim, fence_body, fence_path
from tests.server.submissions.live import LiveServer, claim_live
from tests.server.submissions.test_fence_concurrency import run_storm
from tests.soak import soak_iterations

ROUNDS = soak_iterations(1)
TASKS = 40


def _requests(claims: list[Claim]) -> list[dict[str, Any]]:
    out = []
    for c in claims:
        headers = {"Content-Type": "application/json", **c.device.headers()}
        body = fence_body(c)
        out.append({"path": fence_path(c.attempt_id), "headers": headers, "body": body, "fresh_key": False})
        out.append({"path": fence_path(c.attempt_id), "headers": headers, "body": body, "fresh_key": True})
    return out


def _check_db(db: Path, permits: dict[str, list[str]]) -> dict[str, str]:
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        rows = conn.execute("SELECT id, authorization_id, attempt_id FROM order_submissions").fetchall()
    finally:
        conn.close()
    per_auth = Counter(r[1] for r in rows)
    assert all(n == 1 for n in per_auth.values())
    by_attempt = {r[2]: r[0] for r in rows}
    for attempt_id, sids in permits.items():
        assert len(sids) <= 1, f"two permits for attempt {attempt_id}"
        for sid in sids:
            assert by_attempt.get(attempt_id) == sid, "an acknowledged permit is missing after the crash"
    return by_attempt


def _kill_after(live: LiveServer, out_dir: Path, answers: int) -> None:
    """SIGKILL the server once the clients have recorded ``answers`` HTTP answers (mid-storm)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        seen = 0
        for out in out_dir.glob("out*.jsonl"):
            seen += out.read_text().count('"status"')
        if seen >= answers:
            break
        time.sleep(0.002)
    live.kill9()


def _new_claims(
    live: LiveServer, make_device: Maker, make_task: Maker, settings: Settings, round_no: int
) -> list[Claim]:
    for i in range(TASKS):
        make_task(start=True, goods_id=str(937122400000 + round_no * 1000 + i))
    conn = sqlite3.connect(settings.db_path)
    conn.execute("UPDATE authorizations SET expires_at = ? WHERE state = 'ACTIVE'", ("2999-01-01T00:00:00.000000Z",))
    conn.commit()
    conn.close()
    return [claim_live(live, make_device(f"phone-{round_no}-{i}")) for i in range(TASKS)]


@pytest.mark.slow(seconds_per_iteration=15)  # a soak loop: in `make soak`, timeout scaled
def test_sigkill_during_fence_storm(
    live: LiveServer, make_device: Maker, make_task: Maker, settings: Settings, tmp_path: Path
) -> None:
    permits: dict[str, list[str]] = {}
    claims: list[Claim] = []
    rnd = random.Random(4)
    killed_mid_storm = 0
    for round_no in range(ROUNDS + 1):
        final = round_no == ROUNDS
        fresh = _new_claims(live, make_device, make_task, settings, round_no)
        claims += fresh
        permits.update({c.attempt_id: [] for c in fresh})
        requests = _requests(claims)
        start = time.time() + 1.0
        plans = [
            {
                "port": live.port,
                "threads": 8,
                "seconds": 2.0 if final else 8.0,
                "start_at": start,
                "seed": round_no * 10 + i,
                "requests": requests,
            }
            for i in range(4)
        ]
        killer = None
        if not final:
            killer = threading.Thread(
                target=_kill_after, args=(live, tmp_path / f"round{round_no}", rnd.randint(5, 3 * TASKS))
            )
            killer.start()
        lines = run_storm(plans, tmp_path / f"round{round_no}")
        if killer is not None:
            killer.join()
            assert any("error" in x for x in lines), "the kill did not interrupt the storm"
        for x in lines:
            if x.get("status") == 200:
                body = json.loads(x["body"])
                if body["click_permitted"]:
                    attempt_id = x["path"].split("/")[-2]
                    permits[attempt_id].append(body["submission_id"])
        assert any("status" in x for x in lines), ("the storm never reached the server", lines[:3], len(lines))
        by_attempt = _check_db(settings.db_path, permits)
        if not final:
            # attempts of this round that were still unfenced when the server died
            killed_mid_storm += sum(1 for c in fresh if c.attempt_id not in by_attempt)
            live.start()  # restart on the same data dir (start-up recovery runs first)
    by_attempt = _check_db(settings.db_path, permits)
    assert sum(len(v) for v in permits.values()) <= len(by_attempt) <= len(claims)
    print(
        f"permits seen: {sum(len(v) for v in permits.values())}, fenced: {len(by_attempt)}, "
        f"unfenced at a kill: {killed_mid_storm}"
    )
