"""Device routes of issue 4 (spec 002 §二 and 事件与证据): events, evidence upload, fail,
submission fence and result — plus the expiry sweeper / start-up recovery registration.

Each handler runs only after :mod:`device_auth` authenticated the request (before Content-Type
parsing and any body byte, ``Expect: 100-continue`` included), checks its path id, reads its body with
the strict JSON reader (4096-byte cap) or the streaming multipart reader, and runs exactly one write
job through the group-committed writer; the server time a job uses is read inside the job. Responses
are built from the job's return value, i.e. after COMMIT. A device revoked between authentication and
the write position gets the same empty 401 as any authentication failure.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sqlite3
from typing import Any

from aiohttp import web

from cmbuyer.schemas import SchemaError, is_uuid4, validate
from cmbuyer.server.app import PERIODIC, STARTUP_CHECKS, StartupRefused
from cmbuyer.server.db import StorageError
from cmbuyer.server.domain.limits import AttemptBudget
from cmbuyer.server.evidence import files as evidence_files
from cmbuyer.server.evidence.png import ImageRejected, validate_evidence
from cmbuyer.server.services import events as event_service
from cmbuyer.server.services import evidence_upload, recovery
from cmbuyer.server.services import fail_attempt as fail_service
from cmbuyer.server.services import fence as fence_service
from cmbuyer.server.services import submission_result as result_service
from cmbuyer.server.services.fence import FenceRefused
from cmbuyer.server.services.idempotency import Stored
from cmbuyer.server.web import multipart
from cmbuyer.server.web.device_auth import add_device_route
from cmbuyer.server.web.device_errors import (
    DeviceHTTPError,
    error_response,
    json_body_response,
    json_response,
)
from cmbuyer.server.web.jsonbody import read_json
from cmbuyer.server.web.keys import CLOCK, DB, SETTINGS

log = logging.getLogger("cmbuyer.server.attempts")

EVENTS_PATH = "/api/v1/tasks/{task_id}/events"
EVIDENCE_PATH = "/api/v1/tasks/{task_id}/evidence"
FAIL_PATH = "/api/v1/purchase-attempts/{attempt_id}/fail"
FENCE_PATH = "/api/v1/purchase-attempts/{attempt_id}/submission-fence"
RESULT_PATH = "/api/v1/order-submissions/{submission_id}/result"
BODY_CAP = 4096
EVENTS_BODY_CAP = 16384  # up to 20 events of ≤ 200-character summaries
# At most this many PNG decodes at once: each may hold one decoded image (≤ 16 Mpx) in memory.
PNG_DECODES = web.AppKey("png_decodes", asyncio.Semaphore)
# The per-attempt caps from the settings, built once at set-up (settings do not change while serving).
BUDGET = web.AppKey("attempt_budget", AttemptBudget)


def _path_id(request: web.Request, name: str) -> str:
    value = request.match_info[name]
    if not is_uuid4(value):
        raise DeviceHTTPError(400, "invalid_request")
    return value


async def _write(request: web.Request, job: Any) -> Any:
    """Run one write job through the group-committed writer (answered after COMMIT). Every device job is
    short — one attempt's rows by index, at most 20 events — so it may run on the loop thread."""
    return await request.app[DB].write(job, short=True)


def _stored(stored: Stored) -> web.Response:
    return json_body_response(stored.status, stored.body)


async def events(request: web.Request, device_id: str) -> web.StreamResponse:
    """``POST /api/v1/tasks/{id}/events`` → 200 events.response; see docs/api.md."""
    task_id = _path_id(request, "task_id")
    body = await read_json(request, "events.request", EVENTS_BODY_CAP)
    clock, budget = request.app[CLOCK], request.app[BUDGET]

    def job(conn: sqlite3.Connection) -> Stored:
        return event_service.append_events(
            conn, device_id=device_id, task_id=task_id, body=body, now=clock.now(), budget=budget
        )

    return _stored(await _write(request, job))


