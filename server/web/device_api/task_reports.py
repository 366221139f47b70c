"""Device routes (docs/api.md "Device API II", events and evidence): what a phone reports
about its task — events and evidence uploads.

Each handler runs only after :mod:`~cmbuyer.server.web.device_auth` authenticated the request (before
Content-Type parsing and any body byte, ``Expect: 100-continue`` included), checks its path id, reads its
body with the strict JSON reader or the streaming multipart reader, and runs exactly one write job through
the group-committed writer; the server time a job uses is read inside the job. Responses are built from the
job's return value, i.e. after COMMIT. A device revoked between authentication and the write position gets
the same empty 401 as any authentication failure. Both routes enforce the per-attempt budget
(:data:`~cmbuyer.server.web.device_api.common.BUDGET`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sqlite3

from aiohttp import web

from cmbuyer.schemas import SchemaError, validate
from cmbuyer.server.db import StorageError
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.evidence import files as evidence_files
from cmbuyer.server.evidence.png import ImageRejected, validate_evidence
from cmbuyer.server.services import events as event_service
from cmbuyer.server.services import evidence_upload
from cmbuyer.server.tx.idempotency import Stored
from cmbuyer.server.web import multipart
from cmbuyer.server.web.device_api.common import BUDGET, path_id, stored_response, write
from cmbuyer.server.web.device_auth import add_device_route
from cmbuyer.server.web.device_errors import DeviceHTTPError, error_response
from cmbuyer.server.web.jsonbody import read_json
from cmbuyer.server.web.keys import CLOCK, DB, SETTINGS

log = logging.getLogger(__name__)

EVENTS_PATH = "/api/v1/tasks/{task_id}/events"
EVIDENCE_PATH = "/api/v1/tasks/{task_id}/evidence"
EVENTS_BODY_CAP = 16384  # up to 20 events of ≤ 200-character summaries
# At most this many PNG decodes at once: each may hold one decoded image (≤ 16 Mpx) in memory.
PNG_DECODES = web.AppKey("png_decodes", asyncio.Semaphore)


async def events(request: web.Request, device_id: str) -> web.StreamResponse:
    """``POST /api/v1/tasks/{id}/events`` → 200 events.response; see docs/api.md."""
    task_id = path_id(request, "task_id")
    body = await read_json(request, "events.request", EVENTS_BODY_CAP)
    clock, budget = request.app[CLOCK], request.app[BUDGET]

    def job(conn: sqlite3.Connection) -> Stored:
        return event_service.append_events(
            conn, device_id=device_id, task_id=task_id, body=body, now=clock.now(), budget=budget
        )

    return stored_response(await write(request, job))


async def evidence(request: web.Request, device_id: str) -> web.StreamResponse:
    """``POST /api/v1/tasks/{id}/evidence`` (multipart) → 201 first, 200 replay; see docs/api.md."""
    try:
        return await _evidence(request, device_id)
    except DeviceHTTPError as exc:
        # Never drain the rest of a refused upload (it may be a 50 MiB stream): close the connection.
        response = error_response(exc.status, exc.code)
        response.force_close()
        return response


async def _evidence(request: web.Request, device_id: str) -> web.StreamResponse:
    settings, clock = request.app[SETTINGS], request.app[CLOCK]
    task_id = path_id(request, "task_id")
    limits = settings.evidence_limits
    form = await multipart.read_form(
        request,
        fields=evidence_upload.META_FIELDS,
        file_field="file",
        file_type="image/png",
        limits=multipart.Limits.for_evidence(limits),
    )
    try:
        validate("evidence.request", form.fields)
    except SchemaError:
        raise DeviceHTTPError(Code.INVALID_REQUEST) from None
    data = form.file
    async with request.app[PNG_DECODES]:
        try:
            info = await asyncio.to_thread(validate_evidence, data, limits)
        except ImageRejected as exc:
            log.info("evidence refused: %s", exc.reason)
            raise DeviceHTTPError(Code.UNSUPPORTED_IMAGE) from None
        digest = await asyncio.to_thread(_sha256, data)
    if digest != form.fields["sha256"]:
        raise DeviceHTTPError(Code.INVALID_REQUEST)
    upload = evidence_upload.Upload.from_form(
        task_id, form.fields, byte_size=len(data), width=info.width, height=info.height
    )
    db, budget = request.app[DB], request.app[BUDGET]
    # one snapshot: a replay whose original commits between the key lookup and the budget count must
    # not be refused (the write job would answer it 200)
    if not await db.read(
        lambda conn: evidence_upload.may_upload(conn, device_id=device_id, upload=upload, budget=budget), snapshot=True
    ):
        raise DeviceHTTPError(Code.CLAIM_NOT_CURRENT)
    try:
        await asyncio.to_thread(evidence_files.store, settings.evidence_dir, upload.sha256, data)
    except OSError:
        raise StorageError("evidence file could not be stored") from None

    def job(conn: sqlite3.Connection) -> Stored:
        return evidence_upload.record_upload(
            conn, device_id=device_id, upload=upload, now=clock.now(), budget=budget, evidence_dir=settings.evidence_dir
        )

    return stored_response(await write(request, job))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def setup(app: web.Application) -> None:
    """Register events and evidence upload (authentication first) and the PNG-decode semaphore."""
    add_device_route(app, "POST", EVENTS_PATH, events)
    add_device_route(app, "POST", EVIDENCE_PATH, evidence)
    app[PNG_DECODES] = asyncio.Semaphore(2)
