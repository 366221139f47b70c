"""Result (one per submission, every observation → its state) and expiry/recovery (sweeper and start-up)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from cmbuyer.server.app import create_app
from cmbuyer.server.clock import ManualClock, from_wire
from cmbuyer.server.config import Settings
from cmbuyer.server.lifecycle import run_sweep
from cmbuyer.server.tx.common import new_id
from tests.server.conftest import Maker
from tests.server.submissions.helpers import (
    CLAIM_NEXT,
    HEARTBEAT,
    claim_http,
    fence_body,
    fence_path,
    fenced_http,
    fingerprint,
    heartbeat_body,
    post_json,
    result_body,
    result_path,
    task_row,
)

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
    c, sid = await fenced_http(server_client, make_device, make_task)
    body = result_body(c, observation)
    status, raw = await post_json(server_client, result_path(sid), c.device, body)
    assert status == 200, raw
    sub_state, task_state = STATES[observation]
    assert json.loads(raw) == {
        "submission_id": sid,
        "observation": observation,
        "submission_status": sub_state,
        "task_state": task_state,
        "task_version": c.task_version + 2,
    }
    assert task_row(sync_conn, c.task_id)["state"] == task_state
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
    status, raw2 = await post_json(server_client, result_path(sid), c.device, body)
    assert (status, raw2) == (200, raw)
    before = fingerprint(sync_conn)
    status, raw3 = await post_json(server_client, result_path(sid), c.device, result_body(c, "UNKNOWN"))
    assert (status, json.loads(raw3)) == (409, {"error": "result_conflict"})
    # and a fence for this attempt never permits again
    status, raw4 = await post_json(server_client, fence_path(c.attempt_id), c.device, fence_body(c))
    assert status == 409 and b"click_permitted" not in raw4
    assert fingerprint(sync_conn) == before


async def test_result_unknown_or_foreign_submission_does_not_leak(
    server_client: Any, make_device: Maker, make_task: Maker, sync_conn: sqlite3.Connection
) -> None:
    c, sid = await fenced_http(server_client, make_device, make_task)
    stranger = make_device("stranger")
    before = fingerprint(sync_conn)
    unknown = await post_json(server_client, result_path(new_id()), c.device, result_body(c))
    foreign = await post_json(server_client, result_path(sid), stranger, result_body(c))
    malformed = await post_json(server_client, result_path("x" * 36), c.device, result_body(c))
    assert unknown == foreign == malformed == (404, b'{"error":"not_found"}')
    wrong_token = await post_json(server_client, result_path(sid), c.device, result_body(c, claim_token="2" * 64))
    wrong_attempt = await post_json(server_client, result_path(sid), c.device, result_body(c, attempt_id=new_id()))
    assert wrong_token == wrong_attempt == (409, b'{"error":"claim_not_current"}')
    bad_asset = await post_json(server_client, result_path(sid), c.device, result_body(c, evidence_asset_id=new_id()))
    assert bad_asset == (409, b'{"error":"evidence_conflict"}')
    retry = await post_json(server_client, result_path(sid), c.device, result_body(c, observation="RETRY"))
    assert retry[0] == 400
    assert fingerprint(sync_conn) == before


async def test_sweeper_moves_expired_fence_to_reconciliation(
    server_client: Any, make_device: Maker, make_task: Maker, clock: ManualClock, sync_conn: sqlite3.Connection
) -> None:
    c, sid = await fenced_http(server_client, make_device, make_task)
    app = server_client.server.app
    clock.set(from_wire(c.lease_expires_at))
    clock.advance(-0.000001)
    await run_sweep(app)
    assert task_row(sync_conn, c.task_id)["state"] == "SUBMITTING"
    clock.advance(0.000001)  # exactly at the lease end: expired
    report = await run_sweep(app)
    assert report.submissions_to_reconciliation == 1
    task = task_row(sync_conn, c.task_id)
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
    status, raw = await post_json(server_client, result_path(sid), c.device, result_body(c, "SUBMITTED"))
    assert status == 200, raw
    assert json.loads(raw)["submission_status"] == "RECONCILIATION_REQUIRED"
    assert json.loads(raw)["task_state"] == "RECONCILIATION_REQUIRED"
    sub = sync_conn.execute("SELECT state, observation FROM order_submissions WHERE id = ?", (sid,)).fetchone()
    assert tuple(sub) == ("RECONCILIATION_REQUIRED", "SUBMITTED")
    # never claimable again: the device (and any other) gets nothing
    for dev in (c.device, make_device("late")):
        await post_json(server_client, HEARTBEAT, dev, heartbeat_body(dev.device_id))
        status, _ = await post_json(
            server_client, CLAIM_NEXT, dev, {"session_id": new_id(), "claim_request_id": new_id()}
        )
        assert status == 204


async def test_result_after_lease_expiry_before_sweep_is_accepted(
    server_client: Any, make_device: Maker, make_task: Maker, clock: ManualClock
) -> None:
    c, sid = await fenced_http(server_client, make_device, make_task)
    clock.set(from_wire(c.lease_expires_at))
    clock.advance(30)
    status, raw = await post_json(server_client, result_path(sid), c.device, result_body(c, "SUBMITTED"))
    assert status == 200 and json.loads(raw)["task_state"] == "WAITING_PAYMENT"


async def test_pending_task_with_expired_authorization_expires(
    server_client: Any, make_task: Maker, clock: ManualClock, settings: Settings, sync_conn: sqlite3.Connection
) -> None:
    task = make_task(start=True)
    clock.advance(settings.authorization_ttl - 1)
    await run_sweep(server_client.server.app)
    assert task_row(sync_conn, task.id)["state"] == "PENDING"
    clock.advance(1)
    await run_sweep(server_client.server.app)
    row = task_row(sync_conn, task.id)
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
    c = await claim_http(server_client, make_device())
    before = fingerprint(sync_conn)
    clock.advance(settings.authorization_ttl + 10)  # lease and authorization both over
    await run_sweep(server_client.server.app)
    assert fingerprint(sync_conn) == before
    assert task_row(sync_conn, c.task_id)["state"] == "CLAIMED"
    other = make_device("other")
    await post_json(server_client, HEARTBEAT, other, heartbeat_body(other.device_id))
    status, _ = await post_json(
        server_client, CLAIM_NEXT, other, {"session_id": new_id(), "claim_request_id": new_id()}
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
    c, _ = await fenced_http(first, make_device, make_task)
    await first.close()
    clock.set(from_wire(c.lease_expires_at))
    client = await aiohttp_client(create_app(settings, clock))  # start-up runs the recovery sweep
    assert task_row(sync_conn, c.task_id)["state"] == "RECONCILIATION_REQUIRED"
    status, raw = await post_json(client, fence_path(c.attempt_id), c.device, fence_body(c))
    assert status == 409 and b"click_permitted" not in raw
    actions = [
        r[0] for r in sync_conn.execute("SELECT action FROM audit_log WHERE subject_id = ? ORDER BY id", (c.task_id,))
    ]
    assert actions[-1] == "submission.lease_expired" and "submission.fence" in actions