def _upload_from(task_id: str, fields: dict[str, str], data: bytes, width: int, height: int) -> evidence_upload.Upload:
    return evidence_upload.Upload(
        task_id=task_id,
        upload_key=fields["upload_key"],
        attempt_id=fields["attempt_id"],
        kind=fields["kind"],
        privacy_tier=fields["privacy_tier"],
        sha256=fields["sha256"],
        captured_at=fields["captured_at"],
        byte_size=len(data),
        width=width,
        height=height,
    )


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
    task_id = _path_id(request, "task_id")
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
        raise DeviceHTTPError(400, "invalid_request") from None
    data = form.file
    async with request.app[PNG_DECODES]:
        try:
            info = await asyncio.to_thread(validate_evidence, data, limits)
        except ImageRejected as exc:
            log.info("evidence refused: %s", exc.reason)
            raise DeviceHTTPError(400, "unsupported_image") from None
        digest = await asyncio.to_thread(_sha256, data)
    if digest != form.fields["sha256"]:
        raise DeviceHTTPError(400, "invalid_request")
    upload = _upload_from(task_id, form.fields, data, info.width, info.height)
    db, budget = request.app[DB], request.app[BUDGET]
    # one snapshot: a replay whose original commits between the key lookup and the budget count must
    # not be refused (the write job would answer it 200)
    if not await db.read(
        lambda conn: evidence_upload.may_upload(conn, device_id=device_id, upload=upload, budget=budget), snapshot=True
    ):
        raise DeviceHTTPError(409, "claim_not_current")
    try:
        await asyncio.to_thread(evidence_files.store, settings.evidence_dir, upload.sha256, data)
    except OSError:
        raise StorageError("evidence file could not be stored") from None

    def job(conn: sqlite3.Connection) -> Stored:
        return evidence_upload.record_upload(
            conn, device_id=device_id, upload=upload, now=clock.now(), budget=budget, evidence_dir=settings.evidence_dir
        )

    return _stored(await _write(request, job))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def fail(request: web.Request, device_id: str) -> web.StreamResponse:
    """``POST /api/v1/purchase-attempts/{aid}/fail`` → 200 attempt_fail.response; see docs/api.md."""
    attempt_id = _path_id(request, "attempt_id")
    body = await read_json(request, "attempt_fail.request", BODY_CAP)
    clock = request.app[CLOCK]

    def job(conn: sqlite3.Connection) -> Stored:
        return fail_service.fail_attempt(conn, device_id=device_id, attempt_id=attempt_id, body=body, now=clock.now())

    return _stored(await _write(request, job))


async def fence(request: web.Request, device_id: str) -> web.StreamResponse:
    """``POST /api/v1/purchase-attempts/{aid}/submission-fence`` → 200 (first: permit; replay: none)."""
    attempt_id = _path_id(request, "attempt_id")
    body = await read_json(request, "submission_fence.request", BODY_CAP)
    clock, modes = request.app[CLOCK], request.app[SETTINGS].allowed_payment_modes

    def job(conn: sqlite3.Connection) -> fence_service.FenceAnswer:
        return fence_service.create_fence(
            conn, device_id=device_id, attempt_id=attempt_id, body=body, now=clock.now(), allowed_payment_modes=modes
        )

    try:
        answer = await _write(request, job)
    except FenceRefused as exc:
        return json_response(409, {"error": exc.code, "detail": exc.detail})
    if answer.permit:
        log.info("submission fence granted for attempt %s", attempt_id)
    return json_body_response(answer.status, answer.body)


async def result(request: web.Request, device_id: str) -> web.StreamResponse:
    """``POST /api/v1/order-submissions/{sid}/result`` → 200 submission_result.response."""
    submission_id = request.match_info["submission_id"]
    if not is_uuid4(submission_id):
        raise DeviceHTTPError(404, "not_found")
    body = await read_json(request, "submission_result.request", BODY_CAP)
    clock = request.app[CLOCK]

    def job(conn: sqlite3.Connection) -> Stored:
        return result_service.report_result(
            conn, device_id=device_id, submission_id=submission_id, body=body, now=clock.now()
        )

    return _stored(await _write(request, job))


async def run_sweep(app: web.Application) -> recovery.SweepReport:
    """One sweeper pass through the writer (the periodic step)."""
    clock = app[CLOCK]
    report: recovery.SweepReport = await app[DB].write(lambda conn: recovery.sweep(conn, clock.now()))
    if report.submissions_to_reconciliation or report.authorizations_expired:
        log.info(
            "sweep: %d submission(s) to reconciliation, %d authorization(s) expired",
            report.submissions_to_reconciliation,
            report.authorizations_expired,
        )
    return report


async def startup_recovery(app: web.Application) -> None:
    """Start-up check: sweep until nothing is left, before any device route serves (design §2.7)."""
    try:
        while (await run_sweep(app)).more:
            pass
    except StorageError:
        raise StartupRefused("start-up recovery could not complete (storage error)") from None


async def periodic_sweep(app: web.Application) -> None:
    """Periodic step registered in ``app[PERIODIC]``."""
    await run_sweep(app)


def setup(app: web.Application) -> None:
    """Register events, evidence, fail, fence and result, plus start-up recovery and the sweeper."""
    add_device_route(app, "POST", EVENTS_PATH, events)
    add_device_route(app, "POST", EVIDENCE_PATH, evidence)
    add_device_route(app, "POST", FAIL_PATH, fail)
    add_device_route(app, "POST", FENCE_PATH, fence)
    add_device_route(app, "POST", RESULT_PATH, result)
    app[PNG_DECODES] = asyncio.Semaphore(2)
    settings = app[SETTINGS]
    app[BUDGET] = AttemptBudget(
        events=settings.events_per_attempt,
        evidence_files=settings.evidence_per_attempt,
        evidence_bytes=settings.evidence_bytes_per_attempt,
    )
    app[STARTUP_CHECKS].append(startup_recovery)
    app[PERIODIC].append(periodic_sweep)
