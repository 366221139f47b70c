"""aiohttp's own parser-error pages must not echo request bytes (tokens) back (server/web/hardening.py)."""

from __future__ import annotations

import asyncio
from typing import Any


async def test_parse_error_does_not_echo_request_bytes(server_client: Any, caplog: Any) -> None:
    secret = "f" * 64
    reader, writer = await asyncio.open_connection(server_client.host, server_client.port)
    writer.write(f"POST /api/v1/tasks/claim-next HTTP/1.1\r\nHost: x\r\nBad Header {secret}\r\n\r\n".encode())
    await writer.drain()
    data = await asyncio.wait_for(reader.read(65536), 10)
    writer.close()
    await writer.wait_closed()
    assert data.split(b"\r\n", 1)[0].endswith(b" 400 Bad Request")
    assert secret.encode() not in data and b"Bad Header" not in data
    assert secret not in caplog.text


def test_log_redaction_covers_messages_and_tracebacks() -> None:
    import logging

    from cmbuyer.server.logs import JsonFormatter, RedactingFilter

    token = "ab" * 32
    try:
        raise ValueError(f"bad token {token}")
    except ValueError:
        import sys

        record = logging.LogRecord("t", logging.ERROR, __file__, 1, "got Bearer %s", (token,), sys.exc_info())
    assert RedactingFilter().filter(record)
    text = logging.Formatter().format(record)
    assert token not in text and "***" in text
    assert token not in JsonFormatter().format(record)
