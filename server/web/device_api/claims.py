"""Device routes (being written; see the issue in progress)."""

from __future__ import annotations

from aiohttp import web


def setup(app: web.Application) -> None:
    """Register this group's routes."""
