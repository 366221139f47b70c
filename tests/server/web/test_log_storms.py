"""Repeated event-loop errors are logged at most once per interval ("Too many open
files" from accept filled 300 MB of log in 20 s). Unit tests of edge.RateLimitedExceptionHandler on
a real event loop; the server-level proof is test_slow_bodies' bounded log."""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from typing import Any

import pytest

from cmbuyer.server.web.edge import RateLimitedExceptionHandler, RateLimitedLog

# log rate limits over time windows: alone (pytest -m serial)
pytestmark = pytest.mark.serial


def _accept_error() -> dict[str, Any]:
    return {
        "message": "socket.accept() out of system resource",
        "exception": OSError(errno.EMFILE, "Too many open files"),
    }


def test_accept_errors_are_one_line_each_interval_without_traceback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="test.storm")
    handler = RateLimitedExceptionHandler(logger=logging.getLogger("test.storm"), interval=3600)
    loop = asyncio.new_event_loop()
    try:
        for _ in range(10_000):
            handler(loop, _accept_error())
    finally:
        loop.close()
    assert len(caplog.records) == 1
    assert "Too many open files" in caplog.records[0].getMessage() and caplog.records[0].exc_info is None


def test_other_errors_reach_the_previous_handler_once_then_count(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="test.storm")
    seen: list[dict[str, Any]] = []
    handler = RateLimitedExceptionHandler(
        lambda loop, ctx: seen.append(ctx), logging.getLogger("test.storm"), interval=0.05
    )
    loop = asyncio.new_event_loop()
    try:
        for _ in range(500):
            handler(loop, {"message": "boom", "exception": ValueError("x")})
        handler(loop, {"message": "other", "exception": KeyError("y")})
        assert len(seen) == 2  # the first of each distinct error, with its exception for the traceback
        time.sleep(0.06)
        handler(loop, {"message": "boom", "exception": ValueError("x")})
    finally:
        loop.close()
    assert len(seen) == 3
    assert [r.getMessage() for r in caplog.records] == ["499 more event-loop errors like the next one in the last 0s"]


def test_rate_limited_log_counts_swallowed_lines(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="test.storm")
    limited = RateLimitedLog(logging.getLogger("test.storm"), interval=0.05)
    for _ in range(100):
        limited.log(logging.WARNING, "closing %s", "x")
    time.sleep(0.06)
    limited.log(logging.WARNING, "closing %s", "x")
    assert [r.getMessage() for r in caplog.records] == ["closing x", "closing x (and 99 more like this in the last 0s)"]
