"""Result (one per submission, every observation → its state) and expiry/recovery (sweeper and start-up)."""

from __future__ import annotations

import json
import logging
import sqlite3
from typing import Any

import pytest

from cmbuyer.server.app import create_app
from cmbuyer.server.clock import ManualClock, from_wire
from cmbuyer.server.config import Settings
from cmbuyer.server.lifecycle import run_sweep
from cmbuyer.server.tx.common import new_id
from tests.server.conftest import Maker
from tests.server.submissions import helpers

STATES = {
    "SUBMITTED": ("SUBMITTED", "WAITING_PAYMENT"),
    "EXTERNAL_PAYMENT_HANDOFF": ("RECONCILIATION_REQUIRED", "RECONCILIATION_REQUIRED"),
    "SECURITY_CHALLENGE": ("RECONCILIATION_REQUIRED", "RECONCILIATION_REQUIRED"),
    "UNKNOWN": ("RECONCILIATION_REQUIRED", "RECONCILIATION_REQUIRED"),
}


@pytest.mark.parametrize("observation", sorted(STATES))
async def test_every_observation_maps_to_its_state(
    server_client: Any, make_device: Maker, make_task: Maker, sync_conn: sqlite3.Connection, observation: str
) -> None:
    c, sid = await helpers.fenced_http(server_client, make_device, make_task)
    body = helpers.result_body(c, observation)
    status, raw = await helpers.post_json(server_client, helpers.result_path(sid), c.device, body)
    assert status == 200, raw
    sub_state, task_state = STATES[observation]
    assert json.loads(raw) == {
        "submission_id": sid,
        "observation": observation,
        "submission_status": sub_state,
        "task_state": task_state,
        "task_version": c.task_version + 2,
    }
    assert helpers.task_row(sync_conn, c.task_id)["state"] == task_state
    row = sync_conn.execute("SELECT state, observation FROM order_submissions WHERE id = ?", (sid,)).fetchone()
    assert tuple(row) == (sub_state, observation)
    assert (
        sync_conn.execute("SELECT state FROM authorizations WHERE id = ?", (c.authorization_id,)).fetchone()[0]
        == "CONSUMED"
    )
    assert tuple(
        sync_conn.execute("SELECT state, close_reason FROM attempts WHERE id = ?", (c.attempt_id,)).fetchone()
    ) == ("CLOSED", "REPORTED")
    # replay → same body; another key → 409 result_conflict
    status, raw2 = await helpers.post_json(server_client, helpers.result_path(sid), c.device, body)
    assert (status, raw2) == (200, raw)
    before = helpers.fingerprint(sync_conn)
    status, raw3 = await helpers.post_json(
        server_client, helpers.result_path(sid), c.device, helpers.result_body(c, "UNKNOWN")
    )
    assert (status, json.loads(raw3)) == (409, {"error": "result_conflict"})
    # and a fence for this attempt never permits again
    status, raw4 = await helpers.fence_http(server_client, c)
    assert status == 409 and b"click_permitted" not in raw4
    assert helpers.fingerprint(sync_conn) == before


async def test_result_unknown_or_foreign_submission_does_not_leak(
    server_client: Any, make_device: Maker, make_task: Maker, sync_conn: sqlite3.Connection
) -> None:
    c, sid = await helpers.fenced_http(server_client, make_device, make_task)
    stranger = make_device("stranger")
    before = helpers.fingerprint(sync_conn)
    unknown = await helpers.post_json(server_client, helpers.result_path(new_id()), c.device, helpers.result_body(c))
    foreign = await helpers.post_json(server_client, helpers.result_path(sid), stranger, helpers.result_body(c))
    malformed = await helpers.post_json(server_client, helpers.result_path("x" * 36), c.device, helpers.result_body(c))
    assert unknown == foreign == malformed == (404, b'{"error":"not_found"}')
    wrong_token = await helpers.post_json(
        server_client, helpers.result_path(sid), c.device, helpers.result_body(c, claim_token="2" * 64)
    )
    wrong_attempt = await helpers.post_json(
        server_client, helpers.result_path(sid), c.device, helpers.result_body(c, attempt_id=new_id())
    )
    assert wrong_token == wrong_attempt == (409, b'{"error":"claim_not_current"}')
    bad_asset = await helpers.post_json(
        server_client, helpers.result_path(sid), c.device, helpers.result_body(c, evidence_asset_id=new_id())
    )
    assert bad_asset == (409, b'{"error":"evidence_conflict"}')
    retry = await helpers.post_json(
        server_client, helpers.result_path(sid), c.device, helpers.result_body(c, observation="RETRY")
    )
    assert retry[0] == 400
    assert helpers.fingerprint(sync_conn) == before


