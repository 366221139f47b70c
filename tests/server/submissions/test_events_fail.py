"""Events (batched, idempotent, first event → ORDERING) and fail (before the fence only)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from cmbuyer.server.clock import ManualClock, from_wire
from tests.server.conftest import Maker
from tests.server.submissions import helpers


async def test_first_batch_moves_to_ordering_and_numbers_events(
    server_client: Any, claimed: helpers.Claim, sync_conn: sqlite3.Connection
) -> None:
    body = helpers.events_body(claimed, [helpers.event("OPEN_PRODUCT", "STARTED"), helpers.event("OPEN_PRODUCT", "OK")])
    status, raw = await helpers.post_json(server_client, helpers.events_path(claimed.task_id), claimed.device, body)
    assert status == 200, raw
    first = json.loads(raw)
    assert first == {
        "task_id": claimed.task_id,
        "attempt_id": claimed.attempt_id,
        "accepted": 2,
        "first_seq": 1,
        "last_seq": 2,
        "task_version": claimed.task_version + 1,
    }
    assert tuple(helpers.task_row(sync_conn, claimed.task_id)[k] for k in ("state", "version")) == (
        "ORDERING",
        claimed.task_version + 1,
    )
    # replay: byte-identical, nothing appended
    status, raw2 = await helpers.post_json(server_client, helpers.events_path(claimed.task_id), claimed.device, body)
    assert (status, raw2) == (200, raw)
    # next batch continues the sequence; version unchanged
    status, raw3 = await helpers.post_json(
        server_client,
        helpers.events_path(claimed.task_id),
        claimed.device,
        helpers.events_body(claimed, [helpers.event("GATE_1", "FAILED", "PRICE_CHANGED", "price moved")]),
    )
    assert json.loads(raw3)["first_seq"] == 3 and json.loads(raw3)["task_version"] == claimed.task_version + 1
    assert sync_conn.execute("SELECT count(*) FROM events").fetchone()[0] == 3
    # same key, other payload
    status, raw4 = await helpers.post_json(
        server_client,
        helpers.events_path(claimed.task_id),
        claimed.device,
        {**body, "events": [helpers.event("GATE_2")]},
    )
    assert (status, json.loads(raw4)) == (409, {"error": "idempotency_conflict"})


async def test_events_need_current_claim(
    server_client: Any, claimed: helpers.Claim, clock: ManualClock, sync_conn: sqlite3.Connection, make_device: Maker
) -> None:
    other = make_device("other")
    for creds, body in (
        (claimed.device, helpers.events_body(claimed, claim_token="1" * 64)),
        (claimed.device, helpers.events_body(claimed, claim_generation=2)),
        (other, helpers.events_body(claimed)),
    ):
        status, raw = await helpers.post_writing_nothing(
            server_client, sync_conn, helpers.events_path(claimed.task_id), creds, body
        )
        assert (status, json.loads(raw)) == (409, {"error": "claim_not_current"})
    clock.set(from_wire(claimed.lease_expires_at))
    status, raw = await helpers.post_writing_nothing(
        server_client, sync_conn, helpers.events_path(claimed.task_id), claimed.device, helpers.events_body(claimed)
    )
    assert (status, json.loads(raw)) == (409, {"error": "claim_not_current"})


async def test_post_fence_events_accepted_after_lease_expiry(
    server_client: Any, claimed: helpers.Claim, clock: ManualClock
) -> None:
    status, raw = await helpers.fence_http(server_client, claimed)
    assert status == 200
    clock.set(from_wire(claimed.lease_expires_at))
    clock.advance(5)
    status, raw = await helpers.post_json(
        server_client,
        helpers.events_path(claimed.task_id),
        claimed.device,
        helpers.events_body(claimed, [helpers.event("SUBMIT_TAP"), helpers.event("OBSERVE_RESULT")]),
    )
    assert status == 200, raw
    assert json.loads(raw)["task_version"] == claimed.task_version + 1  # SUBMITTING, unchanged


async def test_fail_closes_everything_and_replays(
    server_client: Any, claimed: helpers.Claim, sync_conn: sqlite3.Connection
) -> None:
    body = helpers.fail_body(claimed)
    status, raw = await helpers.post_json(server_client, helpers.fail_path(claimed.attempt_id), claimed.device, body)
    assert status == 200, raw
    assert json.loads(raw) == {
        "task_id": claimed.task_id,
        "attempt_id": claimed.attempt_id,
        "task_state": "FAILED",
        "task_version": claimed.task_version + 1,
        "reason_code": "SKU_VALUE_MISSING",
    }
    task = helpers.task_row(sync_conn, claimed.task_id)
    assert (task["state"], task["state_reason"]) == ("FAILED", "SKU_VALUE_MISSING")
    att = sync_conn.execute("SELECT state, close_reason FROM attempts WHERE id = ?", (claimed.attempt_id,)).fetchone()
    assert tuple(att) == ("CLOSED", "FAILED")
    auth = sync_conn.execute("SELECT state FROM authorizations WHERE id = ?", (claimed.authorization_id,)).fetchone()
    assert auth[0] == "CLOSED"
    status, raw2 = await helpers.post_json(server_client, helpers.fail_path(claimed.attempt_id), claimed.device, body)
    assert (status, raw2) == (200, raw)
    # claim is closed now: a new key is refused, and so is a fence
    status, raw3 = await helpers.post_json(
        server_client, helpers.fail_path(claimed.attempt_id), claimed.device, helpers.fail_body(claimed)
    )
    assert (status, json.loads(raw3)) == (409, {"error": "claim_not_current"})
    status, raw4 = await helpers.fence_http(server_client, claimed)
    assert status == 409 and b"click_permitted" not in raw4


async def test_fail_refused_once_fenced(
    server_client: Any, claimed: helpers.Claim, sync_conn: sqlite3.Connection
) -> None:
    status, _ = await helpers.fence_http(server_client, claimed)
    assert status == 200
    status, raw = await helpers.post_writing_nothing(
        server_client, sync_conn, helpers.fail_path(claimed.attempt_id), claimed.device, helpers.fail_body(claimed)
    )
    assert (status, json.loads(raw)) == (409, {"error": "submission_fenced"})


async def test_fail_after_lease_expiry_allowed_and_bad_asset_refused(
    server_client: Any, claimed: helpers.Claim, clock: ManualClock
) -> None:
    status, raw = await helpers.post_json(
        server_client,
        helpers.fail_path(claimed.attempt_id),
        claimed.device,
        helpers.fail_body(claimed, evidence_asset_id="63c9f507-7473-4fa6-8d71-8786c34c6301"),
    )
    assert (status, json.loads(raw)) == (409, {"error": "evidence_conflict"})
    clock.set(from_wire(claimed.lease_expires_at))
    clock.advance(60)
    status, raw = await helpers.post_json(
        server_client,
        helpers.fail_path(claimed.attempt_id),
        claimed.device,
        helpers.fail_body(claimed, reason_code="LEASE_LOST", summary="lease lost"),
    )
    assert status == 200 and json.loads(raw)["task_state"] == "FAILED"
