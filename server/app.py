"""The aiohttp application factory (``create_app``) and start-up order (design §2.7).

Start-up: open the database, refuse a schema that is not current, verify the claim-token secret
against existing claims, run recovery (expiry sweep) — and only then serve. Each route group module
has a ``setup(app)``; start-up checks and periodic steps register themselves in
``app[STARTUP_CHECKS]`` and ``app[PERIODIC]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from cmbuyer.server import migrate
from cmbuyer.server.clock import Clock, SystemClock
from cmbuyer.server.config import Settings
from cmbuyer.server.db import Database, connect_sync
from cmbuyer.server.web import admin, device_api, health
from cmbuyer.server.web.edge import (
    GUARD,
    ConnectionGuard,
    RateLimitedExceptionHandler,
    install_connection_guard,
    refusal_middleware,
)
from cmbuyer.server.web.hardening import harden_error_pages
from cmbuyer.server.web.keys import CLOCK, DB, SETTINGS

log = logging.getLogger("cmbuyer.server")

StartupCheck = Callable[[web.Application], Awaitable[None]]
STARTUP_CHECKS = web.AppKey("startup_checks", list)
PERIODIC = web.AppKey("periodic", list)


class StartupRefused(Exception):
    """The server must not start (schema, secret or recovery problem); the message is one line."""


def check_schema(settings: Settings) -> None:
    """Raise StartupRefused unless the DB file exists and its migrations match the code exactly."""
    if not settings.db_path.exists():
        raise StartupRefused(f"database {settings.db_path} does not exist; run `cmbuyer-server init`")
    conn = connect_sync(settings.db_path)
    try:
        migrate.check_current(conn)
    except migrate.MigrationError as exc:
        raise StartupRefused(str(exc)) from None
    finally:
        conn.close()


def create_app(settings: Settings, clock: Clock | None = None) -> web.Application:
    """Build the application. Raises StartupRefused (from the startup hook) when it must not serve.

    ``clock`` defaults to the system clock; tests inject a ManualClock.
    """
    harden_error_pages()
    install_connection_guard()
    app = web.Application(client_max_size=settings.evidence_limits.request_cap, middlewares=[refusal_middleware])
    app[GUARD] = ConnectionGuard(
        settings.pending_connections_max, settings.pending_connections_per_address, settings.pending_connection_timeout
    )
    app[SETTINGS] = settings
    app[CLOCK] = clock or SystemClock()
    app[DB] = Database(settings.db_path)
    app[STARTUP_CHECKS] = []
    app[PERIODIC] = []
    health.setup(app)
    admin.setup(app)
    device_api.setup(app)
    app.cleanup_ctx.append(_lifecycle)
    return app


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    check_schema(settings)
    db = app[DB]
    await db.open()
    tasks: list[asyncio.Task[None]] = []
    loop = asyncio.get_running_loop()
    previous_handler = loop.get_exception_handler()
    loop.set_exception_handler(RateLimitedExceptionHandler(previous_handler))
    try:
        for check in app[STARTUP_CHECKS]:
            await check(app)
        for step in app[PERIODIC]:
            tasks.append(asyncio.create_task(_every(step, app, settings.sweep_interval)))
        yield
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        loop.set_exception_handler(previous_handler)
        await db.close()


async def _every(step: Callable[[web.Application], Awaitable[None]], app: web.Application, seconds: int) -> None:
    while True:
        await asyncio.sleep(seconds)
        try:
            await step(app)
        except Exception:  # a failed sweep must not kill the loop; it is retried next period
            log.exception("periodic step %s failed", getattr(step, "__name__", step))
