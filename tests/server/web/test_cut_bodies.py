"""Cut bodies: a client that sends part of a request body and disconnects is a quiet,
counted close on every body reader — the login form, admin forms and JSON, the task import upload,
device JSON and the evidence multipart — authenticated or not: no traceback, no 500, no log line per request.

Real aiohttp server (pytest-aiohttp), raw sockets (client libraries never cut a body on purpose), the
log captured from every logger. The loop count comes from tests.soak (300 under ``make soak``).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from typing import Any

import pytest
from aiohttp import web

from cmbuyer.server.config import Settings
from cmbuyer.server.web.edge import GUARD, BodyCut, ConnectionGuard, read_chunk
from tests.server.conftest import DeviceMaker
from tests.soak import soak_scale

from .conftest import address, exchange, request

# bodies cut against the server's time limits: alone (pytest -m serial)
pytestmark = pytest.mark.serial

ROUNDS = soak_scale(12, 300)
PHONE = "phone"
# a task id that exists nowhere: the multipart reader runs before the task is looked up
TASK = "00000000-0000-4000-8000-000000000000"


async def cut(client: Any, head: bytes, part: bytes) -> None:
    """Send ``head`` and ``part`` of the body it announces, then reset the connection."""
    _, writer = await asyncio.open_connection(*address(client))
    writer.write(head + part)
    await writer.drain()
    writer.close()


def _head(path: str, ctype: str, extra: dict[str, str]) -> bytes:
    return request("POST", path, {"Content-Type": ctype, "Content-Length": "1000", **extra})


@pytest.fixture
async def readers(server_client: Any, admin_client: Any, make_device: DeviceMaker) -> dict[str, bytes]:
    """The head of one request per body reader, each announcing 1000 bytes. The test server is set to
    keep a handler running when its client leaves, as ``serve`` does (aiohttp's default; the test
    server would cancel the handler instead, hiding the reads that fail)."""
    server_client.server.runner.server.handler_cancellation = False
    dev = make_device(PHONE)
    jar = admin_client.client.session.cookie_jar
    cookies = "; ".join(f"{c.key}={c.value}" for c in jar)
    admin = {"Cookie": cookies, "X-CSRF-Token": admin_client.csrf}
    device = {k: v for k, v in dev.headers().items() if k.lower() != "content-type"}
    return {
        "login": _head("/login", "application/x-www-form-urlencoded", {}),
        "admin form": _head("/tasks", "application/x-www-form-urlencoded", admin),
        "admin json": _head("/tasks/start-purchases", "application/json", admin),
        "device json": _head("/api/v1/devices/heartbeat", "application/json", device),
        "multipart": _head(f"/api/v1/tasks/{TASK}/evidence", "multipart/form-data; boundary=b0undary", device),
        "admin multipart": _head("/tasks/import", "multipart/form-data; boundary=b0undary", admin),
    }


PARTS = {
    "login": b"username=ops&password=x",
    "admin form": b"title=x&",
    "admin json": b'{"task_ids": [',
    "device json": b'{"client_version": "1.',
    "multipart": b'--b0undary\r\nContent-Disposition: form-data; name="kind"\r\n\r\ngate',
    "admin multipart": b'--b0undary\r\nContent-Disposition: form-data; name="file"; filename="t.csv"\r\n',
}


@pytest.mark.slow(seconds_per_iteration=2.0)
async def test_cut_bodies_close_quietly_and_are_counted(
    server_client: Any, readers: dict[str, bytes], caplog: pytest.LogCaptureFixture
) -> None:
    guard = server_client.server.app[GUARD]
    assert isinstance(guard, ConnectionGuard)
    caplog.set_level(logging.INFO)
    before = guard.cut_bodies
    for name, head in readers.items():
        caplog.clear()
        for _ in range(ROUNDS):
            await cut(server_client, head, PARTS[name])
        await asyncio.sleep(0.3)
        # every logger: no traceback, no 500, and at most a line or two (rate-limited) for all the rounds
        assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], (name, caplog.text)
        assert " 500 " not in caplog.text and "Traceback" not in caplog.text, name
        access = [r.getMessage() for r in caplog.records if r.name == "aiohttp.access"]
        assert not [line for line in access if '" 500 ' in line], name
        lines = [r for r in caplog.records if r.levelno >= logging.INFO and r.name != "aiohttp.access"]
        assert len(lines) <= 2, (name, caplog.text)
    assert guard.cut_bodies - before == ROUNDS * len(readers)
    # the server still answers
    answer = await exchange(server_client, request("GET", "/healthz", {}))
    assert answer.status == 200


async def test_a_read_after_the_server_closed_the_connection_is_a_cut_too(
    aiohttp_client: Any, settings: Settings, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """aiohttp raises a bare ``RuntimeError("Connection closed.")`` when a read starts after the transport
    went away (the connection guard closed it while the handler waited for the database, say): that is
    a cut as well, answered by the same quiet close. A route added to the real app closes its own
    connection and then reads."""
    from cmbuyer.server.app import create_app

    seen: list[str] = []

    async def closes_then_reads(request: web.Request) -> web.StreamResponse:
        request.protocol.force_close()
        try:
            await read_chunk(request, 10)
        except BodyCut as exc:
            seen.append(repr(exc.__cause__))
            raise
        return web.Response(text="read")

    app = create_app(settings, clock)
    app.router.add_post("/_cut", closes_then_reads)
    client = await aiohttp_client(app)
    client.server.runner.server.handler_cancellation = False  # as in ``serve``
    caplog.set_level(logging.INFO)
    for _ in range(3):
        await cut(client, _head("/_cut", "text/plain", {}), b"")
    await asyncio.sleep(0.3)
    assert seen == ["RuntimeError('Connection closed.')"] * 3
    assert app[GUARD].cut_bodies == 3
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], caplog.text


def _cut_in_threads(port: int, head: bytes, part: bytes, threads: int, rounds: int) -> None:
    """The reported attack: ``threads`` clients each sending ``rounds`` cut bodies as fast as they can."""

    def loop() -> None:
        for _ in range(rounds):
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(head + part)

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


@pytest.mark.slow(seconds_per_iteration=1.0)
def test_cut_bodies_from_four_threads_leave_no_traceback_in_the_server_log(live: Any, make_device: DeviceMaker) -> None:
    """The real ``serve`` process under four threads of cut login forms and device bodies (more pending
    connections than the per-address cap, so the guard closes some while their handlers are queued):
    its log holds no traceback and stays small."""
    dev = make_device(PHONE)
    device = {k: v for k, v in dev.headers().items() if k.lower() != "content-type"}
    rounds = soak_scale(60, 300)
    port = int(live.url.rsplit(":", 1)[1])
    start = live.log.stat().st_size
    _cut_in_threads(port, _head("/login", "application/x-www-form-urlencoded", {}), PARTS["login"], 4, rounds)
    heartbeat = _head("/api/v1/devices/heartbeat", "application/json", device)
    _cut_in_threads(port, heartbeat, PARTS["device json"], 4, rounds)
    evidence = _head(f"/api/v1/tasks/{TASK}/evidence", "multipart/form-data; boundary=b0undary", device)
    _cut_in_threads(port, evidence, PARTS["multipart"], 4, rounds)
    threading.Event().wait(1.0)  # the last handlers finish
    text = live.log.read_bytes()[start:].decode("utf-8", "replace")
    assert "Traceback" not in text and "Error handling request" not in text, text[-3000:]
    # rate-limited: a few lines per 10 s whatever the number of cut bodies
    assert len(text.splitlines()) <= 12, text
