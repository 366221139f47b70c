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
