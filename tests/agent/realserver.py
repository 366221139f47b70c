"""The REAL cmbuyer server for agent integration tests.

:class:`RealServer` builds a data dir with the real ``cmbuyer-server init``, then serves it with the suite's
in-thread harness (tests/server/inproc.py ``InProcServer``: the real aiohttp app, real SQLite file,
group-committed writer, start-up recovery, on 127.0.0.1:<free port> from a background thread) — the agent's
``HttpDeviceApi`` is synchronous (urllib), so it cannot share the test's loop. Devices and tasks are
created through the same service functions the admin CLI uses. The server clock is a
``ManualClock`` started at the real current time, so a test can move server time (lease expiry)
while everything else is real; the settings' periodic sweeper runs as in production.

Checks read the database on a separate connection (it sees only what committed).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cmbuyer.agent.client import Credentials
from cmbuyer.server.clock import ManualClock
from cmbuyer.server.config import Settings, load_settings
from cmbuyer.server.db import connect_sync, run_in_transaction
from cmbuyer.server.display import task_view
from cmbuyer.server.services import devices as device_service
from cmbuyer.server.tx.common import Actor
from tests.server.conftest import create_task
from tests.server.datadir import init_data_dir
from tests.server.inproc import InProcServer

ACTOR = Actor("cli", "agent-tests")


@dataclass(frozen=True)
class TaskRef:
    id: str
    version: int


class RealServer:
    """``with RealServer(tmp_path) as srv: srv.url ...`` — stopped (and joined) on exit."""

    def __init__(self, root: Path, env: dict[str, str] | None = None) -> None:
        self.data_dir = root / "server-data"
        # supervision off unless a test asks for it: the agent suites fence without a person
        self._env = {"CMBUYER_SUPERVISED_ORDERS": "0", **(env or {})}
        self.clock = ManualClock(datetime.now(UTC))
        self.settings: Settings | None = None
        self._server: InProcServer | None = None
        self._conn: sqlite3.Connection | None = None

    # --- lifecycle ---------------------------------------------------------------------------
    def init(self) -> RealServer:
        init_data_dir(self.data_dir)
        self.settings = load_settings(self.data_dir, environ=self._env)
        self._conn = connect_sync(self.settings.db_path)
        return self

    def start(self) -> RealServer:
        if self.settings is None:
            self.init()
        if self._server is None:
            assert self.settings is not None
            self._server = InProcServer(self.settings, self.clock, manual_sweep=False)
        self._server.start()
        return self

    def stop(self) -> None:
        """Stop serving (like a server going down); :meth:`start` again serves the same data dir
        on the same port."""
        if self._server is not None:
            self._server.stop()

    def close(self) -> None:
        self.stop()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> RealServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        """The loopback port it serves on (0 before the first start)."""
        return self._server.port if self._server is not None else 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def conn(self) -> sqlite3.Connection:
        assert self._conn is not None
        return self._conn

    # --- data --------------------------------------------------------------------------------
    def add_device(self, name: str = "sim-1") -> Credentials:
        issued = run_in_transaction(self.conn, lambda c: device_service.add_device(c, name, ACTOR, self.clock.now()))
        return Credentials(issued.device_id, issued.token)

    def revoke_device(self, device_id: str) -> None:
        run_in_transaction(self.conn, lambda c: device_service.revoke_device(c, device_id, ACTOR, self.clock.now()))

    def add_task(self, *, start: bool = True, **fields: Any) -> TaskRef:
        """:func:`tests.server.conftest.create_task` on this server's connection, clock and settings, as
        ``ACTOR``; ``fields`` are its keyword arguments (goods_id, color, size, quantity, max_total_price,
        title) with its defaults, but the task is started (PENDING + ACTIVE authorization) unless
        ``start=False``. Returns the stored task's id and version."""
        assert self.settings is not None
        task = create_task(self.conn, self.settings, self.clock, actor=ACTOR, start=start, **fields)
        return TaskRef(task.id, task.version)

    def detail(self, task_id: str) -> dict[str, Any]:
        """``task_view.task_detail`` on the test's own connection (committed state only)."""
        return task_view.task_detail(self.conn, task_id)

    def state(self, task_id: str) -> str:
        return str(self.detail(task_id)["task"]["state"])

    def device_row(self, device_id: str) -> dict[str, Any]:
        cur = self.conn.execute("SELECT * FROM devices WHERE id=?", (device_id,))
        cols = [d[0] for d in cur.description]
        row = cur.fetchone()
        return dict(zip(cols, row, strict=True)) if row else {}
