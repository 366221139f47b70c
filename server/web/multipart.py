"""A strict, streaming ``multipart/form-data`` reader with hard caps (docs/api.md
"POST /api/v1/tasks/{id}/evidence"). ``request.post()`` is never used: it buffers and accepts far too much.

What is accepted, exactly:

- one ``Content-Type: multipart/form-data; boundary=<1–70 RFC 2046 chars>`` header (quoted or not,
  no other parameters) — else 415 ``unsupported_media_type``;
- a declared ``Content-Length`` above the total cap → 413 before any byte is read; the body (chunked
  or not) is read incrementally and refused with 413 the moment it passes the total cap;
- the body starts directly with ``--boundary CRLF`` (no preamble) and ends with ``--boundary--``
  optionally followed by one CRLF (no epilogue);
- every part has at most ``max_header_bytes`` of headers, only ``Content-Disposition`` (required,
  ``form-data; name="…"`` with optional ``filename``/``filename*`` whose values are never used) and
  ``Content-Type``; any other part header (``Content-Transfer-Encoding``, ``Content-Encoding``,
  ``Content-Length`` …), a repeated header, obs-folding or non-ASCII header bytes → 400;
- the field names are exactly the expected set, each once; the file field must carry the expected
  ``Content-Type`` (``image/png`` for evidence) and is the only part that may have a filename; text fields
  may carry ``text/plain`` (optionally ``charset=utf-8``) and must be UTF-8;
- per-part caps: ``max_field_bytes`` for text fields, ``max_file_bytes`` for the file → 413 beyond;
- at most ``len(fields) + 1`` parts; every read waits at most ``stall_timeout`` s and the whole body
  at most ``total_timeout`` s → 400 (a stalled client cannot hold a worker forever).

Memory: the reader holds at most one part plus one read chunk; the largest part is the file
(≤ ``max_file_bytes``). Every failure raises :class:`DeviceHTTPError` with a fixed code.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field

from aiohttp import web

from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.evidence_limits import EvidenceLimits
from cmbuyer.server.web.device_errors import DeviceHTTPError
from cmbuyer.server.web.edge import BODY_READ_TIMEOUT_S, read_chunk

STALL_TIMEOUT_S = BODY_READ_TIMEOUT_S
TOTAL_TIMEOUT_S = 120.0
_READ_CHUNK = 1 << 16

_CONTENT_TYPE = re.compile(
    rb"multipart/form-data[ \t]*;[ \t]*boundary=(?:\"([0-9A-Za-z'()+_,./:=? -]{0,69}[0-9A-Za-z'()+_,./:=?-])\""
    rb"|([0-9A-Za-z'()+_,./:=?-]{1,70}))[ \t]*",
    re.IGNORECASE,
)
_HEADER_NAME = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_DISPOSITION = re.compile(r'form-data((?:[ \t]*;[ \t]*[A-Za-z*]+=(?:"[^"\\\r\n]*"|[^";\s]+))*)[ \t]*', re.IGNORECASE)
_PARAM = re.compile(r'[ \t]*;[ \t]*([A-Za-z*]+)=("[^"\\\r\n]*"|[^";\s]+)')
_TEXT_PLAIN = re.compile(r"text/plain(?:[ \t]*;[ \t]*charset=(?:utf-8|\"utf-8\"))?", re.IGNORECASE)


def _bad() -> DeviceHTTPError:
    return DeviceHTTPError(Code.INVALID_REQUEST)


def _too_large() -> DeviceHTTPError:
    return DeviceHTTPError(Code.REQUEST_TOO_LARGE)


@dataclass(frozen=True)
class Limits:
    """Hard caps of one form: bytes of the whole body, of the file, of one text field and of one
    part's headers; seconds of one stalled read and of the whole body."""

    max_total: int
    max_file_bytes: int
    max_field_bytes: int = 256
    max_header_bytes: int = 1024
    # browsers send a file name as raw UTF-8 inside Content-Disposition (WHATWG HTML's multipart encoding);
    # True accepts UTF-8 header values (the admin upload), False keeps headers ASCII (the device API)
    utf8_headers: bool = False
    stall_timeout: float = STALL_TIMEOUT_S
    total_timeout: float = TOTAL_TIMEOUT_S

    @classmethod
    def for_evidence(cls, limits: EvidenceLimits) -> Limits:
        """The caps of an evidence upload: the body at most ``limits.request_cap``, the file at most
        ``limits.max_bytes`` (server/domain/evidence_limits.py)."""
        # the timeouts are read here, per call, not bound as the class defaults were at import (tests shorten them)
        return cls(
            max_total=limits.request_cap,
            max_file_bytes=limits.max_bytes,
            stall_timeout=STALL_TIMEOUT_S,
            total_timeout=TOTAL_TIMEOUT_S,
        )


@dataclass
class Form:
    """The parsed form: text ``fields`` and the file's raw bytes (its filename is never kept)."""

    fields: dict[str, str] = field(default_factory=dict)
    file: bytes = b""


def boundary_from(raw_headers: tuple[tuple[bytes, bytes], ...]) -> bytes:
    """The boundary of exactly one ``multipart/form-data`` Content-Type header, else 415."""
    values = [v for k, v in raw_headers if k.lower() == b"content-type"]
    if len(values) != 1:
        raise DeviceHTTPError(Code.UNSUPPORTED_MEDIA_TYPE)
    m = _CONTENT_TYPE.fullmatch(values[0].strip())
    if m is None:
        raise DeviceHTTPError(Code.UNSUPPORTED_MEDIA_TYPE)
    return m.group(1) or m.group(2)


