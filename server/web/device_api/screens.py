"""Device route (docs/api.md "Holds and screens"): ``POST /api/v1/devices/screen`` — the phone's
fresh screenshot for an administrator's 查看当前屏幕, asked for in the heartbeat answer (``screenshot_request``).

Multipart like task evidence (``request_id``, ``sha256``, then ``file``: one PNG under the evidence rules),
read only after authentication; the file goes to the evidence store by its hash before the write job records
it (file first, row second, as for task evidence). A phone never uploads a screenshot while another app is in
front: then it answers with the heartbeat's ``screen`` field instead.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from typing import Any

from aiohttp import web

from cmbuyer.schemas import is_hex64, is_uuid4
from cmbuyer.server.db import StorageError
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.evidence import files as evidence_files
from cmbuyer.server.evidence.png import ImageRejected, validate_evidence
from cmbuyer.server.services import device_screen
from cmbuyer.server.tx.screens import Image
from cmbuyer.server.web import multipart
from cmbuyer.server.web.device_api.common import write
from cmbuyer.server.web.device_api.task_reports import PNG_DECODES
from cmbuyer.server.web.device_auth import add_device_route
from cmbuyer.server.web.device_errors import DeviceHTTPError, error_response, json_response
from cmbuyer.server.web.keys import CLOCK, SETTINGS

SCREEN_PATH = "/api/v1/devices/screen"
FIELDS = frozenset({"request_id", "sha256"})


async def screen(request: web.Request, device_id: str) -> web.StreamResponse:
    """``POST /api/v1/devices/screen`` → 201 first answer, 200 its retry; 400 bad form or PNG, 409 no such
    pending request, 413 too large."""
    try:
        return await _screen(request, device_id)
    except DeviceHTTPError as exc:  # never drain the rest of a refused upload
        response = error_response(exc.status, exc.code)
        response.force_close()
        return response


async def _screen(request: web.Request, device_id: str) -> web.StreamResponse:
    settings, clock = request.app[SETTINGS], request.app[CLOCK]
    limits = settings.evidence_limits
    form = await multipart.read_form(
        request,
        fields=FIELDS,
        file_field="file",
        file_type="image/png",
        limits=multipart.Limits.for_evidence(limits),
    )
    request_id, sha = form.fields.get("request_id"), form.fields.get("sha256")
    if not is_uuid4(request_id) or not is_hex64(sha) or not form.file:
        raise DeviceHTTPError(Code.INVALID_REQUEST)
    data = form.file
    async with request.app[PNG_DECODES]:
        try:
            info = await asyncio.to_thread(validate_evidence, data, limits)
        except ImageRejected:
            raise DeviceHTTPError(Code.UNSUPPORTED_IMAGE) from None
        digest = await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest())
    if digest != sha:
        raise DeviceHTTPError(Code.INVALID_REQUEST)
    try:
        await asyncio.to_thread(evidence_files.store, settings.evidence_dir, digest, data)
    except OSError:
        raise StorageError("screen file could not be stored") from None
    image = Image(digest, len(data), info.width, info.height)

    def job(conn: sqlite3.Connection) -> tuple[int, dict[str, Any]]:
        return device_screen.record_screen(
            conn,
            device_id=device_id,
            request_id=str(request_id),
            image=image,
            now=clock.now(),
            evidence_dir=settings.evidence_dir,
        )

    status, body = await write(request, job)
    return json_response(status, body)


def setup(app: web.Application) -> None:
    """Register the screen upload (authentication first)."""
    add_device_route(app, "POST", SCREEN_PATH, screen)
