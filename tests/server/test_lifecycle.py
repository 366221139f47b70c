"""The server's lifecycle (server/lifecycle.py, docs/architecture.md "Safety rules"): the start-up steps run in the
listed order and the first refusal stops start-up with a one-line reason; the periodic jobs started while serving
are exactly the listed ones. That no route module imports the app or the lifecycle is a layer rule, checked with
the others in tests/server/test_layers.py."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from aiohttp import web

from cmbuyer.server import lifecycle
from cmbuyer.server.app import create_app
from cmbuyer.server.clock import ManualClock
from cmbuyer.server.config import Settings
from cmbuyer.server.domain.errors import StartupRefused
from cmbuyer.server.lifecycle import StartupStep


def _recording(steps: Sequence[StartupStep], seen: list[str]) -> tuple[StartupStep, ...]:
    """The same steps, each noting its name in ``seen`` before it runs."""

    def wrap(step: StartupStep) -> StartupStep:
        async def run(app: web.Application) -> None:
            seen.append(step.__name__)
            await step(app)

        return run

    return tuple(wrap(step) for step in steps)


def test_the_startup_steps_are_listed_in_their_order() -> None:
    # the schema is checked before the database opens (opening would create a missing file); the claim
    # secret before recovery, so that recovery never runs under a secret that does not rebuild the claims
    assert lifecycle.STARTUP_STEPS == (
        lifecycle.check_schema_current,
        lifecycle.open_database,
        lifecycle.check_claim_secret,
        lifecycle.recover,
    )


def test_the_periodic_jobs_are_listed() -> None:
    assert lifecycle.PERIODIC_JOBS == (lifecycle.sweep_admin_sessions, lifecycle.sweep_expired)


async def test_a_real_start_runs_every_listed_step_in_order(
    settings: Settings, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    monkeypatch.setattr(lifecycle, "STARTUP_STEPS", _recording(lifecycle.STARTUP_STEPS, seen))
    runner = web.AppRunner(create_app(settings, clock))
    await runner.setup()
    try:
        assert seen == ["check_schema_current", "open_database", "check_claim_secret", "recover"]
    finally:
        await runner.cleanup()


async def test_a_refusing_step_stops_start_up_with_its_reason() -> None:
    ran: list[str] = []

    async def first(app: web.Application) -> None:
        ran.append("first")

    async def refuses(app: web.Application) -> None:
        ran.append("refuses")
        raise StartupRefused("the claim secret does not rebuild claim 1")

    async def never(app: web.Application) -> None:
        ran.append("never")

    with pytest.raises(StartupRefused, match=r"^the claim secret does not rebuild claim 1$"):
        await lifecycle.run_startup(web.Application(), (first, refuses, never))
    assert ran == ["first", "refuses"]


async def test_a_missing_database_refuses_before_it_is_opened(
    settings: Settings, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[str] = []
    monkeypatch.setattr(lifecycle, "STARTUP_STEPS", _recording(lifecycle.STARTUP_STEPS, seen))
    missing = replace(settings, db_path=tmp_path / "nowhere" / "cmbuyer.sqlite3")
    loop = asyncio.get_running_loop()
    handler = loop.get_exception_handler()
    runner = web.AppRunner(create_app(missing, clock))
    with pytest.raises(StartupRefused, match=r"does not exist; run `cmbuyer-server init`$"):
        await runner.setup()
    await runner.cleanup()
    assert seen == ["check_schema_current"]
    assert not missing.db_path.exists()  # never opened: opening would have created it
    assert loop.get_exception_handler() is handler  # the lifespan put the loop back as it found it


async def test_a_refused_claim_secret_stops_start_up_before_recovery(
    settings: Settings, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    monkeypatch.setattr(lifecycle, "STARTUP_STEPS", _recording(lifecycle.STARTUP_STEPS, seen))
    runner = web.AppRunner(create_app(replace(settings, claim_token_secret=None), clock))
    with pytest.raises(StartupRefused, match="CMBUYER_CLAIM_TOKEN_SECRET"):
        await runner.setup()
    await runner.cleanup()
    assert seen == ["check_schema_current", "open_database", "check_claim_secret"]


async def test_serving_starts_exactly_the_listed_periodic_jobs(
    settings: Settings, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: dict[str, asyncio.Event] = {job.__name__: asyncio.Event() for job in lifecycle.PERIODIC_JOBS}

    def wrap(job: lifecycle.PeriodicJob) -> lifecycle.PeriodicJob:
        async def run(app: web.Application) -> None:
            await job(app)  # the real job, against the real database
            ran[job.__name__].set()

        return run

    monkeypatch.setattr(lifecycle, "PERIODIC_JOBS", tuple(wrap(job) for job in lifecycle.PERIODIC_JOBS))
    started: list[int] = []
    real_start = lifecycle.start_periodic_jobs

    def start(app: web.Application) -> list[asyncio.Task[None]]:
        tasks = real_start(app, seconds=0.01)
        started.append(len(tasks))
        return tasks

    monkeypatch.setattr(lifecycle, "start_periodic_jobs", start)
    runner = web.AppRunner(create_app(settings, clock))
    await runner.setup()
    try:
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in ran.values())), 10)
    finally:
        await runner.cleanup()
    assert started == [2]
    assert sorted(ran) == ["sweep_admin_sessions", "sweep_expired"]
