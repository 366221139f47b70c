"""Typed application keys (aiohttp ``AppKey``) for the objects every route group needs."""

from __future__ import annotations

from aiohttp import web

from cmbuyer.server.clock import Clock
from cmbuyer.server.config import Settings
from cmbuyer.server.db import Database

SETTINGS = web.AppKey("settings", Settings)
DB = web.AppKey("db", Database)
CLOCK = web.AppKey("clock", Clock)
