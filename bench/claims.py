"""Claim-next and lease-renew throughput/latency against the real server (docs/architecture.md "Server layers").

For each concurrency level (default 32 and 128 simulated devices) this script

1. makes a fresh data dir with ``cmbuyer-server init`` and fills it with N started tasks and N devices
   that each sent a READY heartbeat (one device per claim, since a device holds at most one open claim);
2. copies the database and measures the *raw* SQLite rate of the very same claim transaction
   (``services.claim_next.claim_next`` via ``run_in_transaction``: one BEGIN IMMEDIATE … COMMIT per claim,
   WAL, synchronous=FULL) sequentially in one thread;
3. starts ``cmbuyer-server serve`` as a separate process and drives it with C concurrent clients (C
   keep-alive connections, one request in flight on each — a closed loop): first N claim-next requests
   (each on a fresh device), then R lease renewals on the claims obtained;
4. prints throughput, p50/p99 latency, the ratio server ÷ raw, the server's CPU time per request and the
   load average;
5. then, on further fresh devices, sends claim-next *open loop* — Poisson arrivals at fixed fractions
   (``--offered``, default 50 % and 80 %) of the claim rate just measured — and prints p50/p99 measured
   from each request's scheduled arrival. A closed loop answers "how fast at saturation" (its mean latency
   is just devices ÷ rate); the open loop answers "how long does a device wait at a given load".

The default client (``--client raw``) writes pre-built HTTP/1.1 requests on asyncio streams and parses only
the status line and Content-Length: on a 2-core machine an aiohttp client costs ≈ 0.6 ms of CPU per
request, CPU the server then lacks (docs/performance.md). ``--client aiohttp`` keeps the old client.

6. does all of that per ``--variants`` (default ``plain tls``: plain HTTP and the server's own TLS;
   ``replicated``: plain HTTP with Litestream replicating beside the server), ``--rounds`` times,
   interleaved, and prints each variant's medians and its rate ÷ the first variant's.

Usage: ``python bench/claims.py [--levels 32 128] [--claims 3000] [--renews 4000] [--client raw|aiohttp]
[--offered 0.5 0.8] [--offered-claims 1500] [--variants plain tls replicated] [--rounds N]`` (``make bench``).
``BENCH_SERVER_CMD`` (optional) replaces the server's ``python -c …`` arguments, e.g. with a script that
runs the CLI under a profiler.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import shutil
import signal
import socket
import sqlite3
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp

from cmbuyer.server.cli import main as cli_main
from cmbuyer.server.clock import SystemClock
from cmbuyer.server.config import Settings, load_settings
from cmbuyer.server.db import connect_sync, run_in_transaction
from cmbuyer.server.services import claim_next as claim_service
from cmbuyer.server.services import devices as device_service
from cmbuyer.server.services import tasks as task_service
from cmbuyer.server.services.heartbeat import record_heartbeat
from cmbuyer.server.tx.common import Actor, new_id

ACTOR = Actor("cli", "bench")
START_CHUNK = 50
SERVER_CMD = (
    os.environ["BENCH_SERVER_CMD"].split()
    if os.environ.get("BENCH_SERVER_CMD")
    else ["-c", "import sys; from cmbuyer.server.cli import main; sys.exit(main(sys.argv[1:]))"]
)
VARIANTS = ("plain", "tls", "replicated")
MEDIAN_KEYS = ("claim_per_s", "claim_p99_ms", "renew_per_s", "renew_p99_ms")
ENV = {
    "CMBUYER_HEARTBEAT_INTERVAL": "3600",
    "CMBUYER_CLAIM_LEASE_TTL": "600",
    "CMBUYER_AUTHORIZATION_TTL": "86400",
    "CMBUYER_LOG_LEVEL": "WARNING",
    # Every simulated device connects from 127.0.0.1, so the per-address cap on pending connections
    # (real phones each have their own address) would evict the 128-client level's sockets.
    "CMBUYER_PENDING_CONNECTIONS_PER_ADDRESS": "4096",
}


@dataclass
class Device:
    device_id: str
    token: str
    claim: dict[str, Any] | None = None
    session: str = field(default_factory=new_id)

    def headers(self) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self.token}",
            "X-CMBuyer-Device-ID": self.device_id,
            "Content-Type": "application/json",
        }

    def renew_body(self, lease: str) -> str:
        """The lease-renew body for the claim this device holds, expecting ``lease`` (docs/api.md
        "POST /api/v1/tasks/{task_id}/lease/renew"); a fresh ``renew_request_id`` each call."""
        assert self.claim is not None
        attempt = self.claim["attempt"]
        return json.dumps(
            {
                "renew_request_id": new_id(),
                "session_id": self.session,
                "attempt_id": attempt["id"],
                "claim_generation": attempt["claim_generation"],
                "claim_token": attempt["claim_token"],
                "expected_lease_expires_at": lease,
            }
        )


def populate(data_dir: Path, n: int) -> tuple[Settings, list[Device]]:
    for key, value in ENV.items():
        os.environ[key] = value
    assert cli_main(["--data-dir", str(data_dir), "init", "--json"]) == 0
    settings = load_settings(data_dir)
    policy = claim_service.ClaimPolicy.from_settings(settings)
    conn = connect_sync(settings.db_path)
    now = SystemClock().now()
    devices: list[Device] = []

    def fill(c: sqlite3.Connection) -> None:
        ids = []
        for i in range(n):
            raw = {
                "create_key": new_id(),
                "title": f"bench {i}",
                "product_url": f"https://mobile.yangkeduo.com/goods.html?goods_id={100000 + i}",
                "sku_color": "黑色",
                "sku_size": "M",
                "quantity": 1,
                "max_total_price": "30.00",
            }
            # Created one after another (distinct created_at), as tasks arrive in real use; all at one
            # instant would make every index ordered by time random-ordered by id instead (≈ 30% more
            # pages written per claim, docs/performance.md).
            task, _ = task_service.create_task(
                c, task_service.validate_new_task(raw, settings), ACTOR, now - timedelta(seconds=n - i)
            )
            ids.append((task.id, task.version))
            issued = device_service.add_device(c, f"bench{i}", ACTOR, now)
            record_heartbeat(
                c,
                device_id=issued.device_id,
                now=now,
                policy=policy,
                body={
                    "device_id": issued.device_id,
                    "client_version": "0.1.0",
                    "adb_serial": f"10.0.0.1:{i}",
                    "android_release": "16",
                    "pdd_version": settings.allowed_app_versions[0],
                    "state": "READY",
                },
            )
            devices.append(Device(issued.device_id, issued.token))
        for k in range(0, n, START_CHUNK):  # an operator starts purchases a page of tasks at a time
            task_service.start_purchases(
                c, new_id(), ids[k : k + START_CHUNK], ACTOR, now - timedelta(milliseconds=n - k), settings
            )

    run_in_transaction(conn, fill)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return settings, devices


def raw_rate(settings: Settings, devices: list[Device], limit: int) -> float:
    """Sequential claims/s of the same job on a copy of the populated database (one thread, no HTTP)."""
    copy = settings.db_path.with_name("raw-copy.sqlite3")
    shutil.copyfile(settings.db_path, copy)
    conn = connect_sync(copy)
    policy = claim_service.ClaimPolicy.from_settings(settings)
    clock = SystemClock()
    chosen = devices[:limit]
    start = time.perf_counter()
    for dev in chosen:
        stored = run_in_transaction(
            conn,
            lambda c, d=dev: claim_service.claim_next(
                c,
                device_id=d.device_id,
                session_id=d.session,
                claim_request_id=new_id(),
                now=clock.now(),
                policy=policy,
            ),
        )
        assert stored.status == 200
    elapsed = time.perf_counter() - start
    conn.close()
    return len(chosen) / elapsed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_ready(base: str, context: ssl.SSLContext | None = None) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(200):
            try:
                async with session.get(f"{base}/healthz", ssl=context if context is not None else True) as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError("server did not start")


def summary(name: str, latencies: list[float], elapsed: float) -> dict[str, float]:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {
        f"{name}_per_s": len(ordered) / elapsed,
        f"{name}_p50_ms": statistics.median(ordered) * 1000,
        f"{name}_p99_ms": p99 * 1000,
    }


async def drive(base: str, devices: list[Device], concurrency: int, renews: int) -> dict[str, float]:
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:
        queue = iter(devices)
        claim_lat: list[float] = []

        async def claimer() -> None:
            for dev in queue:
                body = json.dumps({"session_id": dev.session, "claim_request_id": new_id()})
                t0 = time.perf_counter()
                async with http.post(f"{base}/api/v1/tasks/claim-next", data=body, headers=dev.headers()) as resp:
                    payload = await resp.read()
                    assert resp.status == 200, (resp.status, payload)
                claim_lat.append(time.perf_counter() - t0)
                dev.claim = json.loads(payload)

        start = time.perf_counter()
        await asyncio.gather(*(claimer() for _ in range(concurrency)))
        result = summary("claim", claim_lat, time.perf_counter() - start)

        holders = [d for d in devices if d.claim][:concurrency]
        per_worker = max(1, renews // len(holders))
        renew_lat: list[float] = []

        async def renewer(dev: Device) -> None:
            assert dev.claim is not None
            attempt = dev.claim["attempt"]
            lease = attempt["lease_expires_at"]
            for _ in range(per_worker):
                body = dev.renew_body(lease)
                t0 = time.perf_counter()
                async with http.post(
                    f"{base}/api/v1/tasks/{dev.claim['task']['id']}/lease/renew", data=body, headers=dev.headers()
                ) as resp:
                    payload = await resp.read()
                    assert resp.status == 200, (resp.status, payload)
                renew_lat.append(time.perf_counter() - t0)
                lease = json.loads(payload)["lease_expires_at"]

        start = time.perf_counter()
        await asyncio.gather(*(renewer(d) for d in holders))
        result.update(summary("renew", renew_lat, time.perf_counter() - start))
        return result


class RawHTTP:
    """One keep-alive HTTP/1.1 connection with the least client-side work: the request is formatted by
    hand and only the status line and Content-Length of the answer are parsed (the server under test
    always sends Content-Length on these routes)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> None:
        self.reader, self.writer, self.host = reader, writer, host

    @classmethod
    async def connect(cls, host: str, port: int, context: ssl.SSLContext | None = None) -> RawHTTP:
        reader, writer = await asyncio.open_connection(host, port, ssl=context)
        return cls(reader, writer, f"{host}:{port}")

    async def post(self, path: str, dev: Device, body: bytes) -> tuple[int, bytes]:
        self.writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {dev.token}\r\n"
            f"X-CMBuyer-Device-ID: {dev.device_id}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode("ascii")
            + body
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return status, await self.reader.readexactly(length) if length else b""

    def close(self) -> None:
        self.writer.close()


