"""Process-wide hardening of aiohttp's own low-level error pages.

When aiohttp cannot parse a request (bad request line, bad header, a body shorter than its
Content-Length followed by pipelined bytes …) it answers from ``RequestHandler.handle_error`` with a
text body that repeats the parser's message — and that message quotes the offending request bytes.
On a device route those bytes may hold a claim token or a Bearer token, and the API (docs/api.md "Request bodies")
forbids echoing them. aiohttp offers no hook for these pages, so :func:`harden_error_pages` wraps the method once
so that a 4xx carries only its reason phrase. 5xx pages are already fixed texts (no traceback unless
debug mode, which we never enable). The wrapped method is private: pyproject.toml bounds aiohttp below
its next minor release and tests/server/web/test_aiohttp_internals.py pins what the wrapper
relies on (the method's signature, the writer's ``output_size``).

A Content-Encoding the parser itself cannot decode (``br``, ``zstd`` without their optional
libraries) fails in the parser, before routing and before any body byte reaches a handler; it gets
415 like every other non-``identity`` encoding (the edge rule of :mod:`.edge`), not a 400.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from aiohttp import http_exceptions, web, web_protocol

log = logging.getLogger("cmbuyer.http")

_MARK = "_cmbuyer_hardened"


def harden_error_pages() -> None:
    """Make aiohttp's parser-error responses fixed texts (idempotent)."""
    handler_cls: Any = web_protocol.RequestHandler
    if getattr(handler_cls.handle_error, _MARK, False):
        return
    original = handler_cls.handle_error

    def handle_error(
        self: Any, request: Any, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> Any:
        if isinstance(exc, http_exceptions.ContentEncodingError):
            status = 415
        if 400 <= status < 500 and request.writer.output_size == 0:
            # A client's malformed request: answer a fixed text and log one line without the
            # parser's message (which quotes the request bytes) instead of a traceback at ERROR.
            log.info("rejected a malformed request from %s (%d)", request.remote, status)
            response = web.Response(status=status, text=HTTPStatus(status).phrase, content_type="text/plain")
            response.force_close()
            return response
        return original(self, request, status, exc, message)

    setattr(handle_error, _MARK, True)
    handler_cls.handle_error = handle_error