class _Stream:
    """Incremental reads from the request body with a total cap and timeouts."""

    def __init__(self, request: web.Request, limits: Limits) -> None:
        self._request = request
        self._limits = limits
        self._buf = bytearray()
        self._total = 0
        self._eof = False
        self._deadline = asyncio.get_running_loop().time() + limits.total_timeout

    async def _fill(self) -> bool:
        if self._eof:
            return False
        loop = asyncio.get_running_loop()
        wait = min(self._limits.stall_timeout, self._deadline - loop.time())
        if wait <= 0:
            raise _bad()
        try:
            async with asyncio.timeout(wait):
                chunk = await read_chunk(self._request, _READ_CHUNK)
        except TimeoutError:
            raise _bad() from None
        except web.HTTPException:
            raise _bad() from None
        if not chunk:
            self._eof = True
            return False
        self._total += len(chunk)
        if self._total > self._limits.max_total:
            raise _too_large()
        self._buf += chunk
        return True

    async def read_exact(self, n: int) -> bytes:
        while len(self._buf) < n:
            if not await self._fill():
                raise _bad()
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    async def read_until(self, delimiter: bytes, cap: int, *, too_large: bool) -> bytes:
        """Bytes before ``delimiter`` (consumed). More than ``cap`` bytes before it → 413 (or 400
        when ``too_large`` is False); EOF first → 400. The search resumes where it stopped."""
        start = 0
        while True:
            idx = self._buf.find(delimiter, start)
            if idx >= 0:
                if idx > cap:
                    raise _too_large() if too_large else _bad()
                out = bytes(self._buf[:idx])
                del self._buf[: idx + len(delimiter)]
                return out
            if len(self._buf) > cap + len(delimiter):
                raise _too_large() if too_large else _bad()
            start = max(0, len(self._buf) - len(delimiter) + 1)
            if not await self._fill():
                raise _bad()

    async def at_eof(self) -> bool:
        if self._buf:
            return False
        return not await self._fill()


def _parse_headers(block: bytes, *, utf8: bool = False) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in block.split(b"\r\n"):
        name, sep, value = line.partition(b":")
        if not sep or _HEADER_NAME.fullmatch(name) is None or not (utf8 or value.isascii()):
            raise _bad()
        key = name.decode("ascii").lower()
        if key in headers or key not in ("content-disposition", "content-type"):
            raise _bad()
        try:
            text = value.decode("utf-8" if utf8 else "ascii").strip(" \t")
        except UnicodeDecodeError:
            raise _bad() from None
        if any(ord(ch) < 0x20 and ch != "\t" for ch in text) or "\x7f" in text:
            raise _bad()
        headers[key] = text
    return headers


def _disposition(value: str) -> tuple[str, bool]:
    """``(name, has_filename)`` of a ``form-data`` disposition; 400 for anything else."""
    m = _DISPOSITION.fullmatch(value)
    if m is None:
        raise _bad()
    params: dict[str, str] = {}
    for pm in _PARAM.finditer(m.group(1)):
        key = pm.group(1).lower()
        if key in params or key not in ("name", "filename", "filename*"):
            raise _bad()
        params[key] = pm.group(2)
    name = params.get("name", "")
    if len(name) < 3 or not (name.startswith('"') and name.endswith('"')):
        raise _bad()
    return name[1:-1], ("filename" in params or "filename*" in params)


async def read_form(
    request: web.Request, *, fields: frozenset[str], file_field: str, file_type: str | frozenset[str], limits: Limits
) -> Form:
    """Read and check the whole form (see the module docstring). Call only after authentication.
    ``file_type`` is the file part's required Content-Type, or the set of those accepted (lower case)."""
    file_types = frozenset({file_type}) if isinstance(file_type, str) else file_type
    boundary = boundary_from(request.raw_headers)
    if request.content_length is not None and request.content_length > limits.max_total:
        raise _too_large()
    stream = _Stream(request, limits)
    if await stream.read_exact(len(boundary) + 4) != b"--" + boundary + b"\r\n":
        raise _bad()
    delimiter = b"\r\n--" + boundary
    form = Form()
    seen: set[str] = set()
    max_parts = len(fields) + 1
    while True:
        if len(seen) >= max_parts:
            raise _bad()
        block = await stream.read_until(b"\r\n\r\n", limits.max_header_bytes, too_large=False)
        headers = _parse_headers(block, utf8=limits.utf8_headers)
        name, has_filename = _disposition(headers.get("content-disposition", ""))
        if name in seen or (name != file_field and name not in fields):
            raise _bad()
        seen.add(name)
        ctype = headers.get("content-type")
        if name == file_field:
            if ctype is None or ctype.lower() not in file_types:
                raise _bad()
            form.file = await stream.read_until(delimiter, limits.max_file_bytes, too_large=True)
        else:
            if has_filename or (ctype is not None and _TEXT_PLAIN.fullmatch(ctype) is None):
                raise _bad()
            raw = await stream.read_until(delimiter, limits.max_field_bytes, too_large=True)
            try:
                form.fields[name] = raw.decode("utf-8", errors="strict")
            except UnicodeDecodeError:
                raise _bad() from None
        after = await stream.read_exact(2)
        if after == b"--":
            break
        if after != b"\r\n":
            raise _bad()
    # Closing delimiter seen: allow one CRLF, then the body must end.
    if not await stream.at_eof():
        if await stream.read_exact(2) != b"\r\n" or not await stream.at_eof():
            raise _bad()
    if seen != fields | {file_field}:
        raise _bad()
    return form
