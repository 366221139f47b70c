"""Run the simulator as a subprocess (e2e tests, the demo) and query it from outside.

:class:`SimProcess` starts ``python -m cmbuyer.phonesim.cli``, waits for its ``ready`` line
and stops it with SIGTERM. :func:`remote_journal`, :func:`remote_state` and
:func:`remote_inject` talk to any running simulator through its adb port using the
``host:phonesim-*`` extension services.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .journal import Entry


def _request(port: int, service: str, host: str = "127.0.0.1", timeout: float = 10.0) -> bytes:
    """Send one adb request; return the payload after OKAY (raises RuntimeError on FAIL)."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        data = service.encode("utf-8")
        sock.sendall(f"{len(data):04x}".encode("ascii") + data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
            if service.startswith("host:phonesim-inject") and len(b"".join(chunks)) >= 8:
                raw = b"".join(chunks)
                size = int(raw[4:8], 16) if raw[:4] in (b"OKAY", b"FAIL") else 0
                if len(raw) >= 8 + size:
                    break
    raw = b"".join(chunks)
    if raw[:4] == b"FAIL":
        raise RuntimeError(raw[8:].decode("utf-8", "replace"))
    if raw[:4] != b"OKAY":
        raise RuntimeError(f"unexpected adb answer {raw[:20]!r}")
    return raw[4:]


def remote_journal(port: int, serial: str = "sim-1", host: str = "127.0.0.1") -> list[Entry]:
    """All journal entries of ``serial`` from a simulator listening on ``port``."""
    text = _request(port, f"host:phonesim-journal:{serial}", host).decode("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def remote_state(port: int, serial: str = "sim-1", host: str = "127.0.0.1") -> dict[str, Any]:
    """:meth:`Phone.state` of ``serial`` (screen, orders, counters …)."""
    state: dict[str, Any] = json.loads(_request(port, f"host:phonesim-state:{serial}", host))
    return state


def remote_inject(port: int, serial: str, spec: dict[str, Any], host: str = "127.0.0.1") -> dict[str, Any]:
    """Inject a fault into a running simulator; returns the fault description."""
    raw = _request(port, f"host:phonesim-inject:{serial}:{json.dumps(spec, ensure_ascii=False)}", host)
    desc: dict[str, Any] = json.loads(raw[4:].decode("utf-8"))
    return desc


class SimProcess:
    """``cmbuyer-phonesim`` in a child process. ``start()`` returns the port; ``stop()`` sends SIGTERM."""

    def __init__(
        self,
        scenario: str | Path | dict[str, Any] | None = None,
        serials: list[str] | tuple[str, ...] = ("sim-1",),
        port: int = 0,
        host: str = "127.0.0.1",
        journal_path: str | Path | None = None,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
    ):
        self.serials = list(serials)
        self.host = host
        self.journal_path = Path(journal_path) if journal_path else None
        self._scenario = scenario
        self._tmp: Path | None = None
        self._port = port
        self._extra = list(extra_args or [])
        self._env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None

    def _args(self) -> list[str]:
        args = [sys.executable, "-m", "cmbuyer.phonesim.cli", "--host", self.host, "--port", str(self._port)]
        for s in self.serials:
            args += ["--serial", s]
        scenario = self._scenario
        if isinstance(scenario, dict):
            fd, name = tempfile.mkstemp(prefix="phonesim-", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(scenario, fh, ensure_ascii=False)
            self._tmp = Path(name)
            scenario = name
        if scenario is not None:
            args += ["--scenario", str(scenario)]
        if self.journal_path:
            args += ["--journal", str(self.journal_path)]
        return args + self._extra

    def start(self, timeout: float = 20.0) -> int:
        """Spawn and wait for the ``ready`` line; raises RuntimeError if it does not come."""
        env = {**os.environ, **(self._env or {}), "PYTHONUNBUFFERED": "1"}
        # unbuffered binary pipe: a buffered reader would hide lines from select()
        self.proc = subprocess.Popen(self._args(), stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, bufsize=0, env=env)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if not sel.select(timeout=0.2):
                    if self.proc.poll() is not None:
                        break
                    continue
                raw = self.proc.stdout.readline()  # raw FileIO: reads up to the newline only
                if not raw:
                    break
                line = raw.decode("utf-8", "replace")
                if line.startswith("listening "):
                    self.port = int(line.rsplit(":", 1)[1])
                if line.strip() == "ready" and self.port:
                    return self.port
        self.stop()
        raise RuntimeError("phonesim subprocess did not become ready")

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, wait, SIGKILL if needed; returns the exit code. Idempotent."""
        proc, self.proc = self.proc, None
        code = None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            code = proc.returncode
            if proc.stdout is not None:
                proc.stdout.close()
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
            self._tmp = None
        return code

    def journal(self, serial: str = "sim-1") -> list[Entry]:
        assert self.port is not None
        return remote_journal(self.port, serial, self.host)

    def state(self, serial: str = "sim-1") -> dict[str, Any]:
        assert self.port is not None
        return remote_state(self.port, serial, self.host)

    def inject(self, serial: str, spec: dict[str, Any]) -> dict[str, Any]:
        assert self.port is not None
        return remote_inject(self.port, serial, spec, self.host)

    def env(self) -> dict[str, str]:
        return {"ANDROID_ADB_SERVER_HOST": self.host, "ANDROID_ADB_SERVER_PORT": str(self.port)}

    def __enter__(self) -> SimProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