async def claim_raw(http: RawHTTP, dev: Device) -> None:
    """One claim-next for ``dev`` with a fresh key; the answer must be a claim (200), kept on ``dev``."""
    body = json.dumps({"session_id": dev.session, "claim_request_id": new_id()}).encode()
    status, payload = await http.post("/api/v1/tasks/claim-next", dev, body)
    assert status == 200, (status, payload)
    dev.claim = json.loads(payload)


async def drive_offered_raw(
    host: str,
    port: int,
    devices: list[Device],
    concurrency: int,
    rate: float,
    seed: int,
    context: ssl.SSLContext | None = None,
) -> dict[str, float]:
    """Claim-next at an *offered* rate (open loop): Poisson arrivals at ``rate`` per second spread over
    ``concurrency`` connections, one fresh device per request.

    Each latency is measured from the request's scheduled arrival, not from when a connection became free,
    so a server that falls behind is charged for the queue it causes (no coordinated omission). Returns
    the achieved rate and p50/p99 as :func:`summary` does, under the prefix ``open``.
    """
    conns: asyncio.Queue[RawHTTP] = asyncio.Queue()
    for _ in range(concurrency):
        conns.put_nowait(await RawHTTP.connect(host, port, context))
    rng = random.Random(seed)
    latencies: list[float] = []
    loop = asyncio.get_running_loop()

    async def one(dev: Device, due: float) -> None:
        http = await conns.get()
        try:
            await claim_raw(http, dev)
            latencies.append(loop.time() - due)
        finally:
            conns.put_nowait(http)

    try:
        start = due = loop.time()
        pending: list[asyncio.Task[None]] = []
        for dev in devices:
            due += rng.expovariate(rate)
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            pending.append(asyncio.create_task(one(dev, due)))
        await asyncio.gather(*pending)
        return summary("open", latencies, loop.time() - start)
    finally:
        while not conns.empty():
            conns.get_nowait().close()


