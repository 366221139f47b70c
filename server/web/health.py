"""``GET /healthz``: the DB answers, migrations are current, the SQLite version. No secrets, no auth."""

from __future__ import annotations

import sqlite3

from aiohttp import web

from cmbuyer.server import migrate
from cmbuyer.server.db import StorageError
from cmbuyer.server.domain.errors import Unavailable
from cmbuyer.server.store.queries import health as health_queries
from cmbuyer.server.web.keys import DB


async def healthz(request: web.Request) -> web.Response:
    """200 ``{"status":"ok","sqlite_version":…,"migrations":"current"}``; 503 ``{"status":"unavailable"}``."""

    def probe(conn: sqlite3.Connection) -> str:
        pending, problems = migrate.status(conn)
        if pending or problems:
            raise StorageError("schema not current")
        return health_queries.sqlite_version(conn)

    try:
        version = await request.app[DB].read(probe)
    except (Unavailable, migrate.MigrationError):
        return web.json_response({"status": "unavailable"}, status=503)
    return web.json_response(
        {"status": "ok", "sqlite_version": version, "migrations": "current"}, headers={"Cache-Control": "no-store"}
    )


def setup(app: web.Application) -> None:
    """Register the health route."""
    app.router.add_get("/healthz", healthz)
