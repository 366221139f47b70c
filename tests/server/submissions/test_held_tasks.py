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
from tests.server.submissions import helpers


def _hold(conn: sqlite3.Connection, clock: ManualClock) -> list[str]:
    return run_in_transaction(conn, lambda c: restore_hold.hold_unsettled(c, TEST_ACTOR, clock.now()))


async def test_a_held_claim_is_refused_everywhere(
    server_client: Any, make_task: Maker, make_device: Maker, sync_conn: sqlite3.Connection, clock: ManualClock
) -> None:
    make_task(start=True)
    c: helpers.Claim = await helpers.claim_http(server_client, make_device())
    make_task(start=True)  # a second task that was PENDING: held too, never offered
    assert len(_hold(sync_conn, clock)) == 2
    before = helpers.fingerprint(sync_conn)
    refusals = [
        (f"/api/v1/tasks/{c.task_id}/lease/renew", helpers.renew_body(c), "claim_not_current"),
        (helpers.events_path(c.task_id), helpers.events_body(c), "claim_not_current"),
        (helpers.fail_path(c.attempt_id), helpers.fail_body(c), "claim_not_current"),
        (helpers.fence_path(c.attempt_id), helpers.fence_body(c), "version_conflict"),  # the hold moved the version
    ]
    for path, body, code in refusals:
        status, raw = await helpers.post_json(server_client, path, c.device, body)
        assert (status, json.loads(raw)["error"]) == (409, code), path
    assert helpers.fingerprint(sync_conn) == before
    other = make_device("other")
    assert (await helpers.post_json(server_client, helpers.HEARTBEAT, other, helpers.heartbeat_body(other.device_id)))[
        0
    ] == 200
    body = {"session_id": new_id(), "claim_request_id": new_id()}
    assert (await helpers.post_json(server_client, helpers.CLAIM_NEXT, other, body))[0] == 204


async def test_a_held_fenced_task_takes_no_result(
    server_client: Any, make_task: Maker, make_device: Maker, sync_conn: sqlite3.Connection, clock: ManualClock
) -> None:
    c, submission_id = await helpers.fenced_http(server_client, make_device, make_task)
    assert _hold(sync_conn, clock) == [c.task_id]
    status, raw = await helpers.post_json(
        server_client, helpers.result_path(submission_id), c.device, helpers.result_body(c)
    )
    assert (status, json.loads(raw)["error"]) == (409, "invalid_state")
    state = sync_conn.execute("SELECT state FROM order_submissions WHERE id = ?", (submission_id,)).fetchone()[0]
    assert state == "FENCED"
    assert sync_conn.execute("SELECT state FROM tasks WHERE id = ?", (c.task_id,)).fetchone()[0] == "HELD"