async def test_sweeper_moves_expired_fence_to_reconciliation(
    server_client: Any,
    make_device: Maker,
    make_task: Maker,
    clock: ManualClock,
    sync_conn: sqlite3.Connection,
    caplog: pytest.LogCaptureFixture,
) -> None:
    c, sid = await helpers.fenced_http(server_client, make_device, make_task)
    app = server_client.server.app
    clock.set(from_wire(c.lease_expires_at))
    clock.advance(-0.000001)
    await run_sweep(app)
    assert helpers.task_row(sync_conn, c.task_id)["state"] == "SUBMITTING"
    clock.advance(0.000001)  # exactly at the lease end: expired
    with caplog.at_level(logging.INFO, logger="cmbuyer.server"):
        report = await run_sweep(app)
    assert report.submissions_to_reconciliation == 1
    # the sweep line of docs/operations.md "Logs", under the server's own logger
    assert [(r.name, r.getMessage()) for r in caplog.records if r.getMessage().startswith("到期清扫")] == [
        ("cmbuyer.server", "到期清扫：1 笔提交转为待人工核对，0 份授权已过期")
    ]
    task = helpers.task_row(sync_conn, c.task_id)
    assert (task["state"], task["version"]) == ("RECONCILIATION_REQUIRED", c.task_version + 2)
    sub = sync_conn.execute(
        "SELECT state, reconciliation_reason FROM order_submissions WHERE id = ?", (sid,)
    ).fetchone()
    assert tuple(sub) == ("RECONCILIATION_REQUIRED", "LEASE_EXPIRED_NO_RESULT")
    assert tuple(
        sync_conn.execute("SELECT state, close_reason FROM attempts WHERE id = ?", (c.attempt_id,)).fetchone()
    ) == ("CLOSED", "LEASE_EXPIRED_AFTER_FENCE")
    assert (await run_sweep(app)).submissions_to_reconciliation == 0  # idempotent
    # a late result is recorded but changes no state
    status, raw = await helpers.post_json(
        server_client, helpers.result_path(sid), c.device, helpers.result_body(c, "SUBMITTED")
    )
    assert status == 200, raw
    assert json.loads(raw)["submission_status"] == "RECONCILIATION_REQUIRED"
    assert json.loads(raw)["task_state"] == "RECONCILIATION_REQUIRED"
    sub = sync_conn.execute("SELECT state, observation FROM order_submissions WHERE id = ?", (sid,)).fetchone()
    assert tuple(sub) == ("RECONCILIATION_REQUIRED", "SUBMITTED")
    # never claimable again: the device (and any other) gets nothing
    for dev in (c.device, make_device("late")):
        await helpers.post_json(server_client, helpers.HEARTBEAT, dev, helpers.heartbeat_body(dev.device_id))
        status, _ = await helpers.post_json(
            server_client, helpers.CLAIM_NEXT, dev, {"session_id": new_id(), "claim_request_id": new_id()}
        )
        assert status == 204


async def test_result_after_lease_expiry_before_sweep_is_accepted(
    server_client: Any, make_device: Maker, make_task: Maker, clock: ManualClock
) -> None:
    c, sid = await helpers.fenced_http(server_client, make_device, make_task)
    clock.set(from_wire(c.lease_expires_at))
    clock.advance(30)
    status, raw = await helpers.post_json(
        server_client, helpers.result_path(sid), c.device, helpers.result_body(c, "SUBMITTED")
    )
    assert status == 200 and json.loads(raw)["task_state"] == "WAITING_PAYMENT"


async def test_pending_task_with_expired_authorization_expires(
    server_client: Any, make_task: Maker, clock: ManualClock, settings: Settings, sync_conn: sqlite3.Connection
) -> None:
    task = make_task(start=True)
    clock.advance(settings.authorization_ttl - 1)
    await run_sweep(server_client.server.app)
    assert helpers.task_row(sync_conn, task.id)["state"] == "PENDING"
    clock.advance(1)
    await run_sweep(server_client.server.app)
    row = helpers.task_row(sync_conn, task.id)
    assert (row["state"], row["version"]) == ("EXPIRED", task.version + 1)
    auth_state = sync_conn.execute("SELECT state FROM authorizations WHERE task_id = ?", (task.id,)).fetchone()[0]
    assert auth_state == "EXPIRED"


async def test_claim_expired_before_fence_is_left_alone(
    server_client: Any,
    make_device: Maker,
    make_task: Maker,
    clock: ManualClock,
    sync_conn: sqlite3.Connection,
    settings: Settings,
) -> None:
    make_task(start=True)
    c = await helpers.claim_http(server_client, make_device())
    before = helpers.fingerprint(sync_conn)
    clock.advance(settings.authorization_ttl + 10)  # lease and authorization both over
    await run_sweep(server_client.server.app)
    assert helpers.fingerprint(sync_conn) == before
    assert helpers.task_row(sync_conn, c.task_id)["state"] == "CLAIMED"
    other = make_device("other")
    await helpers.post_json(server_client, helpers.HEARTBEAT, other, helpers.heartbeat_body(other.device_id))
    status, _ = await helpers.post_json(
        server_client, helpers.CLAIM_NEXT, other, {"session_id": new_id(), "claim_request_id": new_id()}
    )
    assert status == 204


async def test_startup_recovery_runs_before_serving(
    aiohttp_client: Any,
    settings: Settings,
    clock: ManualClock,
    make_device: Maker,
    make_task: Maker,
    sync_conn: sqlite3.Connection,
) -> None:
    """Fence, stop the server, let the lease run out, start a new app: the first thing it does is the
    recovery, so the task is RECONCILIATION_REQUIRED before any device request is served."""
    first = await aiohttp_client(create_app(settings, clock))
    c, _ = await helpers.fenced_http(first, make_device, make_task)
    await first.close()
    clock.set(from_wire(c.lease_expires_at))
    client = await aiohttp_client(create_app(settings, clock))  # start-up runs the recovery sweep
    assert helpers.task_row(sync_conn, c.task_id)["state"] == "RECONCILIATION_REQUIRED"
    status, raw = await helpers.fence_http(client, c)
    assert status == 409 and b"click_permitted" not in raw
    actions = [
        r[0] for r in sync_conn.execute("SELECT action FROM audit_log WHERE subject_id = ? ORDER BY id", (c.task_id,))
    ]
    assert actions[-1] == "submission.lease_expired" and "submission.fence" in actions
