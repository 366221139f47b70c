"""``GET /evidence/{asset_id}`` (docs/admin.md "Evidence") and ``GET /device-screens/{screen_id}`` (a phone's
screenshot for 查看当前屏幕): internal screenshots for logged-in admins only, by the same rules.

Order of checks: no valid session → 401 before any lookup (existence never leaks); malformed id,
unknown id, missing/unreadable file, or a file whose SHA-256 no longer matches its row → empty 404.
Success: the stored PNG bytes with ``Content-Length``, ``Content-Type: image/png``, a fixed
``Content-Disposition`` filename, ``Cache-Control: no-store`` and ``nosniff``. The path is built only
from the stored 64-hex digest (``evidence_dir/ab/cd/<sha>.png``), never from request text.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from cmbuyer.schemas import is_hex64, is_uuid4
from cmbuyer.server.domain.errors import Unavailable
from cmbuyer.server.store import device_screens
from cmbuyer.server.store.queries import admin as admin_queries
from cmbuyer.server.web.admin.render import refuse, request_id
from cmbuyer.server.web.admin.session import current_session
from cmbuyer.server.web.keys import DB, SETTINGS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_NO_STORE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def evidence_path(evidence_dir: Path, sha256: str) -> Path:
    """Where the device API stored the PNG with this digest."""
    return evidence_dir / sha256[:2] / sha256[2:4] / f"{sha256}.png"


def _read_checked(path: Path, sha256: str, size: int) -> bytes | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if len(data) != size or not data.startswith(PNG_MAGIC) or hashlib.sha256(data).hexdigest() != sha256:
        return None
    return data


def _empty(status: int) -> web.Response:
    return web.Response(status=status, body=b"", headers=_NO_STORE)


FileRef = tuple[str, int] | None  # (sha256, byte size) of a stored PNG


async def _serve(
    request: web.Request, key: str, lookup: Callable[[sqlite3.Connection, str], FileRef]
) -> web.StreamResponse:
    """Serve the PNG ``lookup`` finds for the path id ``key`` (rules in the module docstring)."""
    try:
        session = await current_session(request)
    except Unavailable as exc:
        return refuse(request, exc)
    if session is None:
        response = _empty(401)
        response.headers["X-Request-ID"] = request_id(request)
        return response
    row_id = request.match_info[key]
    if not is_uuid4(row_id):
        return _empty(404)
    try:
        ref = await request.app[DB].read(lambda c: lookup(c, row_id))
    except Unavailable:
        return _empty(503)
    if ref is None or not is_hex64(ref[0]):
        return _empty(404)
    sha256, size = ref
    path = evidence_path(request.app[SETTINGS].evidence_dir, sha256)
    data = await asyncio.get_running_loop().run_in_executor(None, _read_checked, path, sha256, size)
    if data is None:
        return _empty(404)
    return web.Response(
        body=data,
        headers={
            **_NO_STORE,
            "Content-Type": "image/png",
            "Content-Length": str(len(data)),
            "Content-Disposition": 'inline; filename="evidence.png"',
            "Content-Security-Policy": "default-src 'none'; sandbox",
        },
    )


async def get_evidence(request: web.Request) -> web.StreamResponse:
    """Serve one task evidence PNG."""
    return await _serve(request, "asset_id", admin_queries.evidence_file_ref)


def _screen_ref(conn: sqlite3.Connection, screen_id: str) -> FileRef:
    screen = device_screens.get(conn, screen_id)
    if screen is None or screen.sha256 is None or screen.byte_size is None:
        return None
    return screen.sha256, screen.byte_size


async def get_device_screen(request: web.Request) -> web.StreamResponse:
    """Serve one phone screenshot taken for 查看当前屏幕 (404 for an answer without an image)."""
    return await _serve(request, "screen_id", _screen_ref)


def setup(app: web.Application) -> None:
    """Register the evidence route."""
    app.router.add_get("/evidence/{asset_id}", get_evidence, name="admin-evidence")
    app.router.add_get("/device-screens/{screen_id}", get_device_screen, name="admin-device-screen")
