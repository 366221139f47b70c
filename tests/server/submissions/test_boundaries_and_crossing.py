"""Time boundaries (now == expires_at is expired, everywhere), the sweeper racing a fence/result at
the exact lease end, non-canonical path ids, URL-vs-body id mismatches, and one idempotency key used
across endpoints and devices. Every refusal is a documented 4xx that writes nothing."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import timedelta
from typing import Any

import pytest

from cmbuyer.server.clock import ManualClock, from_wire
from cmbuyer.server.services import fence as fence_service
from cmbuyer.server.services import recovery
from cmbuyer.server.services import submission_result as result_service
from cmbuyer.server.tx.common import new_id
from cmbuyer.server.web.keys import DB
from tests.server.conftest import Maker
from tests.server.submissions import helpers

RENEW = "/api/v1/tasks/{}/lease/renew"


async def _fence(client: Any, c: helpers.Claim, **over: Any) -> tuple[int, Any]:
    status, raw = await helpers.fence_http(client, c, **over)
    return status, json.loads(raw) if raw else None


# --- now == lease end ---------------------------------------------------------------------------------


async def test_lease_end_is_expired_for_fence_renew_events(
    server_client: Any, claimed: helpers.Claim, clock: ManualClock, sync_conn: sqlite3.Connection
) -> None:
    clock.set(claimed.lease_expires_at)
    before = helpers.fingerprint(sync_conn)
    assert await _fence(server_client, claimed) == (409, {"error": "claim_not_current"})
    status, raw = await helpers.post_json(
        server_client, RENEW.format(claimed.task_id), claimed.device, helpers.renew_body(claimed)
    )
    assert (status, json.loads(raw)) == (409, {"error": "claim_not_current"})
    status, raw = await helpers.post_json(
        server_client, helpers.events_path(claimed.task_id), claimed.device, helpers.events_body(claimed)
    )
    assert (status, json.loads(raw)) == (409, {"error": "claim_not_current"})
    assert helpers.fingerprint(sync_conn) == before
    # one microsecond earlier everything is still current
    clock.set(from_wire(claimed.lease_expires_at) - timedelta(microseconds=1))
    assert (await _fence(server_client, claimed))[0] == 200


async def test_sweeper_at_lease_end_never_reopens_the_fence(
    server_client: Any, claimed: helpers.Claim, clock: ManualClock, make_device: Maker, sync_conn: sqlite3.Connection
) -> None:
    status, body = await _fence(server_client, claimed)
    assert status == 200 and body["click_permitted"] is True
    lease = sync_conn.execute("SELECT lease_expires_at FROM attempts WHERE id = ?", (claimed.attempt_id,)).fetchone()[0]
    clock.set(lease)
    app = server_client.server.app
    report = await app[DB].write(lambda c: recovery.sweep(c, clock.now()))
    assert report.submissions_to_reconciliation == 1
    # nothing can fence again: same attempt with a new key, a new claim by anyone
    assert (await _fence(server_client, claimed))[0] == 409
    other = make_device("b")
    await helpers.post_json(server_client, "/api/v1/devices/heartbeat", other, helpers.heartbeat_body(other.device_id))
    status, _ = await helpers.post_json(
        server_client, helpers.CLAIM_NEXT, other, {"session_id": new_id(), "claim_request_id": new_id()}
    )
    assert status == 204
    assert sync_conn.execute("SELECT count(*) FROM order_submissions").fetchone()[0] == 1
    for _ in range(3):  # the sweeper is idempotent and never releases anything
        assert (await app[DB].write(lambda c: recovery.sweep(c, clock.now()))).submissions_to_reconciliation == 0
    row = sync_conn.execute("SELECT state FROM tasks WHERE id = ?", (claimed.task_id,)).fetchone()
    assert row[0] == "RECONCILIATION_REQUIRED"


@pytest.mark.parametrize("fence_first", [True, False])
@pytest.mark.parametrize("offset_us", [0, -1])
async def test_sweeper_races_fence_at_exact_lease_end(
    server_client: Any,
    claimed: helpers.Claim,
    clock: ManualClock,
    sync_conn: sqlite3.Connection,
    fence_first: bool,
    offset_us: int,
) -> None:
    """Both jobs in one group-committed batch, in both orders, at lease end and 1 µs before it."""
    clock.set(from_wire(claimed.lease_expires_at) + timedelta(microseconds=offset_us))
    db = server_client.server.app[DB]
    now = clock.now()
    fence_job = helpers.fence_job(claimed, helpers.fence_body(claimed), now)

    def sweep_job(conn: sqlite3.Connection) -> Any:
        return recovery.sweep(conn, now)

    jobs = [fence_job, sweep_job] if fence_first else [sweep_job, fence_job]
    results = await asyncio.gather(*(db.write(j) for j in jobs), return_exceptions=True)
    fence_result = results[0 if fence_first else 1]
    permits = 1 if isinstance(fence_result, fence_service.FenceAnswer) and fence_result.permit else 0
    if offset_us == 0:
        assert permits == 0  # equal is expired: no permit whatever the order
    else:
        assert permits == 1
    subs = sync_conn.execute("SELECT state FROM order_submissions").fetchall()
    assert len(subs) == permits
    if permits:
        assert subs[0][0] == "FENCED"  # the sweeper did not touch a lease that is still live
        clock.set(claimed.lease_expires_at)
        assert (await db.write(lambda c: recovery.sweep(c, clock.now()))).submissions_to_reconciliation == 1


@pytest.mark.parametrize("result_first", [True, False])
async def test_sweeper_races_result_at_exact_lease_end(
    server_client: Any, claimed: helpers.Claim, clock: ManualClock, sync_conn: sqlite3.Connection, result_first: bool
) -> None:
    status, body = await _fence(server_client, claimed)
    sid = body["submission_id"]
    lease = sync_conn.execute("SELECT lease_expires_at FROM attempts WHERE id = ?", (claimed.attempt_id,)).fetchone()[0]
    clock.set(lease)
    now = clock.now()
    db = server_client.server.app[DB]
    rbody = helpers.result_body(claimed, "SUBMITTED")

    def result_job(conn: sqlite3.Connection) -> Any:
        return result_service.report_result(
            conn, device_id=claimed.device.device_id, submission_id=sid, body=rbody, now=now
        )

    def sweep_job(conn: sqlite3.Connection) -> Any:
        return recovery.sweep(conn, now)

    jobs = [result_job, sweep_job] if result_first else [sweep_job, result_job]
    results = await asyncio.gather(*(db.write(j) for j in jobs), return_exceptions=True)
    assert not any(isinstance(r, BaseException) for r in results), results
    res = json.loads(results[0 if result_first else 1].body)
    task_state = sync_conn.execute("SELECT state FROM tasks WHERE id = ?", (claimed.task_id,)).fetchone()[0]
    sub = sync_conn.execute("SELECT state, observation FROM order_submissions WHERE id = ?", (sid,)).fetchone()
    if result_first:
        assert (res["submission_status"], task_state, sub[0]) == ("SUBMITTED", "WAITING_PAYMENT", "SUBMITTED")
    else:  # late result is recorded, nothing changes state, a person decides
        assert (res["submission_status"], task_state) == ("RECONCILIATION_REQUIRED", "RECONCILIATION_REQUIRED")
        assert tuple(sub) == ("RECONCILIATION_REQUIRED", "SUBMITTED")
    assert sync_conn.execute("SELECT count(*) FROM order_submissions").fetchone()[0] == 1
    # the same key replays byte for byte; another key is a result_conflict
    status, raw = await helpers.post_json(server_client, helpers.result_path(sid), claimed.device, rbody)
    assert (status, raw) == (200, results[0 if result_first else 1].body.encode())
    status, raw = await helpers.post_json(
        server_client, helpers.result_path(sid), claimed.device, helpers.result_body(claimed)
    )
    assert (status, json.loads(raw)) == (409, {"error": "result_conflict"})


# --- path ids -----------------------------------------------------------------------------------------


def _noncanonical(good: str) -> list[str]:
    return [
        good.upper(),
        "{" + good + "}",
        good.replace("-", ""),
        "urn:uuid:" + good,
        good + "%0A",
        good + "%20",
        "%20" + good,
        good[:14] + "1" + good[15:],
        good[:19] + "c" + good[20:],
        good[:-1],
        good + "0",
        "１" + good[1:],
        good.replace("-", "%2D", 1) + "x",
        "..",
        "%2e%2e",
        "a" * 5000,
        "00000000-0000-0000-0000-000000000000",
    ]


async def test_non_canonical_path_ids(
    server_client: Any, claimed: helpers.Claim, sync_conn: sqlite3.Connection
) -> None:
    before = helpers.fingerprint(sync_conn)
    data = helpers.png()
    mp, ctype = helpers.multipart(helpers.evidence_fields(claimed, data), data)
    for bad in _noncanonical(claimed.task_id):
        for path, body, expected in (
            (helpers.events_path(bad), helpers.events_body(claimed), 400),
            (RENEW.format(bad), helpers.renew_body(claimed), 400),
            (helpers.fence_path(bad), helpers.fence_body(claimed), 400),
            (helpers.fail_path(bad), helpers.fail_body(claimed), 400),
            (helpers.result_path(bad), helpers.result_body(claimed), 404),
        ):
            status, raw = await helpers.post_json(server_client, path, claimed.device, body)
            assert status in (expected, 404), (path, status, raw)  # 404: the router did not match at all
            assert status < 500
        status, _ = await helpers.upload(server_client, claimed.device, bad, mp, ctype)
        assert status in (400, 404), bad
    assert helpers.fingerprint(sync_conn) == before


# --- URL vs body, crossing attempts/tasks/devices -------------------------------------------------------


async def test_url_and_body_ids_must_agree(
    server_client: Any, claimed: helpers.Claim, make_task: Maker, make_device: Maker, sync_conn: sqlite3.Connection
) -> None:
    make_task(start=True)
    other = await helpers.claim_http(server_client, make_device("b"))
    before = helpers.fingerprint(sync_conn)
    conflict = {"error": "claim_not_current"}
    cases = [
        (helpers.events_path(other.task_id), helpers.events_body(claimed)),  # my attempt, other task in URL
        (helpers.events_path(claimed.task_id), helpers.events_body(claimed, attempt_id=other.attempt_id)),
        (RENEW.format(other.task_id), helpers.renew_body(claimed)),
        (helpers.fence_path(claimed.attempt_id), helpers.fence_body(claimed, task_id=other.task_id)),
        (helpers.fence_path(claimed.attempt_id), helpers.fence_body(claimed, authorization_id=other.authorization_id)),
        (helpers.fence_path(other.attempt_id), helpers.fence_body(claimed)),  # other device's attempt, my token
        (helpers.fail_path(other.attempt_id), helpers.fail_body(claimed)),
        (helpers.fence_path(claimed.attempt_id), helpers.fence_body(claimed, claim_token=other.token)),  # stolen token
        (helpers.fence_path(claimed.attempt_id), helpers.fence_body(claimed, claim_generation=2)),
    ]
    for path, body in cases:
        status, raw = await helpers.post_json(server_client, path, claimed.device, body)
        assert (status, json.loads(raw)) == (409, conflict), path
    # the other device presenting my attempt with my (stolen) token is still not my device
    for path, body in (
        (helpers.fence_path(claimed.attempt_id), helpers.fence_body(claimed)),
        (helpers.fail_path(claimed.attempt_id), helpers.fail_body(claimed)),
        (helpers.events_path(claimed.task_id), helpers.events_body(claimed)),
    ):
        status, raw = await helpers.post_json(server_client, path, other.device, body)
        assert (status, json.loads(raw)) == (409, conflict), path
    data = helpers.png()
    mp, ctype = helpers.multipart(helpers.evidence_fields(claimed, data), data)
    status, raw = await helpers.upload(server_client, claimed.device, other.task_id, mp, ctype)
    assert (status, json.loads(raw)) == (409, conflict)
    assert helpers.fingerprint(sync_conn) == before
    # result: other device's submission is 404; my submission with the other attempt id is 409
    _, mine = await _fence(server_client, claimed)
    status, raw = await helpers.post_json(
        server_client, helpers.result_path(mine["submission_id"]), other.device, helpers.result_body(other)
    )
    assert (status, json.loads(raw)) == (404, {"error": "not_found"})
    status, raw = await helpers.post_json(
        server_client,
        helpers.result_path(mine["submission_id"]),
        claimed.device,
        helpers.result_body(claimed, attempt_id=other.attempt_id),
    )
    assert (status, json.loads(raw)) == (409, conflict)


async def test_one_key_across_endpoints_and_devices(
    server_client: Any, claimed: helpers.Claim, make_device: Maker, make_task: Maker, sync_conn: sqlite3.Connection
) -> None:
    key = new_id()
    status, _ = await helpers.post_json(
        server_client, helpers.events_path(claimed.task_id), claimed.device, helpers.events_body(claimed, batch_key=key)
    )
    assert status == 200
    before = helpers.fingerprint(sync_conn)
    idem = {"error": "idempotency_conflict"}
    for path, body in (
        (helpers.fence_path(claimed.attempt_id), helpers.fence_body(claimed, fence_key=key)),
        (helpers.fail_path(claimed.attempt_id), helpers.fail_body(claimed, fail_key=key)),
        (RENEW.format(claimed.task_id), helpers.renew_body(claimed, renew_request_id=key)),
        (helpers.CLAIM_NEXT, {"session_id": claimed.session_id, "claim_request_id": key}),
    ):
        status, raw = await helpers.post_json(server_client, path, claimed.device, body)
        assert (status, json.loads(raw)) == (409, idem), path
    make_task(start=True)
    other = await helpers.claim_http(server_client, make_device("b"))
    before = helpers.fingerprint(sync_conn)
    for path, body in (
        (helpers.events_path(other.task_id), helpers.events_body(other, batch_key=key)),
        (helpers.fence_path(other.attempt_id), helpers.fence_body(other, fence_key=key)),
        (helpers.CLAIM_NEXT, {"session_id": other.session_id, "claim_request_id": key}),
    ):
        status, raw = await helpers.post_json(server_client, path, other.device, body)
        assert (status, json.loads(raw)) == (409, idem), path
    assert helpers.fingerprint(sync_conn) == before
    # and the permit is still available to the rightful fence (the event moved the task to ORDERING)
    status, body = await _fence(server_client, claimed, expected_task_version=claimed.task_version + 1)
    assert status == 200 and body["click_permitted"] is True
