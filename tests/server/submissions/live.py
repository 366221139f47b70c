"""A real ``cmbuyer-server serve`` subprocess on a loopback port (system clock), plus small sync HTTP
helpers — for the multi-process, SIGKILL and memory tests."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cmbuyer.server.tx.common import new_id
from tests.server.conftest import DeviceCreds
from tests.server.submissions.helpers import CLAIM_NEXT, HEARTBEAT, Claim, heartbeat_body


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveServer:
    """Start/kill/restart the real server process on one data dir."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = data_dir / "server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CMBUYER_")}
        env["CMBUYER_SUPERVISED_ORDERS"] = "0"  # these fence tests predate supervised first orders (issue 17)
        exe = str(Path(sys.executable).parent / "cmbuyer-server")
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [exe, "--data-dir", str(self.data_dir), "serve", "--port", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()[-2000:]}")
            try:
                status, _ = request(self, "GET", "/healthz", None, None)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("server did not become healthy")

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill9()

    def peak_rss_kib(self) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise RuntimeError("no VmHWM")


def request(
    server: LiveServer, method: str, path: str, creds: DeviceCreds | None, body: Any, timeout: float = 10.0
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json", **(creds.headers() if creds else {})}
        data = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def claim_live(server: LiveServer, creds: DeviceCreds) -> Claim:
    status, raw = request(server, "POST", HEARTBEAT, creds, heartbeat_body(creds.device_id))
    assert status == 200, raw
    session = new_id()
    status, raw = request(server, "POST", CLAIM_NEXT, creds, {"session_id": session, "claim_request_id": new_id()})
    assert status == 200, (status, raw)
    return Claim.from_body(creds, session, json.loads(raw))
