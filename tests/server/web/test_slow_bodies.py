"""Slow bodies and half-sent requests (docs/operations.md "Connection limits").

Pending connections — not yet carrying an authenticated request — are capped per client address and
overall (the oldest pending one is closed) and live at most ``pending_connection_timeout`` seconds;
authenticated keep-alive connections are never capped. The outage test runs the real server process
with a low descriptor limit and opens more slow bodies than it has descriptors: before the fix every
new connection waited forever in the accept queue ("Too many open files"); now a phone's heartbeat is
answered within 2 s and the log stays small. Connection counts grow under ``make soak``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.server.config import Settings
from cmbuyer.server.web.edge import GUARD
from tests.server.claims.conftest import HEARTBEAT, heartbeat_body
from tests.server.conftest import Maker
from tests.server.submissions.live import LiveServer
from tests.server.web.conftest import address, read_answer, request
from tests.soak import soak_scale

# slow bodies against the server's time and descriptor limits: alone (pytest -m serial)
pytestmark = pytest.mark.serial

ANSWER_WITHIN_S = 2.0
LOG_BOUND = 256 * 1024
# read at import: the settings fixture removes every CMBUYER_* variable from the environment
SLOW_CONNECTIONS = soak_scale(300, 1100)


def _heartbeat_bytes(creds: Any) -> bytes:
    body = json.dumps(heartbeat_body(creds.device_id)).encode()
    return request("POST", HEARTBEAT, {**creds.headers(), "Content-Type": "application/json"}, body)


async def _open_slow(host: str, port: int, count: int, head: bytes) -> list[asyncio.StreamWriter]:
    """``count`` connections that sent ``head`` and nothing more (failures to connect are skipped:
    the server may already be closing the oldest ones)."""
    gate = asyncio.Semaphore(64)

    async def one() -> asyncio.StreamWriter | None:
        async with gate:
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
            except (OSError, TimeoutError):
                return None
            writer.write(head)
            return writer

    return [w for w in await asyncio.gather(*(one() for _ in range(count))) if w is not None]


async def _trickle(writers: list[asyncio.StreamWriter], stop: asyncio.Event) -> None:
    """One byte every half second on every slow connection that is still open."""
    while not stop.is_set():
        for w in writers:
            if not w.is_closing():
                try:
                    w.write(b"x")
                except (OSError, RuntimeError):
                    pass
        await asyncio.sleep(0.5)


def _close_all(writers: list[asyncio.StreamWriter]) -> None:
    for w in writers:
        w.close()


# -- the guard in-process (small caps) --------------------------------------------------------------


@pytest.fixture
async def small_caps_client(aiohttp_client: Any, settings: Settings, clock: Any) -> Any:
    from cmbuyer.server.app import create_app

    tight = dataclasses.replace(
        settings,
        pending_connections_per_address=4,
        pending_connections_max=8,
        pending_connection_timeout=1,
        device_connections_max=16,  # one device stands for a host's many agents below; its cap is tested apart
    )
    return await aiohttp_client(create_app(tight, clock))


async def _is_closed(reader: asyncio.StreamReader, within: float) -> bool:
    try:
        async with asyncio.timeout(within):
            return await reader.read(1) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


async def test_pending_connections_are_capped_but_authenticated_keep_alive_ones_never(
    small_caps_client: Any, make_device: Maker
) -> None:
    host, port = address(small_caps_client)
    dev = make_device()
    phones = []
    for _ in range(10):  # more than both caps, one connection after the other as agents start
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(_heartbeat_bytes(dev))
        assert (await read_answer(reader)).status == 200
        phones.append((reader, writer))
    slow = [await asyncio.open_connection(host, port) for _ in range(10)]
    for _, writer in slow:
        writer.write(b"POST /login HTTP/1.1\r\nHost: x\r\n")  # headers never finished
    await asyncio.sleep(0.3)
    closed = [await _is_closed(reader, 0.2) for reader, _ in slow]
    assert sum(not c for c in closed) <= 4 and closed[:6] == [True] * 6  # the oldest went first
    for reader, writer in phones:  # every authenticated keep-alive connection still works
        writer.write(_heartbeat_bytes(dev))
        assert (await read_answer(reader)).status == 200
    # the pending ones that stayed are closed by the pending timeout (1 s here)
    assert all([await _is_closed(reader, 3.0) for reader, _ in slow])
    for reader, writer in phones:
        writer.write(_heartbeat_bytes(dev))
        assert (await read_answer(reader)).status == 200
        writer.close()
    for _, writer in slow:
        writer.close()


async def test_a_leaked_device_token_holds_at_most_its_per_device_cap(
    small_caps_client: Any, make_device: Maker
) -> None:
    """One token opened ~1,000 idle authenticated connections and other phones timed out. Each
    device's authenticated connections are capped (16 here, ``device_connections_max``): a new one closes
    that device's least recently used one, and another phone is never affected."""
    host, port = address(small_caps_client)
    guard = small_caps_client.server.app[GUARD]
    leaked, other = make_device("leaked"), make_device("other")
    held = []
    for _ in range(40):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(_heartbeat_bytes(leaked))
        assert (await read_answer(reader)).status == 200
        held.append((reader, writer))
    assert guard.owned_count(f"device:{leaked.device_id}") == 16
    closed = [await _is_closed(reader, 0.5) for reader, _ in held[:24]]
    assert all(closed)  # the 24 least recently used went
    for reader, writer in held[24:]:  # the 16 newest still answer
        writer.write(_heartbeat_bytes(leaked))
        assert (await read_answer(reader)).status == 200
    # "least recently used", not "oldest": the first of the 16 was just used again, the second was not
    held[24][1].write(_heartbeat_bytes(leaked))
    assert (await read_answer(held[24][0])).status == 200
    for reader, writer in held[26:]:
        writer.write(_heartbeat_bytes(leaked))
        assert (await read_answer(reader)).status == 200
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(_heartbeat_bytes(leaked))
    assert (await read_answer(reader)).status == 200
    held.append((reader, writer))
    assert await _is_closed(held[25][0], 0.5) and not await _is_closed(held[24][0], 0.3)
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(_heartbeat_bytes(other))
    assert (await read_answer(reader, within=2.0)).status == 200
    assert guard.owned_count(f"device:{other.device_id}") == 1
    writer.close()
    for _, w in held:
        w.close()


