"""The agent's HTTP client treats a connection reset during an upload, or an answer cut off
mid-way, as "no answer": it sends the same bytes again (same idempotency key), a bounded number of
times (docs/api.md "Refused and abandoned bodies").

A small TCP proxy sits between HttpDeviceApi and the REAL server (tests/agent/realserver.py) and
misbehaves on the connections its plan names: ``upload`` resets after reading part of the request,
``answer`` forwards the whole request but ends the connection (clean FIN) after the headers and half
of the body of the server's answer. The proxy is
needed because no real server misbehaves on demand; everything behind it is real.
"""

from __future__ import annotations

import io
import re
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cmbuyer.agent.client import HttpDeviceApi
from cmbuyer.agent.errors import ServerUnreachable
from cmbuyer.agent.journal import Journal
from cmbuyer.agent.model import ScreenshotAsset, Session

from .realserver import RealServer
from .simphone import SimPhone

_UPLOAD_KEY = re.compile(rb'name="upload_key"\r\n\r\n([0-9a-f-]{36})\r\n')


def _reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close → RST
    sock.close()


def _read_message(sock: socket.socket) -> bytes:
    """One HTTP message with a Content-Length body (both directions use one here)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    m = re.search(rb"(?im)^content-length:\s*([0-9]+)", head)
    need = int(m.group(1)) if m else 0
    while len(body) < need:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


class MisbehavingProxy:
    """Loopback proxy to ``upstream_port``; connection i follows ``plan[i]`` (then "pass")."""

    def __init__(self, upstream_port: int, plan: list[str]) -> None:
        self.plan = list(plan)
        self.upstream_port = upstream_port
        self.requests: list[bytes] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            mode = self.plan.pop(0) if self.plan else "pass"
            with client:
                client.settimeout(10)
                if mode == "upload":
                    self.requests.append(client.recv(600))
                    _reset(client)
                    continue
                request = _read_message(client)
                self.requests.append(request)
                with socket.create_connection(("127.0.0.1", self.upstream_port), timeout=10) as up:
                    up.sendall(request)
                    answer = _read_message(up)
                if mode == "answer":
                    head_len = answer.index(b"\r\n\r\n") + 4
                    client.sendall(answer[: head_len + (len(answer) - head_len) // 2])
                    client.shutdown(socket.SHUT_WR)  # a clean FIN, mid-body
                else:
                    client.sendall(answer)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[RealServer]:
    with RealServer(tmp_path) as server:
        yield server


def _png() -> bytes:
    buf = io.BytesIO()
    SimPhone().screenshot().save(buf, format="PNG")
    return buf.getvalue()


def test_reset_during_upload_and_cut_answer_are_retried_with_the_same_key(tmp_path: Path, srv: RealServer) -> None:
    creds = srv.add_device()
    task = srv.add_task()
    journal = Journal(tmp_path / "j.sqlite3")
    direct = HttpDeviceApi(srv.url, creds, journal, backoff=0.01)
    direct.heartbeat(
        adb_serial="sim-1", android_release="13", pdd_version="8.17.0", pdd_version_code=81700, state="READY"
    )
    purchase = direct.claim_next(Session("2f8b5b1c-7d1e-4c7a-9a52-1d2e3f4a5b6c"))
    assert purchase is not None
    proxy = MisbehavingProxy(srv.port, ["upload", "answer"])
    try:
        api = HttpDeviceApi(f"http://127.0.0.1:{proxy.port}", creds, journal, backoff=0.01)
        api.remember_claim(purchase.claim)
        ref = api.upload_screenshot(purchase.claim, ScreenshotAsset("SKU_PANEL_GATE_1", _png()))
    finally:
        proxy.close()
    keys = [m.group(1) for r in proxy.requests if (m := _UPLOAD_KEY.search(r))]
    assert len(proxy.requests) == 3  # reset upload, cut answer (stored by the server), replay
    assert len(set(keys)) == 1 and len(keys) >= 2  # the first request may be cut before its key
    evidence = srv.detail(task.id)["evidence"]
    assert len(evidence) == 1 and ref.sha256 in str(evidence[0])  # stored once


def test_resets_forever_end_in_server_unreachable_after_the_bounded_retries(tmp_path: Path, srv: RealServer) -> None:
    creds = srv.add_device()
    proxy = MisbehavingProxy(srv.port, ["answer"] * 10)
    try:
        api = HttpDeviceApi(
            f"http://127.0.0.1:{proxy.port}", creds, Journal(tmp_path / "j.sqlite3"), backoff=0.01, retries=2
        )
        with pytest.raises(ServerUnreachable):
            api.heartbeat(
                adb_serial="sim-1", android_release="13", pdd_version="8.17.0", pdd_version_code=81700, state="READY"
            )
    finally:
        proxy.close()
    assert len(proxy.requests) == 3  # 1 + retries, then it stops
