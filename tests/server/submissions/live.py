"""The subprocess real-server harness: a real ``cmbuyer-server serve`` process on a loopback port (system
clock), plus small sync HTTP helpers — for the multi-process, SIGKILL, memory, TLS and descriptor-limit tests.
Its in-thread counterpart is tests/server/inproc.py."""

from __future__ import annotations

import http.client
import json
import os
import resource
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cmbuyer.server.tx.common import new_id
from demo.stack import StackError, free_port, spawn_server, wait_healthy
from tests.server.conftest import DeviceCreds
from tests.server.submissions.helpers import CLAIM_NEXT, HEARTBEAT, Claim, heartbeat_body


class LiveServer:
    """Start/kill/restart the real server process on one data dir."""

    def __init__(
        self,
        data_dir: Path,
        env: dict[str, str] | None = None,
        *,
        ca: Path | None = None,
        nofile: int | None = None,
    ) -> None:
        """``env``: the ``CMBUYER_*`` settings the process gets on top of the environment without any
        ``CMBUYER_*`` (default: supervision off, as the fence tests written before supervised first orders
        expect); ``ca``: the server serves https (the data dir's ``tls init``) and its health is checked
        against this CA; ``nofile``: the process's soft descriptor limit (``RLIMIT_NOFILE``)."""
        self.data_dir = data_dir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = data_dir / "server.log"
        self._env = {"CMBUYER_SUPERVISED_ORDERS": "0"} if env is None else env
        self._ca = ca
        self._nofile = nofile

    @property
    def url(self) -> str:
        return f"{'https' if self._ca is not None else 'http'}://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> None:
        """Start the server and wait for ``/healthz`` (demo.stack's); ``RuntimeError`` with the end of the
        server's log when it exits first or never answers (``self.proc`` is kept either way, for ``stop``)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("CMBUYER_")}
        env.update(self._env)
        self.proc = spawn_server(self.data_dir, self.port, self.log, env, preexec_fn=self._limits())
        try:
            wait_healthy(self.proc, self.port, self.log, timeout, base=self.url, ca=self._ca)
        except StackError as e:  # the log is in a temporary dir, gone when the report is read
            raise RuntimeError(f"{e}: {self.log.read_text(errors='replace')[-2000:]}") from e

    def _limits(self) -> Callable[[], None] | None:
        """What the child runs before ``exec``: lower its soft descriptor limit to ``nofile`` (None: nothing)."""
        nofile = self._nofile
        if nofile is None:
            return None

        def lower() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

        return lower

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
