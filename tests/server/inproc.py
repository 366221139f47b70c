"""The in-thread real-server harness: the real aiohttp app (``create_app``: real SQLite file, group-committed
writer, start-up recovery) served on a loopback port from a background thread with its own event loop and a
``ManualClock``, plus a tiny synchronous HTTP client.

Synchronous callers use it: Hypothesis state machines and route fuzzing (they drive the device API over real
HTTP and move the server's clock between steps), and the agent's integration tests (``HttpDeviceApi`` is
synchronous urllib, so it cannot share a test's event loop; tests/agent/realserver.py builds on this class).
Its subprocess counterpart is tests/server/submissions/live.py (``cmbuyer-server serve``)."""

from __future__ import annotations

import asyncio
import dataclasses
import http.client
import threading
from typing import Any

from aiohttp import web

from cmbuyer.server.app import create_app
from cmbuyer.server.clock import ManualClock
from cmbuyer.server.config import Settings
from cmbuyer.server.lifecycle import run_sweep


class InProcServer:
    """``start()`` serves ``settings``' data dir on 127.0.0.1 (a free port the first time, the same port after a
    :meth:`stop`, like a server going down and coming back); ``stop()`` shuts the app down and joins the thread.

    ``manual_sweep`` (default): no periodic sweeper on a real timer, the test sweeps with :meth:`sweep`
    (deterministic interleavings); ``False`` keeps the settings' sweep interval."""

    def __init__(self, settings: Settings, clock: ManualClock, *, manual_sweep: bool = True) -> None:
        self.settings = dataclasses.replace(settings, sweep_interval=3600) if manual_sweep else settings
        self.clock = clock
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.runner: web.AppRunner | None = None
        self.app: web.Application | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Serve until :meth:`stop`; re-raises what the app's start-up raised (``RuntimeError`` when it did not
        answer within 30 s)."""
        ready = threading.Event()
        errors: list[BaseException] = []
        loop = asyncio.new_event_loop()
        self.loop = loop

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._start())
            except BaseException as exc:  # surfaced by start() in the caller's thread
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()

        self.thread = threading.Thread(target=run, name="inproc-server", daemon=True)
        self.thread.start()
        started = ready.wait(30)
        if errors or not started:
            self.thread.join(10)
            loop.close()
            self.loop = None
            raise errors[0] if errors else RuntimeError("in-process server did not start")

    async def _start(self) -> None:
        self.app = create_app(self.settings, self.clock)
        self.runner = web.AppRunner(self.app, access_log=None, handler_cancellation=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def call(self, coro: Any, timeout: float = 30) -> Any:
        """Run ``coro`` on the server's loop and return its result (``timeout`` seconds at most)."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def sweep(self) -> Any:
        assert self.app is not None
        return self.call(run_sweep(self.app))

    def stop(self) -> None:
        """Shut the app down (its clean-up: writer, sweeper, connections) and join the thread; a no-op when
        stopped. :meth:`start` again serves the same data dir on the same port."""
        if self.loop is None:
            return
        if self.runner is not None:
            self.call(self.runner.cleanup())
            self.runner = None
        self.loop.call_soon_threadsafe(self.loop.stop)
        assert self.thread is not None
        self.thread.join(10)
        self.loop.close()
        self.loop = None
        self.thread = None

    def request(
        self, path: str, headers: dict[str, str], body: bytes, content_type: str = "application/json"
    ) -> tuple[int, bytes]:
        """``POST path`` with ``body``; returns (status, response body)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": content_type, **headers})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()
