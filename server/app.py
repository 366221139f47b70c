"""The aiohttp application factory (``create_app``): the app's state, its route groups and its lifespan.

What runs before serving (schema check, database, claim-secret check, recovery) and while serving (the
sweeps) is listed, in order, in :mod:`cmbuyer.server.lifecycle`; this module only builds the app and hands
it :func:`cmbuyer.server.lifecycle.lifespan`. Each route group module has a ``setup(app)`` that registers
routes and nothing else.
"""

from __future__ import annotations

from aiohttp import web

from cmbuyer.server import lifecycle
from cmbuyer.server.clock import Clock, SystemClock
from cmbuyer.server.config import Settings
from cmbuyer.server.db import Database
from cmbuyer.server.web import access_log, admin, device_api, health, metrics
from cmbuyer.server.web.access_log import access_middleware
from cmbuyer.server.web.edge import GUARD, ConnectionGuard, install_connection_guard, refusal_middleware
from cmbuyer.server.web.hardening import harden_error_pages
from cmbuyer.server.web.keys import CLOCK, DB, SETTINGS


def create_app(settings: Settings, clock: Clock | None = None) -> web.Application:
    """Build the application. Starting it raises :class:`~cmbuyer.server.domain.errors.StartupRefused` (from
    the lifespan) when it must not serve.

    ``clock`` defaults to the system clock; tests inject a ManualClock.
    """
    harden_error_pages()
    install_connection_guard()
    app = web.Application(
        client_max_size=settings.evidence_limits.request_cap, middlewares=[access_middleware, refusal_middleware]
    )
    app[GUARD] = ConnectionGuard(
        settings.pending_connections_max,
        settings.pending_connections_per_address,
        settings.pending_connection_timeout,
        settings.device_connections_max,
    )
    app[SETTINGS] = settings
    app[CLOCK] = clock or SystemClock()
    app[DB] = Database(settings.db_path, replicated=settings.replica_url is not None)
    access_log.setup(app)
    health.setup(app)
    metrics.setup(app)
    admin.setup(app)
    device_api.setup(app)
    app.cleanup_ctx.append(lifecycle.lifespan)
    return app
