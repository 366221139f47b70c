"""Pause/resume and per-device pacing over the real device API (docs/api.md "Pause and
pacing"): a paused device gets 204 from claim-next while tasks are PENDING and its heartbeat answer says
``paused``; its open claim still resumes; resume → it claims again; both are audited; a revoked device
cannot be paused. A paced device gets 204 (and ``paced_until``) between claims and work after."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from cmbuyer.schemas import validate
from cmbuyer.server.clock import ManualClock, to_wire
from cmbuyer.server.db import run_in_transaction
from cmbuyer.server.domain.errors import InvalidTransition, NotFound, ValidationFailed
from cmbuyer.server.services import devices as device_service
from cmbuyer.server.store import audit
from cmbuyer.server.tx.common import Actor, new_id
from tests.server.claims.conftest import HEARTBEAT, claim, claim_ok, heartbeat_body, post
from tests.server.conftest import DeviceCreds, Maker
from tests.server.submissions.helpers import fail_path

ADMIN = Actor("admin", "ops")


def _pause(conn: sqlite3.Connection, clock: ManualClock, device_id: str, paused: bool) -> bool:
    return run_in_transaction(
        conn, lambda c: device_service.set_paused(c, device_id, paused=paused, actor=ADMIN, now=clock.now())
    )


def _pace(
    conn: sqlite3.Connection, clock: ManualClock, device_id: str, interval: int | None, per_day: int | None
) -> bool:
    return run_in_transaction(
        conn,
        lambda c: device_service.set_pacing(
            c, device_id, min_claim_interval_seconds=interval, max_claims_per_day=per_day, actor=ADMIN, now=clock.now()
        ),
    )


@pytest.fixture
def three_started_tasks(make_task: Maker) -> None:
    """Three PENDING tasks: work for a device after its first claim, so a 204 means pause or pacing."""
    for _ in range(3):
        make_task(start=True)


FEATURES = ["pause", "hold_release", "screenshot"]  # what today's agent lists (agent/client.py FEATURES)


async def _heartbeat(client: Any, dev: DeviceCreds, features: list[str] = FEATURES) -> dict[str, Any]:
    status, raw, _ = await post(client, HEARTBEAT, dev, heartbeat_body(dev.device_id, features=features))
    assert status == 200, raw
    answer: dict[str, Any] = json.loads(raw)
    validate("heartbeat.response", answer)
    return answer


async def _fail(client: Any, dev: DeviceCreds, claimed: Any) -> None:
    body = {
        "fail_key": new_id(),
        "claim_generation": claimed.body["attempt"]["claim_generation"],
        "claim_token": claimed.token,
        "reason_code": "SKU_VALUE_MISSING",
        "summary": "option not found",
        "evidence_asset_id": None,
    }
    status, raw, _ = await post(client, fail_path(claimed.attempt_id), dev, body)
    assert status == 200, raw


@pytest.mark.usefixtures("three_started_tasks")
async def test_paused_device_claims_nothing_keeps_its_claim_and_claims_again_after_resume(
    server_client: Any,
    ready_device: Callable[..., DeviceCreds],
    sync_conn: sqlite3.Connection,
    clock: ManualClock,
) -> None:
    dev, other = ready_device("暂停的手机"), ready_device("另一台")
    session = new_id()
    held = await claim_ok(server_client, dev, session)  # an open claim from before the pause

    assert _pause(sync_conn, clock, dev.device_id, True) is True
    assert _pause(sync_conn, clock, dev.device_id, True) is False  # idempotent: no second audit row
    answer = await _heartbeat(server_client, dev)
    assert answer["paused"] is True and "paced_until" not in answer
    # an agent that does not list "pause" (an older one: its schema refuses unknown fields) never gets it
    assert "paused" not in await _heartbeat(server_client, dev, features=[])
    # the open claim continues: the same session resumes the same attempt
    assert (await claim_ok(server_client, dev, session)).attempt_id == held.attempt_id
    await _fail(server_client, dev, held)
    # tasks are PENDING, yet the paused phone gets none; a retry of the same key replays the 204
    key = new_id()
    assert await claim(server_client, dev, session, key) == (204, b"")
    assert await claim(server_client, dev, session, key) == (204, b"")
    # the other phone works meanwhile
    await claim_ok(server_client, other, new_id())

    assert _pause(sync_conn, clock, dev.device_id, False) is True
    assert "paused" not in await _heartbeat(server_client, dev)
    await claim_ok(server_client, dev, new_id())

    actions = [r.action for r in audit.for_subject(sync_conn, "device", dev.device_id)]
    assert actions.count("device.pause") == 1 and actions.count("device.resume") == 1
    rows = [r for r in audit.for_subject(sync_conn, "device", dev.device_id) if r.action.startswith("device.pa")]
    assert {(r.actor_kind, r.actor_id) for r in rows} == {("admin", "ops")}


def test_pause_refused_for_revoked_and_unknown_devices(
    make_device: Maker, sync_conn: sqlite3.Connection, clock: ManualClock
) -> None:
    dev = make_device()
    run_in_transaction(sync_conn, lambda c: device_service.revoke_device(c, dev.device_id, ADMIN, clock.now()))
    before = (
        sync_conn.execute("SELECT * FROM devices").fetchall(),
        sync_conn.execute("SELECT * FROM audit_log").fetchall(),
    )
    for paused in (True, False):
        with pytest.raises(InvalidTransition):
            _pause(sync_conn, clock, dev.device_id, paused)
    with pytest.raises(InvalidTransition):
        _pace(sync_conn, clock, dev.device_id, 60, None)
    with pytest.raises(NotFound):
        _pause(sync_conn, clock, new_id(), True)
    with pytest.raises(NotFound):
        _pause(sync_conn, clock, "not-a-uuid", True)
    after = (
        sync_conn.execute("SELECT * FROM devices").fetchall(),
        sync_conn.execute("SELECT * FROM audit_log").fetchall(),
    )
    assert [list(map(tuple, x)) for x in before] == [list(map(tuple, x)) for x in after]


@pytest.mark.parametrize(("interval", "per_day"), [(0, None), (86401, None), (None, 0), (None, 10001), (True, None)])
def test_pacing_out_of_range_is_refused(
    make_device: Maker, sync_conn: sqlite3.Connection, clock: ManualClock, interval: Any, per_day: Any
) -> None:
    dev = make_device()
    with pytest.raises(ValidationFailed):
        _pace(sync_conn, clock, dev.device_id, interval, per_day)
    row = sync_conn.execute(
        "SELECT min_claim_interval_seconds, max_claims_per_day FROM devices WHERE id = ?", (dev.device_id,)
    ).fetchone()
    assert tuple(row) == (None, None)


@pytest.mark.usefixtures("three_started_tasks")
async def test_paced_device_gets_204_in_between_and_work_after(
    server_client: Any,
    ready_device: Callable[..., DeviceCreds],
    sync_conn: sqlite3.Connection,
    clock: ManualClock,
) -> None:
    dev = ready_device()
    assert _pace(sync_conn, clock, dev.device_id, 20, None) is True
    assert "paced_until" not in await _heartbeat(server_client, dev)  # never claimed: nothing to wait for
    first = await claim_ok(server_client, dev, new_id())
    claimed_at = clock.now()
    await _fail(server_client, dev, first)
    clock.advance(19)
    answer = await _heartbeat(server_client, dev)
    assert answer["paced_until"] == to_wire(claimed_at + timedelta(seconds=20))
    assert await claim(server_client, dev, new_id()) == (204, b"")
    clock.advance(1)  # exactly the interval: allowed (equal is over, as for leases)
    assert "paced_until" not in await _heartbeat(server_client, dev)
    await claim_ok(server_client, dev, new_id())
    audit_rows = [r for r in audit.for_subject(sync_conn, "device", dev.device_id) if r.action == "device.pacing"]
    assert [r.detail for r in audit_rows] == [{"min_claim_interval_seconds": 20, "max_claims_per_day": None}]


async def test_daily_cap_counts_beijing_days(
    server_client: Any,
    make_task: Maker,
    ready_device: Callable[..., DeviceCreds],
    sync_conn: sqlite3.Connection,
    clock: ManualClock,
) -> None:
    clock.set("2026-08-04T15:59:00.000000Z")  # 23:59 in Beijing
    for _ in range(3):
        make_task(start=True)
    dev = ready_device()
    _pace(sync_conn, clock, dev.device_id, None, 1)
    await _fail(server_client, dev, await claim_ok(server_client, dev, new_id()))
    answer = await _heartbeat(server_client, dev)
    assert answer["paced_until"] == "2026-08-04T16:00:00.000000Z"  # the next Beijing midnight
    assert await claim(server_client, dev, new_id()) == (204, b"")
    clock.advance(60)  # 00:00 in Beijing: a new day, the counter starts again
    assert "paced_until" not in await _heartbeat(server_client, dev)
    await _fail(server_client, dev, await claim_ok(server_client, dev, new_id()))
    assert await claim(server_client, dev, new_id()) == (204, b"")  # the new day's one claim is used up