async def drive_raw(
    host: str, port: int, devices: list[Device], concurrency: int, renews: int, context: ssl.SSLContext | None = None
) -> dict[str, float]:
    """Same workload as :func:`drive`, on :class:`RawHTTP` connections (one per simulated device); over TLS
    when ``context`` is given."""
    conns = [await RawHTTP.connect(host, port, context) for _ in range(concurrency)]
    try:
        queue = iter(devices)
        claim_lat: list[float] = []

        async def claimer(http: RawHTTP) -> None:
            for dev in queue:
                t0 = time.perf_counter()
                await claim_raw(http, dev)
                claim_lat.append(time.perf_counter() - t0)

        start = time.perf_counter()
        await asyncio.gather(*(claimer(c) for c in conns))
        result = summary("claim", claim_lat, time.perf_counter() - start)

        holders = [d for d in devices if d.claim][:concurrency]
        per_worker = max(1, renews // len(holders))
        renew_lat: list[float] = []

        async def renewer(http: RawHTTP, dev: Device) -> None:
            assert dev.claim is not None
            attempt = dev.claim["attempt"]
            lease = attempt["lease_expires_at"]
            path = f"/api/v1/tasks/{dev.claim['task']['id']}/lease/renew"
            for _ in range(per_worker):
                body = dev.renew_body(lease).encode()
                t0 = time.perf_counter()
                status, payload = await http.post(path, dev, body)
                renew_lat.append(time.perf_counter() - t0)
                assert status == 200, (status, payload)
                lease = json.loads(payload)["lease_expires_at"]

        start = time.perf_counter()
        await asyncio.gather(*(renewer(c, d) for c, d in zip(conns, holders, strict=False)))
        result.update(summary("renew", renew_lat, time.perf_counter() - start))
        return result
    finally:
        for c in conns:
            c.close()


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc; 0.0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_level(
    concurrency: int,
    claims: int,
    renews: int,
    raw_limit: int,
    client: str = "raw",
    offered: tuple[float, ...] = (),
    offered_claims: int = 0,
    variant: str = "plain",
) -> dict[str, Any]:
    """One concurrency level (module docstring). ``offered``: fractions of the closed-loop claim rate at
    which ``offered_claims`` further claims are then sent open-loop (:func:`drive_offered_raw`).
    ``variant`` (:data:`VARIANTS`): ``plain`` HTTP; ``tls``: the server's own TLS with a private CA from
    ``cmbuyer-server tls init``, the client verifying it; ``replicated``: plain HTTP with
    ``cmbuyer-server replicate`` (Litestream) streaming the database to a file replica beside it."""
    with tempfile.TemporaryDirectory(prefix="cmbuyer-bench-") as tmp:
        data_dir = Path(tmp) / "data"
        settings, everyone = populate(data_dir, claims + offered_claims * len(offered))
        devices, spare = everyone[:claims], everyone[claims:]
        raw = raw_rate(settings, devices, min(raw_limit, claims))
        port = free_port()
        env = {**os.environ, **ENV, "CMBUYER_DATA_DIR": str(data_dir)}
        context: ssl.SSLContext | None = None
        if variant == "tls":
            assert cli_main(["--data-dir", str(data_dir), "tls", "init", "--host", "127.0.0.1", "--json"]) == 0
            context = ssl.create_default_context(cafile=str(data_dir / "tls" / "ca.pem"))
        replicator = None
        if variant == "replicated":
            env["CMBUYER_REPLICA_URL"] = f"file://{Path(tmp) / 'replica'}"
            replicator = subprocess.Popen(  # Litestream's own log lines would interleave with the results
                [sys.executable, *SERVER_CMD, "--data-dir", str(data_dir), "replicate"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        server = subprocess.Popen(
            [sys.executable, *SERVER_CMD, "--data-dir", str(data_dir), "serve", "--port", str(port)], env=env
        )
        try:
            base = f"{'https' if context else 'http'}://127.0.0.1:{port}"
            asyncio.run(wait_ready(base, context))
            # The client's own cyclic GC would walk every object built by populate() (≈ 50 ms with 3,000
            # devices) while requests are in flight and add that pause to the measured latencies.
            gc.collect()
            gc.freeze()
            cpu0, load0 = process_cpu_s(server.pid), os.getloadavg()[0]
            if client == "raw":
                result = asyncio.run(drive_raw("127.0.0.1", port, devices, concurrency, renews, context))
            else:
                result = asyncio.run(drive(base, devices, concurrency, renews))
            requests = claims + (renews // min(concurrency, claims)) * min(concurrency, claims)
            result["server_cpu_ms_per_request"] = (process_cpu_s(server.pid) - cpu0) / requests * 1000
            result["load_before"], result["load_after"] = load0, os.getloadavg()[0]
            result["offered"] = []
            for k, fraction in enumerate(offered):
                rate = fraction * result["claim_per_s"]
                batch = spare[k * offered_claims : (k + 1) * offered_claims]
                measured = asyncio.run(
                    drive_offered_raw("127.0.0.1", port, batch, concurrency, rate, seed=k, context=context)
                )
                result["offered"].append({"fraction": fraction, "offered_per_s": rate, **measured})
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=30)
            if replicator is not None:
                replicator.send_signal(signal.SIGTERM)
                replicator.wait(timeout=30)
        result["variant"] = variant
        result["raw_claim_per_s"] = raw
        result["ratio_server_to_raw"] = result["claim_per_s"] / raw
        return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--claims", type=int, default=3000, help="claims per level (= tasks = devices)")
    parser.add_argument("--renews", type=int, default=4000, help="lease renewals per level")
    parser.add_argument("--raw", type=int, default=1500, help="claims in the raw SQLite measurement")
    parser.add_argument(
        "--client",
        choices=["raw", "aiohttp"],
        default="raw",
        help="raw: hand-written HTTP/1.1 on asyncio streams (least client CPU); aiohttp: ClientSession",
    )
    parser.add_argument(
        "--offered",
        type=float,
        nargs="*",
        default=[0.5, 0.8],
        help="after the closed loop, claim-next open-loop at these fractions of its claim rate",
    )
    parser.add_argument("--offered-claims", type=int, default=1500, help="claims per offered fraction")
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=VARIANTS,
        default=["plain", "tls"],
        help="server set-ups measured in the same run, interleaved: plain HTTP, the server's own "
        "TLS, plain HTTP with Litestream replicating",
    )
    parser.add_argument("--rounds", type=int, default=1, help="times each variant runs (interleaved); medians shown")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if any(not 0 < f <= 1 for f in args.offered):
        parser.error("--offered fractions must be in (0, 1]")
    if args.offered and args.client != "raw":
        parser.error("--offered needs --client raw")
    if args.client != "raw" and args.variants != ["plain"]:
        parser.error("--variants other than plain need --client raw")
    rows = []
    for level in args.levels:
        for _ in range(args.rounds):
            for variant in args.variants:
                result = {
                    "devices": level,
                    **run_level(
                        level,
                        args.claims,
                        args.renews,
                        args.raw,
                        args.client,
                        tuple(args.offered),
                        args.offered_claims,
                        variant,
                    ),
                }
                rows.append(result)
                if not args.json:
                    _print_row(result)
        if not args.json and len(args.variants) > 1:
            _print_medians([r for r in rows if r["devices"] == level], args.variants)
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


def _print_medians(rows: list[dict[str, Any]], variants: list[str]) -> None:
    """Per variant: the median claim and renew rate and p99 of its rounds, and each rate ÷ the first variant's."""
    med = {v: {k: statistics.median(r[k] for r in rows if r["variant"] == v) for k in MEDIAN_KEYS} for v in variants}
    base = med[variants[0]]
    for v in variants:
        m = med[v]
        print(
            f"  median {v:>10}: claim {m['claim_per_s']:6.0f}/s p99 {m['claim_p99_ms']:6.1f} ms"
            f" | renew {m['renew_per_s']:6.0f}/s p99 {m['renew_p99_ms']:6.1f} ms"
            f" | claim rate ÷ {variants[0]} {m['claim_per_s'] / base['claim_per_s']:.2f}"
            f" | renew rate ÷ {variants[0]} {m['renew_per_s'] / base['renew_per_s']:.2f}",
            flush=True,
        )


def _print_row(result: dict[str, Any]) -> None:
    """One run's line (and its open-loop lines)."""
    print(
        f"{result['variant']:>10} {result['devices']:>4} devices | claim {result['claim_per_s']:7.0f}/s"
        f" p50 {result['claim_p50_ms']:6.1f} ms p99 {result['claim_p99_ms']:6.1f} ms"
        f" | renew {result['renew_per_s']:7.0f}/s p50 {result['renew_p50_ms']:6.1f} ms"
        f" p99 {result['renew_p99_ms']:6.1f} ms | raw SQLite claim {result['raw_claim_per_s']:7.0f}/s"
        f" | server/raw {result['ratio_server_to_raw']:.2f}"
        f" | server CPU {result['server_cpu_ms_per_request']:.2f} ms/req"
        f" | load {result['load_before']:.1f}→{result['load_after']:.1f}",
        flush=True,
    )
    for o in result["offered"]:
        print(
            f"       open loop at {o['fraction']:.0%} of that claim rate"
            f" ({o['offered_per_s']:.0f}/s offered): {o['open_per_s']:.0f}/s p50 {o['open_p50_ms']:6.1f} ms"
            f" p99 {o['open_p99_ms']:6.1f} ms",
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
