"""The real aiohttp app served on a loopback port from a background thread with a ManualClock, plus
a tiny synchronous HTTP client — so a Hypothesis state machine (synchronous) can drive the device API
over real HTTP and move the server's clock between steps, and restart the server on the same DB."""

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
    def __init__(self, settings: Settings, clock: ManualClock) -> None:
        # no periodic sweeper on a real timer: the machine sweeps explicitly (deterministic interleavings)
        self.settings = dataclasses.replace(settings, sweep_interval=3600)
        self.clock = clock
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.runner: web.AppRunner | None = None
        self.app: web.Application | None = None
        self.port = 0

    def start(self) -> None:
        ready = threading.Event()
        self.loop = asyncio.new_event_loop()

        def run() -> None:
            assert self.loop is not None
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self._start())
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        if not ready.wait(30):
            raise RuntimeError("in-process server did not start")

    async def _start(self) -> None:
        self.app = create_app(self.settings, self.clock)
        self.runner = web.AppRunner(self.app, access_log=None, handler_cancellation=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def call(self, coro: Any, timeout: float = 30) -> Any:
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def sweep(self) -> Any:
        assert self.app is not None
        return self.call(run_sweep(self.app))

    def stop(self) -> None:
        if self.loop is None:
            return
        if self.runner is not None:
            self.call(self.runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        assert self.thread is not None
        self.thread.join(10)
        self.loop.close()
        self.loop = None

    def request(
        self, path: str, headers: dict[str, str], body: bytes, content_type: str = "application/json"
    ) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": content_type, **headers})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()
