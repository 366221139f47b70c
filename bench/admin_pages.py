"""Benchmark: ``GET /tasks`` of the admin pages with 100,000 tasks (p95 ≤ 150 ms).

Builds a throw-away data dir with the real ``cmbuyer-server init``, bulk-inserts N tasks with plain
SQL (bench-only shortcut: the FTS trigger of migration 0003 still fires for every row, exactly as for
tasks created through the service), starts the real app on a loopback port, logs in through the real
form and times sequential page loads for several filter shapes, end to end over HTTP.

    .venv/bin/python bench/admin_pages.py [--tasks 100000] [--requests 200] [--json]

Prints one line per scenario with p50 / p95 / max in milliseconds and exits 1 when a p95 exceeds
the budget (``--budget-ms``, default 150). Every page now includes the counts per state; that
query is also timed alone on a read-only connection against its own budget (``--counts-budget-ms``,
default 50: p95 ≤ 50 ms at 100,000 tasks).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import socket
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
from aiohttp import web

from cmbuyer.schemas.sku import legacy_options, options_text
from cmbuyer.server.app import create_app
from cmbuyer.server.cli import main as cli_main
from cmbuyer.server.clock import to_wire
from cmbuyer.server.config import load_settings
from cmbuyer.server.db import connect_sync, run_in_transaction
from cmbuyer.server.services.admins import hash_password
from cmbuyer.server.store import admins as admin_store
from cmbuyer.server.store.queries import task_lists

WORDS = [
    "纯棉",
    "短袖",
    "长袖",
    "T恤",
    "衬衫",
    "卫衣",
    "外套",
    "牛仔裤",
    "运动裤",
    "连衣裙",
    "半身裙",
    "毛衣",
    "夹克",
    "羽绒服",
    "背心",
    "睡衣",
    "袜子",
    "帽子",
    "围巾",
    "儿童",
    "男款",
    "女款",
    "宽松",
    "修身",
    "加绒",
]
COLORS = ["黑色", "白色", "灰色", "藏青", "卡其", "红色", "粉色", "黑色CHA(纯棉)"]
SIZES = ["S", "M", "L", "XL", "XXL", "M(建议100-115)", "均码"]
STATES = ["DRAFT"] * 6 + [
    "PENDING",
    "CLAIMED",
    "ORDERING",
    "WAITING_PAYMENT",
    "PAID",
    "PAID",
    "FAILED",
    "EXPIRED",
    "CANCELLED",
    "RECONCILIATION_REQUIRED",
]
PASSWORD = "bench-password-123"


def populate(db_path: Path, count: int, seed: int = 5) -> dict[str, str]:
    """Insert ``count`` tasks spread over ~180 days; returns sample values for the scenarios."""
    rng = random.Random(seed)
    start = datetime(2026, 2, 1, tzinfo=UTC)
    conn = connect_sync(db_path)
    samples: dict[str, str] = {}

    def job(c: sqlite3.Connection) -> None:
        rows = []
        for i in range(count):
            created = to_wire(start + timedelta(seconds=i * 155 + rng.randint(0, 60)))
            title = "".join(rng.sample(WORDS, 3)) + f" {i % 997}号"
            goods = str(100000000000 + rng.randint(0, 899999999999))
            task_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            rows.append(
                (
                    task_id,
                    str(uuid.uuid4()),
                    "0" * 64,
                    title,
                    f"https://mobile.yangkeduo.com/goods.html?goods_id={goods}",
                    goods,
                    options_text(legacy_options(rng.choice(COLORS), rng.choice(SIZES))),
                    rng.randint(1, 5),
                    f"{rng.randint(10, 500)}.00",
                    rng.choice(STATES),
                    1,
                    None,
                    "cli:bench",
                    created,
                    created,
                )
            )
            if i == count // 2:
                samples.update(goods=goods, task_id=task_id, title_part=title[2:6], mid_at=created, mid_id=task_id)
        c.executemany(
            "INSERT INTO tasks (id, create_key, create_hash, title, product_url, goods_id, sku_options,"
            " quantity, max_total_price, state, version, state_reason, created_by, created_at,"
            " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        admin_store.insert(c, str(uuid.uuid4()), "bench", hash_password(PASSWORD), to_wire(datetime.now(UTC)))

    run_in_transaction(conn, job)
    conn.execute("ANALYZE")
    conn.close()
    return samples


def time_state_counts(db_path: Path, requests: int) -> dict[str, object]:
    """p50/p95/max of :func:`task_lists.state_counts` alone on a read-only connection (5 warm-up calls)."""
    conn = connect_sync(db_path, read_only=True)
    try:
        for _ in range(5):
            counts = task_lists.state_counts(conn)
        times = []
        for _ in range(requests):
            t = time.perf_counter()
            counts = task_lists.state_counts(conn)
            times.append((time.perf_counter() - t) * 1000)
    finally:
        conn.close()
    times.sort()
    return {
        "scenario": "counts per state (query alone)",
        "rows": len(counts),
        "p50_ms": round(statistics.median(times), 1),
        "p95_ms": round(times[int(len(times) * 0.95) - 1], 1),
        "max_ms": round(times[-1], 1),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="cmbuyer-bench-") as tmp:
        data = Path(tmp) / "data"
        for key in [k for k in os.environ if k.startswith("CMBUYER_")]:
            del os.environ[key]
        assert cli_main(["--data-dir", str(data), "init", "--json"]) == 0
        settings = load_settings(data)
        t0 = time.perf_counter()
        s = populate(settings.db_path, args.tasks)
        print(f"populated {args.tasks} tasks in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        counts_row = time_state_counts(settings.db_path, args.requests)
        counts_failed = counts_row["p95_ms"] > args.counts_budget_ms
        if not args.json:
            print(
                f"{'counts per state (query alone)':32s} states={counts_row['rows']:2d}"
                f"  p50={counts_row['p50_ms']:6.1f}  p95={counts_row['p95_ms']:6.1f}"
                f"  max={counts_row['max_ms']:6.1f} ms"
                f"  (budget {args.counts_budget_ms:g} ms)"
            )
        runner = web.AppRunner(create_app(settings), access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        base = f"http://127.0.0.1:{port}"
        scenarios = [
            ("first page", "/tasks"),
            ("state=DRAFT", "/tasks?state=DRAFT"),
            ("state=PAID", "/tasks?state=PAID"),
            ("needs attention (3 states)", "/tasks?state=attention"),
            ("date range (1 week)", "/tasks?from=2026-04-01&to=2026-04-07"),
            ("deep page (keyset cursor)", f"/tasks?before_at={s['mid_at']}&before_id={s['mid_id']}"),
            ("keyword 3+ chars (common)", "/tasks?q=" + "纯棉短"),
            ("keyword 3+ chars (title part)", "/tasks?q=" + s["title_part"]),
            ("keyword rare", "/tasks?q=" + "不存在的词"),
            ("keyword 2 chars", "/tasks?q=" + "短袖"),
            ("keyword goods_id", "/tasks?q=" + s["goods"]),
            ("keyword task id", "/tasks?q=" + s["task_id"]),
            ("keyword + state", "/tasks?q=" + "纯棉短" + "&state=DRAFT"),
            ("keyword order number", "/tasks?q=" + "231204-00000001"),
        ]
        results = [counts_row]
        failed = counts_failed
        jar = aiohttp.CookieJar(unsafe=True)
        async with aiohttp.ClientSession(cookie_jar=jar) as http:
            page = await (await http.get(base + "/login")).text()
            token = re.search(r'name="csrf_token" value="([0-9a-f]{64})"', page)
            assert token is not None
            resp = await http.post(
                base + "/login",
                data={"username": "bench", "password": PASSWORD, "csrf_token": token.group(1)},
                allow_redirects=False,
            )
            assert resp.status == 303, resp.status
            for name, path in scenarios:
                for _ in range(5):  # warm caches
                    await (await http.get(base + path)).read()
                times = []
                rows = 0
                for _ in range(args.requests):
                    t = time.perf_counter()
                    r = await http.get(base + path)
                    body = await r.text()
                    times.append((time.perf_counter() - t) * 1000)
                    assert r.status == 200, (path, r.status)
                    rows = body.count("data-task-id=")
                times.sort()
                p95 = times[int(len(times) * 0.95) - 1]
                row = {
                    "scenario": name,
                    "rows": rows,
                    "p50_ms": round(statistics.median(times), 1),
                    "p95_ms": round(p95, 1),
                    "max_ms": round(times[-1], 1),
                }
                failed = failed or p95 > args.budget_ms
                results.append(row)
                if not args.json:
                    print(
                        f"{name:32s} rows={rows:3d}  p50={row['p50_ms']:6.1f}  p95={row['p95_ms']:6.1f}"
                        f"  max={row['max_ms']:6.1f} ms"
                    )
        await runner.cleanup()
    if args.json:
        print(
            json.dumps(
                {"tasks": args.tasks, "requests": args.requests, "budget_ms": args.budget_ms, "results": results},
                ensure_ascii=False,
            )
        )
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--budget-ms", type=float, default=150.0)
    parser.add_argument("--counts-budget-ms", type=float, default=50.0)
    parser.add_argument("--json", action="store_true")
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
