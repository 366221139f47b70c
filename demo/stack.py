"""Run the whole system as real processes: `cmbuyer-server`, `cmbuyer-phonesim` and one `cmbuyer-agent`
per phone. Used by `make demo` and by the end-to-end tests (tests/e2e/), so both exercise exactly
what an operator runs.

All processes bind to loopback. Logs go to ``<data dir>/logs/``. Device tokens are written only to
per-phone credential files (mode 0600) — never printed or logged.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cmbuyer.agent.settings import AGENT_SETTINGS_BY_NAME
from cmbuyer.phonesim.journal import read_journal
from cmbuyer.server.db import connect_sync
from cmbuyer.server.display import task_view

BIN = Path(sys.executable).parent
SETTLED = frozenset(
    {"WAITING_PAYMENT", "RECONCILIATION_REQUIRED", "FAILED", "EXPIRED", "CANCELLED", "CLOSED_NOT_CREATED", "PAID"}
)
GOODS_URL = "https://mobile.yangkeduo.com/goods.html?goods_id={goods_id}"
LOCK_DIR_ENV = AGENT_SETTINGS_BY_NAME["lock_dir"].env  # kept: every agent and doctor of a host shares it


class StackError(RuntimeError):
    """A process of the stack failed to start or a command failed; the message says which."""


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    """True when nothing listens on 127.0.0.1:``port``."""
    with socket.socket() as s:
        # Connections the previous run closed linger in TIME-WAIT for a minute; they do not stop the server
        # (aiohttp binds with SO_REUSEADDR too), so they must not make the port look taken.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def spawn_server(
    data_dir: Path,
    port: int,
    log: Path,
    env: dict[str, str],
    *,
    new_session: bool = False,
    host: str = "127.0.0.1",
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``cmbuyer-server --data-dir DATA_DIR serve --host HOST --port PORT`` with environment ``env``
    (stdout and stderr appended to ``log``; in a session of its own when ``new_session``; ``preexec_fn`` runs
    in the child before the server starts, e.g. to lower a resource limit) and return the process at once:
    the caller keeps it, so it can stop the server even when :func:`wait_healthy` then fails. TLS comes from
    the data dir's env file (``cmbuyer-server tls init``) or ``env``."""
    with log.open("ab") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            [str(BIN / "cmbuyer-server"), "--data-dir", str(data_dir), "serve", "--host", host, "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=new_session,
            preexec_fn=preexec_fn,
        )