# -- the outage: the real server process out of descriptors --------------------------------------------


@pytest.fixture
def server_process(data_dir: Path, settings: Settings, tmp_path: Path) -> Iterator[tuple[int, Path, int]]:
    """``cmbuyer-server serve`` with RLIMIT_NOFILE lowered so the slow connections can exhaust it;
    yields ``(port, log path, descriptor limit)``."""
    conns = SLOW_CONNECTIONS
    limit = 256 if conns <= 300 else 1024
    server = LiveServer(data_dir, env={}, nofile=limit)
    try:
        server.start(timeout=30)
        yield server.port, server.log, conns
    finally:
        server.stop()


@pytest.mark.slow
async def test_slow_bodies_beyond_the_descriptor_limit_do_not_stop_heartbeats(
    server_process: tuple[int, Path, int], make_device: Maker
) -> None:
    port, log_path, conns = server_process
    host = "127.0.0.1"
    dev = make_device()
    kept_reader, kept_writer = await asyncio.open_connection(host, port)  # a phone's keep-alive connection
    kept_writer.write(_heartbeat_bytes(dev))
    assert (await read_answer(kept_reader)).status == 200

    head = request(
        "POST", "/login", {"Content-Type": "application/x-www-form-urlencoded", "Content-Length": "10000000"}, b""
    )
    slow = await _open_slow(host, port, conns, head)
    stop = asyncio.Event()
    trickle = asyncio.create_task(_trickle(slow, stop))
    latencies: list[float] = []
    try:
        until = time.monotonic() + (3.0 if conns <= 300 else 10.0)
        rounds = 0
        while time.monotonic() < until:
            started = time.monotonic()
            async with asyncio.timeout(ANSWER_WITHIN_S + 3):
                reader, writer = await asyncio.open_connection(host, port)
                try:
                    writer.write(_heartbeat_bytes(dev))
                    answer = await read_answer(reader, within=ANSWER_WITHIN_S + 3)
                finally:
                    writer.close()
            assert answer.status == 200
            latencies.append(time.monotonic() - started)
            if rounds % 4 == 0:
                kept_writer.write(_heartbeat_bytes(dev))
                assert (await read_answer(kept_reader, within=ANSWER_WITHIN_S)).status == 200
            rounds += 1
            await asyncio.sleep(0.25)
    finally:
        stop.set()
        await trickle
        _close_all(slow)
        kept_writer.close()
    print(f"{len(slow)} slow connections opened of {conns}; {len(latencies)} heartbeats, slowest {max(latencies):.3f}s")
    assert max(latencies) < ANSWER_WITHIN_S, latencies
    log = log_path.read_bytes()
    assert len(log) < LOG_BOUND, len(log)
    assert b"Traceback" not in log
