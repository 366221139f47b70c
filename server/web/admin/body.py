"""Reading an admin request body: a form or a JSON object, capped in size and time (docs/admin.md
"Identity and sessions"). Refusals: 415 another type, 413 over :data:`BODY_CAP`, 400 too slow or malformed."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

from cmbuyer.schemas.strictjson import loads_strict
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import refusal
from cmbuyer.server.web.edge import BODY_READ_TIMEOUT_S, read_chunk

BODY_CAP = 256 * 1024
FORM_TYPE = re.compile(r"application/x-www-form-urlencoded(?:\s*;\s*charset=\"?utf-8\"?)?", re.I | re.ASCII)
JSON_TYPE = re.compile(r"application/json(?:\s*;\s*charset=\"?utf-8\"?)?", re.I | re.ASCII)


@dataclass
class Body:
    """A decoded admin request body: ``kind`` is "form" or "json"; ``form`` keeps every value of each
    field (repeats are visible), ``json`` is the decoded object."""

    kind: str
    form: dict[str, list[str]] = field(default_factory=dict)
    json: dict[str, Any] = field(default_factory=dict)

    def one(self, name: str, default: str | None = None) -> str | None:
        """A single-valued form field; a repeated field is refused (400)."""
        values = self.form.get(name)
        if not values:
            return default
        if len(values) != 1:
            raise refusal(Code.INVALID_REQUEST, f"字段 {name} 重复")
        return values[0]


async def _read_capped(request: web.Request) -> bytes:
    """At most BODY_CAP + 1 body bytes within BODY_READ_TIMEOUT_S (edge rule), else 400."""
    try:
        async with asyncio.timeout(BODY_READ_TIMEOUT_S):
            raw = await read_chunk(request, BODY_CAP + 1)
            while len(raw) <= BODY_CAP and not request.content.at_eof():
                chunk = await read_chunk(request, BODY_CAP + 1 - len(raw))
                if not chunk:
                    break
                raw += chunk
    except TimeoutError:
        raise refusal(Code.INVALID_REQUEST, "请求体发送过慢，已放弃") from None
    except web.HTTPException:
        raise refusal(Code.INVALID_REQUEST, "请求格式错误") from None
    return raw


async def read_body(request: web.Request) -> Body:
    """Read a form or JSON body of at most :data:`BODY_CAP` bytes within the edge's body time limit.
    415 for other types, 413 over the cap, 400 for a too slow body, bad UTF-8, duplicate JSON keys,
    floats/NaN or trailing data. (A Content-Encoding other than identity was refused earlier, 415.)"""
    ctype = request.headers.get("Content-Type", "").strip()
    is_form = FORM_TYPE.fullmatch(ctype) is not None
    is_json = JSON_TYPE.fullmatch(ctype) is not None
    if not (is_form or is_json):
        if request.content_length in (None, 0) and not request.body_exists:
            return Body("form")
        raise refusal(Code.UNSUPPORTED_MEDIA_TYPE, "只接受表单或 JSON 请求")
    if request.content_length is not None and request.content_length > BODY_CAP:
        raise refusal(Code.REQUEST_TOO_LARGE, "请求过大")
    raw = await _read_capped(request)
    if len(raw) > BODY_CAP:
        raise refusal(Code.REQUEST_TOO_LARGE, "请求过大")
    try:
        if is_json:
            value = loads_strict(raw)
            if not isinstance(value, dict):
                raise ValueError("not an object")
            return Body("json", json=value)
        text = raw.decode("ascii")
        form: dict[str, list[str]] = {}
        for key, value in parse_qsl(
            text, keep_blank_values=True, encoding="utf-8", errors="strict", max_num_fields=2000
        ):
            form.setdefault(key, []).append(value)
        return Body("form", form=form)
    except (UnicodeError, ValueError, RecursionError):
        raise refusal(Code.INVALID_REQUEST, "请求格式错误") from None
