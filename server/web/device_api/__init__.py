"""The device API of spec 002 (§二 设备侧接口): every route authenticates first (device_auth), reads its
body with the strict reader (jsonbody) and runs one use-case transaction."""

from __future__ import annotations

from aiohttp import web


def setup(app: web.Application) -> None:
    """Register every device route group."""
    from cmbuyer.server.web.device_api import attempts, claims, supervision

    claims.setup(app)
    attempts.setup(app)
    supervision.setup(app)
