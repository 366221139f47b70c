"""A HELD task (held by ``cmbuyer-server restore``) is refused by every device route, and a
refusal writes nothing: the claim that was live on the lost host can neither renew, report events, fail
nor take the fence, and a fenced attempt's result changes nothing. Real app over HTTP, real SQLite file."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from cmbuyer.server.clock import ManualClock
from cmbuyer.server.db import run_in_transaction
from cmbuyer.server.services import restore_hold
from cmbuyer.server.tx.common import new_id
from tests.server.conftest import TEST_ACTOR, Maker
from tests.server.submissions.helpers import (
    CLAIM_NEXT,
    HEARTBEAT,
    Claim,
    claim_http,
    events_body,
    events_path,
    fail_body,
    fail_path,
    fence_body,
    fence_path,
    fenced_http,
    fingerprint,
    heartbeat_body,
    post_json,
    renew_body,
    result_body,
    result_path,
)


def _hold(conn: sqlite3.Connection, clock: ManualClock) -> list[str]:
    return run_in_transaction(conn, lambda c: restore_hold.hold_unsettled(c, TEST_ACTOR, clock.now()))


async def test_a_held_claim_is_refused_everywhere(
    server_client: Any, make_task: Maker, make_device: Maker, sync_conn: sqlite3.Connection, clock: ManualClock
) -> None:
    make_task(start=True)
    c: Claim = await claim_http(server_client, make_device())
    make_task(start=True)  # a second task that was PENDING: held too, never offered
    assert len(_hold(sync_conn, clock)) == 2
    before = fingerprint(sync_conn)
    refusals = [
        (f"/api/v1/tasks/{c.task_id}/lease/renew", renew_body(c), "claim_not_current"),
        (events_path(c.task_id), events_body(c), "claim_not_current"),
        (fail_path(c.attempt_id), fail_body(c), "claim_not_current"),
        (fence_path(c.attempt_id), fence_body(c), "version_conflict"),  # the hold moved the version
    ]
    for path, body, code in refusals:
        status, raw = await post_json(server_client, path, c.device, body)
        assert (status, json.loads(raw)["error"]) == (409, code), path
    assert fingerprint(sync_conn) == before
    other = make_device("other")
    assert (await post_json(server_client, HEARTBEAT, other, heartbeat_body(other.device_id)))[0] == 200
    body = {"session_id": new_id(), "claim_request_id": new_id()}
    assert (await post_json(server_client, CLAIM_NEXT, other, body))[0] == 204


async def test_a_held_fenced_task_takes_no_result(
    server_client: Any, make_task: Maker, make_device: Maker, sync_conn: sqlite3.Connection, clock: ManualClock
) -> None:
    c, submission_id = await fenced_http(server_client, make_device, make_task)
    assert _hold(sync_conn, clock) == [c.task_id]
    status, raw = await post_json(server_client, result_path(submission_id), c.device, result_body(c))
    assert (status, json.loads(raw)["error"]) == (409, "invalid_state")
    state = sync_conn.execute("SELECT state FROM order_submissions WHERE id = ?", (submission_id,)).fetchone()[0]
    assert state == "FENCED"
    assert sync_conn.execute("SELECT state FROM tasks WHERE id = ?", (c.task_id,)).fetchone()[0] == "HELD"
