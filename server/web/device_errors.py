"""Device API responses: flat error bodies ``{"error": code}`` (docs/api.md "Conventions"), empty 401/503, and the
canonical JSON encoding used for every device body (so replays are byte-identical)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import DomainError
from cmbuyer.server.tx.common import canonical_json

NO_STORE = {"Cache-Control": "no-store"}


class DeviceHTTPError(DomainError):
    """A refusal the device edge decides while reading a request, before any service ran: ``code`` with its
    catalogue status, answered ``{"error": code}`` like any refusal (the upload routes catch this kind to close
    the connection instead of draining the rest of the body)."""

    def __init__(self, code: Code) -> None:
        super().__init__(str(code), code=code)


def error_response(status: int, code: str) -> web.Response:
    """``{"error": code}`` with the given status (fixed body: no echo of input, token, SQL or path)."""
    return web.Response(
        status=status, text=canonical_json({"error": code}), content_type="application/json", headers=NO_STORE
    )


def unauthorized() -> web.Response:
    """Empty 401 with ``WWW-Authenticate: Bearer`` — identical for every authentication failure."""
    return web.Response(status=401, headers={"WWW-Authenticate": "Bearer", **NO_STORE})


def unavailable() -> web.Response:
    """Empty 503 for storage failures (never 500, never a diagnostic)."""
    return web.Response(status=503, headers={"Retry-After": "1", **NO_STORE})


def json_body_response(status: int, body_text: str | None) -> web.Response:
    """A stored or fresh body as exact text (None → empty body, e.g. 204)."""
    if body_text is None:
        return web.Response(status=status, headers=NO_STORE)
    return web.Response(status=status, text=body_text, content_type="application/json", headers=NO_STORE)


def json_response(status: int, body: Any) -> web.Response:
    """Encode ``body`` canonically and answer it."""
    return json_body_response(status, canonical_json(body))
