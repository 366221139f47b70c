"""What the server does before it serves and while it serves, listed in order (docs/architecture.md "Safety rules").

Start-up (:data:`STARTUP_STEPS`, run in this order; the first that raises stops start-up):

1. :func:`check_schema_current` — the database file exists and its migrations match the code exactly.
   It runs before the database is opened because opening would create a missing file;
2. :func:`open_database` — the writer and the readers (``Unavailable`` when it cannot);
3. :func:`check_claim_secret` — the configured claim-token secret rebuilds every existing claim (fail
   closed: a wrong secret would answer every resumed claim with a token the phone cannot match);
4. :func:`recover` — the expiry sweep until nothing is left, so a fenced submission whose lease ran out
   while the server was down is in reconciliation before any device route serves (recovery before dispatch: docs/api.md
   "Expiry and recovery").

Then the periodic jobs (:data:`PERIODIC_JOBS`), each every ``settings.sweep_interval`` seconds:
:func:`sweep_admin_sessions` (ended admin sessions and forgotten login throttles) and
:func:`sweep_expired` (one expiry-sweep pass, :func:`cmbuyer.server.services.recovery.sweep`). A failed
pass is logged and retried next period. (``evidence gc`` is an operator command, not a periodic job.)

:func:`lifespan` is the application's ``cleanup_ctx``: it runs the start-up steps, starts the periodic
jobs, and on shutdown stops them and closes the database. A step refuses start-up by raising
:class:`StartupRefused` with a one-line reason (``cmbuyer-server serve`` prints it and exits 4). No route
module registers start-up steps or jobs; :mod:`cmbuyer.server.app` builds the app and hands it this
lifespan.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from aiohttp import web

from cmbuyer.server import migrate
from cmbuyer.server.config import Settings
from cmbuyer.server.db import connect_sync
from cmbuyer.server.domain.claims import ClaimPolicy
from cmbuyer.server.domain.errors import SettingsError, StartupRefused, Unavailable
from cmbuyer.server.services import admin_sessions, recovery
from cmbuyer.server.services.claim_secret import SecretMismatch, verify_secret
from cmbuyer.server.web.edge import RateLimitedExceptionHandler
from cmbuyer.server.web.keys import CLOCK, DB, SETTINGS

log = logging.getLogger("cmbuyer.server")

StartupStep = Callable[[web.Application], Awaitable[None]]
PeriodicJob = Callable[[web.Application], Awaitable[None]]


# -- start-up -----------------------------------------------------------------------------------------


def check_schema(settings: Settings) -> None:
    """Raise :class:`StartupRefused` unless the DB file exists and its migrations match the code exactly.

    Synchronous (one short-lived connection) so that ``cmbuyer-server serve`` can refuse before it
    builds the app; :func:`check_schema_current` runs it again as the first start-up step."""
    if not settings.db_path.exists():
        raise StartupRefused(f"database {settings.db_path} does not exist; run `cmbuyer-server init`")
    conn = connect_sync(settings.db_path)
    try:
        migrate.check_current(conn)
    except migrate.MigrationError as exc:
        raise StartupRefused(str(exc)) from None
    finally:
        conn.close()


async def check_schema_current(app: web.Application) -> None:
    """Start-up step 1: :func:`check_schema` on ``app[SETTINGS]``. Raises :class:`StartupRefused`."""
    check_schema(app[SETTINGS])


async def open_database(app: web.Application) -> None:
    """Start-up step 2: open ``app[DB]`` (writer task and readers). Raises ``Unavailable``."""
    await app[DB].open()


async def check_claim_secret(app: web.Application) -> None:
    """Start-up step 3: the configured claim-token secret must rebuild existing claims (fail closed).

    Raises :class:`StartupRefused` when the secret is missing or too short, when a stored claim does not
    match it, or when the claims cannot be read."""
    try:
        policy = ClaimPolicy.from_settings(app[SETTINGS])
    except SettingsError as exc:
        raise StartupRefused(str(exc)) from None
    try:
        await app[DB].read(lambda conn: verify_secret(conn, policy.secret))
    except SecretMismatch as exc:
        raise StartupRefused(str(exc)) from None
    except Unavailable:
        raise StartupRefused("cannot read existing claims to verify CMBUYER_CLAIM_TOKEN_SECRET") from None


async def recover(app: web.Application) -> None:
    """Start-up step 4: sweep until nothing is left, before any device route serves (docs/architecture.md "Safety
    rules").

    Raises :class:`StartupRefused` when a pass fails on storage."""
    try:
        while (await run_sweep(app)).more:
            pass
    except Unavailable:
        raise StartupRefused("start-up recovery could not complete (storage error)") from None


STARTUP_STEPS: tuple[StartupStep, ...] = (check_schema_current, open_database, check_claim_secret, recover)


async def run_startup(app: web.Application, steps: Sequence[StartupStep] | None = None) -> None:
    """Run ``steps`` (default :data:`STARTUP_STEPS`, looked up at call time) one after the other; the first
    exception (:class:`StartupRefused`, or ``Unavailable`` from opening the database) stops start-up and
    propagates unchanged."""
    for step in STARTUP_STEPS if steps is None else steps:
        await step(app)


# -- periodic jobs ------------------------------------------------------------------------------------


async def run_sweep(app: web.Application) -> recovery.SweepReport:
    """One expiry-sweep pass through the writer; returns what it changed (``more``: run again).

    Raises ``Unavailable`` when the write job fails."""
    clock = app[CLOCK]
    report: recovery.SweepReport = await app[DB].write(lambda conn: recovery.sweep(conn, clock.now()))
    if report.submissions_to_reconciliation or report.authorizations_expired:
        log.info(
            "到期清扫：%d 笔提交转为待人工核对，%d 份授权已过期",
            report.submissions_to_reconciliation,
            report.authorizations_expired,
        )
    return report


async def sweep_admin_sessions(app: web.Application) -> None:
    """Periodic job: delete ended admin sessions and forgotten login throttles
    (:func:`cmbuyer.server.services.admin_sessions.sweep`)."""
    at = app[CLOCK].now()
    await app[DB].write(lambda c: admin_sessions.sweep(c, at))


async def sweep_expired(app: web.Application) -> None:
    """Periodic job: one expiry-sweep pass (:func:`run_sweep`)."""
    await run_sweep(app)


PERIODIC_JOBS: tuple[PeriodicJob, ...] = (sweep_admin_sessions, sweep_expired)


def start_periodic_jobs(
    app: web.Application, jobs: Sequence[PeriodicJob] | None = None, *, seconds: float | None = None
) -> list[asyncio.Task[None]]:
    """Start one task per job (default :data:`PERIODIC_JOBS`, looked up at call time), each running its job
    every ``seconds`` (default ``settings.sweep_interval``), the first run one period after start-up.
    The caller cancels the returned tasks."""
    period = app[SETTINGS].sweep_interval if seconds is None else seconds
    return [asyncio.create_task(_every(job, app, period)) for job in (PERIODIC_JOBS if jobs is None else jobs)]


async def _every(job: PeriodicJob, app: web.Application, seconds: float) -> None:
    while True:
        await asyncio.sleep(seconds)
        try:
            await job(app)
        except Exception:  # a failed sweep must not kill the loop; it is retried next period
            log.exception("定时任务 %s 失败", getattr(job, "__name__", job))


# -- the application's lifespan -----------------------------------------------------------------------


async def lifespan(app: web.Application) -> AsyncIterator[None]:
    """``app.cleanup_ctx`` entry: start-up steps, then the periodic jobs while serving; on shutdown (or a
    refused start-up) cancel the jobs, restore the loop's exception handler and close the database."""
    tasks: list[asyncio.Task[None]] = []
    loop = asyncio.get_running_loop()
    previous_handler = loop.get_exception_handler()
    loop.set_exception_handler(RateLimitedExceptionHandler(previous_handler))
    try:
        await run_startup(app)
        tasks = start_periodic_jobs(app)
        log.info("已启动：数据库结构为最新，领取密钥已核对，启动恢复已完成")
        yield
        log.info("正在关闭：停止定时任务，关闭数据库")
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        loop.set_exception_handler(previous_handler)
        await app[DB].close()
