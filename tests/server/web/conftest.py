"""Fixtures of the HTTP-edge tests (server/web/: edge.py, device_auth.py, hardening.py): raw-socket
exchanges with the real aiohttp server of tests/server/conftest.py and the admin login fixtures of
tests/server/admin. Raw sockets because the client libraries refuse or rewrite exactly the requests under test
(bogus Content-Encoding, bodies streamed after the answer, half-sent headers)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from tests.server.admin.conftest import admin, admin_client  # noqa: F401 — fixtures reused here


@dataclass
class RawAnswer:
    """One HTTP/1.1 answer read from a raw socket."""

    status: int
    headers: dict[str, str]
    body: bytes


def address(client: Any) -> tuple[str, int]:
    """Host and port of a pytest-aiohttp client's server."""
    return client.server.host, client.server.port


async def read_answer(reader: asyncio.StreamReader, within: float = 5.0) -> RawAnswer:
    """Read one response (status line, headers, Content-Length body) within ``within`` seconds."""
    async with asyncio.timeout(within):
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    return RawAnswer(status, headers, body)


async def exchange(client: Any, raw: bytes, within: float = 5.0) -> RawAnswer:
    """Send ``raw`` on a fresh connection and read one answer."""
    reader, writer = await asyncio.open_connection(*address(client))
    try:
        writer.write(raw)
        await writer.drain()
        return await read_answer(reader, within)
    finally:
        writer.close()


def request(method: str, path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    """Bytes of one HTTP/1.1 request with a Content-Length (``headers`` may override anything)."""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    merged = {"Content-Length": str(len(body)), **headers}
    lines += [f"{k}: {v}" for k, v in merged.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + body
