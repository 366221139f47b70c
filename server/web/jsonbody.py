"""The strict JSON body reader shared by every device route (docs/api.md "Conventions").

Order: Content-Type (``application/json``, optional ``charset=utf-8`` only) else 415; declared length
over the cap → 413 without reading; read at most cap+1 bytes (chunked bodies too) else 413; strict
UTF-8 without BOM; JSON with no duplicate keys, no NaN/Infinity, no floats, no trailing data, an
object at the top; lone surrogates refused; then the wire schema from ``shared/schemas/``. Every
failure raises :class:`DeviceHTTPError` with a fixed code; nothing is echoed back.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from aiohttp import web

from cmbuyer.schemas import SchemaError, validate
from cmbuyer.schemas.strictjson import StrictJSONError, loads_strict
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.web.device_errors import DeviceHTTPError
from cmbuyer.server.web.edge import BODY_READ_TIMEOUT_S, read_chunk

DEFAULT_CAP = 4096
READ_TIMEOUT_S = BODY_READ_TIMEOUT_S
_CONTENT_TYPE = re.compile(rb"application/json(?:[ \t]*;[ \t]*charset=(?:\"utf-8\"|utf-8))?", re.IGNORECASE)


def check_content_type(raw_headers: tuple[tuple[bytes, bytes], ...]) -> None:
    """Exactly one Content-Type that is ``application/json`` with at most ``charset=utf-8``; else 415."""
    values = [v for k, v in raw_headers if k.lower() == b"content-type"]
    if len(values) != 1 or _CONTENT_TYPE.fullmatch(values[0].strip()) is None:
        raise DeviceHTTPError(Code.UNSUPPORTED_MEDIA_TYPE)


def decode_json(raw: bytes) -> dict[str, Any]:
    """Strictly decode a JSON object from bytes; raises DeviceHTTPError(Code.INVALID_REQUEST)."""
    try:
        value = loads_strict(raw)
    except StrictJSONError:
        raise DeviceHTTPError(Code.INVALID_REQUEST) from None
    if not isinstance(value, dict):
        raise DeviceHTTPError(Code.INVALID_REQUEST)
    return value


async def read_body(request: web.Request, cap: int) -> bytes:
    """Read at most ``cap`` bytes of body; 413 beyond, without reading past cap+1; 400 on a stall."""
    if request.content_length is not None and request.content_length > cap:
        raise DeviceHTTPError(Code.REQUEST_TOO_LARGE)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(READ_TIMEOUT_S):
            while True:
                chunk = await read_chunk(request, cap + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > cap:
                    raise DeviceHTTPError(Code.REQUEST_TOO_LARGE)
    except TimeoutError:
        raise DeviceHTTPError(Code.INVALID_REQUEST) from None
    except web.HTTPException:
        raise DeviceHTTPError(Code.INVALID_REQUEST) from None
    return b"".join(chunks)


async def read_json(request: web.Request, schema: str, cap: int = DEFAULT_CAP) -> dict[str, Any]:
    """Content-Type → size → strict decode → schema ``schema`` (e.g. ``"claim_next.request"``)."""
    check_content_type(request.raw_headers)
    value = decode_json(await read_body(request, cap))
    try:
        validate(schema, value)
    except SchemaError:
        raise DeviceHTTPError(Code.INVALID_REQUEST) from None
    return value
