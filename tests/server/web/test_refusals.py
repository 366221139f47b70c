"""Refused bodies (docs/api.md "Refused and abandoned bodies"): a response sent
before the body was read to its end is followed by a half-close, at most LINGER_BYTES / LINGER_S of
discarded reading, then close — the client can still read the answer, and a client that keeps
streaming is cut off within about a second instead of being drained for aiohttp's 10 s.

Streaming clients run concurrently: one by default, more under ``make soak`` (CMBUYER_SOAK_ITERATIONS);
a phone's heartbeat on another connection must stay answered meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass
from typing import Any

import pytest

from cmbuyer.server.web.admin import body as admin_body
from tests.server.claims.conftest import CLAIM, HEARTBEAT, heartbeat_body, post
from tests.server.conftest import Maker
from tests.server.web.conftest import RawAnswer, address, read_answer, request
from tests.soak import soak_scale

# bodies streamed as fast as possible against answer and body time limits: alone (pytest -m serial)
pytestmark = pytest.mark.serial

CUT_WITHIN_S = 4.0  # LINGER_S (1 s) plus generous slack for a loaded 2-core VM
SENT_BOUND = 64 * 1024**2  # socket buffers on loopback hold a few MiB; draining for 10 s is GiBs
CHUNK = b"%x\r\n" % 65536 + b"x" * 65536 + b"\r\n"
STREAMS = soak_scale(1, 8)  # read at import: the settings fixture removes CMBUYER_* variables


@dataclass
class Streamed:
    """What a client that never stops sending saw."""

    answer: RawAnswer | None
    sent: int
    cut_after: float


async def stream_forever(client: Any, path: str, headers: dict[str, str], limit_s: float = 15.0) -> Streamed:
    """Send chunked data to ``path`` as fast as possible until the server cuts the connection (or
    ``limit_s`` passes); read the answer meanwhile."""
    reader, writer = await asyncio.open_connection(*address(client))
    head = request("POST", path, {"Transfer-Encoding": "chunked", **headers})
    head = head.replace(b"Content-Length: 0\r\n", b"")
    started = time.monotonic()
    sent = 0

    async def pump() -> None:
        nonlocal sent
        writer.write(head)
        while time.monotonic() - started < limit_s:
            writer.write(CHUNK)
            await writer.drain()
            sent += len(CHUNK)

    task = asyncio.create_task(pump())
    answer: RawAnswer | None = None
    try:
        # A client that keeps sending after the refusal may see the reset before it reads the answer
        # (the kernel drops unread data on a reset); then it has "no answer" and retries (docs/api.md).
        with contextlib.suppress(ConnectionError):
            answer = await read_answer(reader, within=5.0)
        try:
            await asyncio.wait_for(task, limit_s + 1)
        except (ConnectionError, OSError):
            pass
    finally:
        task.cancel()
        writer.close()
    return Streamed(answer, sent, time.monotonic() - started)


def _cut(result: Streamed) -> None:
    assert result.cut_after < CUT_WITHIN_S, result
    assert result.sent < SENT_BOUND, result


@pytest.mark.slow
async def test_unauthenticated_chunked_stream_gets_401_then_is_cut(server_client: Any, make_device: Maker) -> None:
    dev = make_device()
    storm = [
        asyncio.create_task(stream_forever(server_client, CLAIM, {"Content-Type": "application/json"}))
        for _ in range(STREAMS)
    ]
    await asyncio.sleep(0.2)
    started = time.monotonic()
    status, _, _ = await post(server_client, HEARTBEAT, dev, heartbeat_body(dev.device_id))
    assert status == 200 and time.monotonic() - started < 2.0
    results = await asyncio.gather(*storm)
    answers = [r.answer for r in results if r.answer is not None]
    assert answers, results  # with one stream (the default) its answer is always read in practice
    for answer in answers:
        assert answer.status == 401 and answer.body == b""
        assert answer.headers["connection"].lower() == "close"
    for result in results:
        _cut(result)


async def test_oversized_device_body_gets_413_then_is_cut(server_client: Any, make_device: Maker) -> None:
    dev = make_device()
    result = await stream_forever(server_client, HEARTBEAT, {**dev.headers(), "Content-Type": "application/json"})
    assert result.answer is not None and result.answer.status == 413
    assert json.loads(result.answer.body) == {"error": "request_too_large"}
    _cut(result)


async def test_oversized_login_body_gets_413_then_is_cut(server_client: Any) -> None:
    result = await stream_forever(server_client, "/login", {"Content-Type": "application/x-www-form-urlencoded"})
    assert result.answer is not None and result.answer.status == 413
    _cut(result)


async def test_login_body_that_never_ends_is_refused_after_the_body_time_limit(
    server_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin_body, "BODY_READ_TIMEOUT_S", 0.5, raising=False)  # absent before the fix
    reader, writer = await asyncio.open_connection(*address(server_client))
    writer.write(
        request(
            "POST",
            "/login",
            {"Content-Type": "application/x-www-form-urlencoded", "Content-Length": "1000"},
            b"username=o",
        )
    )
    started = time.monotonic()
    try:
        answer = await read_answer(reader, within=5.0)
    finally:
        writer.close()
    assert answer.status == 400
    assert time.monotonic() - started < 3.0


async def test_a_refusal_before_the_body_arrived_closes_a_keep_alive_connection(
    server_client: Any, make_device: Maker
) -> None:
    dev = make_device()
    body = json.dumps(heartbeat_body(dev.device_id)).encode()
    reader, writer = await asyncio.open_connection(*address(server_client))
    try:
        for _ in range(2):  # keep-alive after a normal answer
            writer.write(request("POST", HEARTBEAT, {**dev.headers(), "Content-Type": "application/json"}, body))
            assert (await read_answer(reader)).status == 200
        # no credentials, and a body that has not fully arrived when the 401 is sent
        writer.write(request("POST", HEARTBEAT, {"Content-Type": "application/json", "Content-Length": "100000"}, body))
        answer = await read_answer(reader)
        assert answer.status == 401 and answer.headers["connection"].lower() == "close"
        async with asyncio.timeout(CUT_WITHIN_S):
            assert await reader.read() == b""  # the server closed its side
    finally:
        writer.close()