def wait_healthy(
    proc: subprocess.Popen[bytes],
    port: int,
    log: Path,
    timeout: float = 30.0,
    *,
    base: str = "",
    ca: Path | None = None,
) -> None:
    """Wait until ``BASE/healthz`` (default ``http://127.0.0.1:PORT``) answers 200; an ``https://`` base is
    verified against ``ca``.

    Raises :class:`StackError` when ``proc`` exits first (the message names ``log``) or is not healthy within
    ``timeout`` seconds (``proc`` is left running: the caller, which holds it, stops it).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StackError(f"服务器已退出（退出码 {proc.returncode}）；见 {log}")
        try:
            context = ssl.create_default_context(cafile=str(ca)) if ca is not None else None
            with urllib.request.urlopen(  # noqa: S310 - our own server's http(s) URL
                f"{base or f'http://127.0.0.1:{port}'}/healthz", timeout=2, context=context
            ) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise StackError("服务器没有进入健康状态（/healthz）")


@dataclass
class TaskSpec:
    """One demo/e2e task and the state it must end in (``expect`` may list several acceptable states)."""

    title: str
    goods_id: str
    color: str
    size: str | None  # None: one-dimension goods (the task names no size)
    quantity: int
    max_total_price: str
    expect: tuple[str, ...] = ("WAITING_PAYMENT",)
    task_id: str = ""


@dataclass
class Stack:
    """The processes of one run, rooted at ``data_dir``. Call :meth:`stop` (or use as a context
    manager) to end every child cleanly: SIGTERM, wait, then SIGKILL whatever is left."""

    data_dir: Path
    server_port: int = 8080
    server_host: str = "127.0.0.1"
    # the private CA of an HTTPS server (`cmbuyer-server tls init`): set, the stack speaks https://
    ca: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    server: subprocess.Popen[bytes] | None = None
    sim: subprocess.Popen[str] | None = None
    sim_port: int = 0
    agents: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    serial_of: dict[str, str] = field(default_factory=dict)
    admin_password: str = ""

    # -- plumbing --------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """Base URL of the server."""
        scheme = "https" if self.ca is not None else "http"
        return f"{scheme}://{self.server_host}:{self.server_port}"

    @property
    def logs(self) -> Path:
        """Folder of the children's log files."""
        return self.data_dir / "logs"

    def _env(self) -> dict[str, str]:
        # a clean CMBUYER_ environment, but the agents' lock dir stays the host's (agent/instance.py): an agent of
        # the demo must see, and be seen by, every other agent and doctor for the same phone serial
        base = {k: v for k, v in os.environ.items() if not k.startswith("CMBUYER_") or k == LOCK_DIR_ENV}
        return {**base, **self.env}

    def cli(self, *args: str, stdin: str | None = None) -> dict[str, Any]:
        """Run ``cmbuyer-server --data-dir D ARGS --json`` and return its JSON output."""
        result = subprocess.run(
            [str(BIN / "cmbuyer-server"), "--data-dir", str(self.data_dir), *args, "--json"],
            input=stdin,
            capture_output=True,
            text=True,
            env=self._env(),
            timeout=60,
        )
        if result.returncode != 0:
            raise StackError(
                f"cmbuyer-server {args[0]} {args[1] if len(args) > 1 else ''} failed: {result.stderr.strip()}"
            )
        out: dict[str, Any] = json.loads(result.stdout)
        return out

    # -- lifecycle -------------------------------------------------------------------------------
    def init(self, *, fresh: bool = True) -> None:
        """Create the data dir with fresh secrets (removing an old one when ``fresh``) and an admin."""
        if fresh and self.data_dir.exists():
            shutil.rmtree(self.data_dir)
        self.cli("init")
        self.logs.mkdir(parents=True, exist_ok=True)
        self.admin_password = secrets.token_urlsafe(12)
        self.cli("admin", "add", "--username", "admin", "--password-stdin", stdin=self.admin_password + "\n")

    def start_server(self, timeout: float = 30.0) -> None:
        """Start ``cmbuyer-server serve`` and wait for ``/healthz`` (:func:`spawn_server`, :func:`wait_healthy`)."""
        log = self.logs / "server.log"
        self.server = spawn_server(
            self.data_dir, self.server_port, log, self._env(), new_session=True, host=self.server_host
        )
        wait_healthy(self.server, self.server_port, log, timeout, base=self.url, ca=self.ca)

    def kill_server(self) -> None:
        """SIGKILL the server (crash tests)."""
        if self.server is not None:
            self.server.kill()
            self.server.wait(timeout=30)
            self.server = None

    def start_sim(self, serials: list[str], scenario: Path, latency: str | None = None) -> None:
        """Start ``cmbuyer-phonesim`` on a free port with ``serials`` and wait for ``ready``."""
        args = [
            str(BIN / "cmbuyer-phonesim"),
            "--port",
            "0",
            "--scenario",
            str(scenario),
            "--journal",
            str(self.data_dir / "phones.jsonl"),
        ]
        for serial in serials:
            args += ["--serial", serial]
        if latency:
            args += ["--latency", latency]
        with (self.logs / "phonesim.log").open("ab") as log:
            self.sim = subprocess.Popen(
                args, stdout=subprocess.PIPE, stderr=log, text=True, env=self._env(), start_new_session=True
            )
        assert self.sim.stdout is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.sim.stdout.readline()
            if not line:
                raise StackError(f"手机模拟器已退出；见 {self.logs / 'phonesim.log'}")
            if line.startswith("listening "):
                self.sim_port = int(line.rsplit(":", 1)[1])
            if line.strip() == "ready":
                return
        raise StackError("手机模拟器没有就绪")

    def add_device(self, serial: str) -> Path:
        """Register a device for ``serial`` and write its credentials file (0600); returns the path."""
        issued = self.cli("device", "add", "--name", serial)
        self.serial_of[issued["device_id"]] = serial
        path = self.data_dir / "agents" / f"{serial}.credentials"
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(f"device_id={issued['device_id']}\ntoken={issued['token']}\n")
        return path

    def stop_server(self) -> None:
        """Stop the server as systemd does (SIGTERM, wait); :meth:`start_server` serves the same data
        dir again (settings read only at start, e.g. ``CMBUYER_ALLOWED_APP_VERSIONS``, take effect)."""
        if self.server is not None:
            terminate([self.server], 15)
            self.server = None

    def agent_env(self) -> dict[str, str]:
        """The environment of an agent (and of an operator's ``cmbuyer-agent`` commands) on the phone
        host: adb pointed at the simulator, the agent state dir under the data dir."""
        return {
            **self._env(),
            "ANDROID_ADB_SERVER_PORT": str(self.sim_port),
            "CMBUYER_AGENT_STATE_DIR": str(self.data_dir / "agent-state"),
        }

    def start_agent(self, serial: str, extra_args: tuple[str, ...] = ()) -> None:
        """Start ``cmbuyer-agent run --device SERIAL [EXTRA_ARGS]`` against the server and the simulator."""
        creds = self.data_dir / "agents" / f"{serial}.credentials"
        with (self.logs / f"agent-{serial}.log").open("ab") as log:
            self.agents[serial] = subprocess.Popen(
                [
                    str(BIN / "cmbuyer-agent"),
                    "run",
                    "--device",
                    serial,
                    "--server",
                    self.url,
                    "--credentials-file",
                    str(creds),
                    *extra_args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.agent_env(),
                # its own session: a terminal's Ctrl-C reaches only the demo, which then stops each
                # child once (a second signal would make an agent stop at once)
                start_new_session=True,
            )

    def create_tasks(self, specs: list[TaskSpec]) -> None:
        """Create every task (DRAFT) and start them in one batch (PENDING + authorizations)."""
        for spec in specs:
            size = ["--size", spec.size] if spec.size is not None else []
            out = self.cli(
                "task",
                "add",
                "--title",
                spec.title,
                "--url",
                GOODS_URL.format(goods_id=spec.goods_id),
                "--color",
                spec.color,
                *size,
                "--quantity",
                str(spec.quantity),
                "--max-total-price",
                spec.max_total_price,
            )
            spec.task_id = out["task_id"]
        self.cli("task", "start", *[s.task_id for s in specs])

    def task_details(self, specs: list[TaskSpec]) -> dict[str, dict[str, Any]]:
        """``{task_id: task_view.task_detail(...)}`` read on a separate connection."""
        conn = connect_sync(self.data_dir / "cmbuyer.sqlite3", read_only=True)
        try:
            return {s.task_id: task_view.task_detail(conn, s.task_id) for s in specs}
        finally:
            conn.close()

    def phone_journal(self) -> list[dict[str, Any]]:
        """Every entry the simulator journaled (JSON lines)."""
        path = self.data_dir / "phones.jsonl"
        return read_journal(path) if path.exists() else []

    def stop_agents(self) -> None:
        """SIGTERM every agent (they stop after the current step), then SIGKILL stragglers."""
        terminate(list(self.agents.values()), 20)
        self.agents.clear()

    def dead(self) -> list[str]:
        """One line per child process that has exited on its own — which one, its exit code and its log —
        so the demo can say so instead of waiting for tasks that can no longer move."""
        children: list[tuple[str, subprocess.Popen[Any] | None, str]] = [
            ("服务器", self.server, "server.log"),
            ("手机模拟器", self.sim, "phonesim.log"),
            *((f"代理 {serial}", proc, f"agent-{serial}.log") for serial, proc in self.agents.items()),
        ]
        return [
            f"{name} 已退出（退出码 {proc.returncode}）；见 {self.logs / log}"
            for name, proc, log in children
            if proc is not None and proc.poll() is not None
        ]

    def stop(self) -> None:
        """Stop agents, then the simulator and the server."""
        self.stop_agents()
        terminate([p for p in (self.sim, self.server) if p is not None], 15)
        if self.sim is not None and self.sim.stdout is not None:
            self.sim.stdout.close()
        self.sim = None
        self.server = None

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def terminate(procs: list[subprocess.Popen[Any]], grace: float) -> None:
    """SIGTERM every process still running, wait up to ``grace`` seconds in all, then SIGKILL the rest."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
