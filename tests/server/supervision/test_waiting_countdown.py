"""Approvals a person notices: the approval request may say how long the phone waits
(``timeout_seconds``, the agent's CMBUYER_AGENT_APPROVAL_TIMEOUT_SECONDS); the server keeps when it gives
up, and the task table counts the waiting orders, filters them (等待人工确认) and counts down to each one's
timeout; a task whose phone gave up says so."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from typing import Any

from cmbuyer.server.clock import ManualClock, to_wire
from tests.server.admin.conftest import admin, login  # noqa: F401 — fixture
from tests.server.submissions.helpers import Claim, fail_body, fail_path, fence_body, post_json
from tests.server.supervision.helpers import approval_body, ask, gate3_screenshot, readings_of


async def test_wait_until_count_filter_countdown_and_timeout_label(
    server_client: Any,
    claimed: Claim,
    other_claimed: Claim,
    sync_conn: sqlite3.Connection,
    clock: ManualClock,
    admin: str,  # noqa: F811
) -> None:
    start = clock.now()
    status, body, raw = await ask(
        server_client,
        claimed,
        approval_body(
            claimed,
            await gate3_screenshot(server_client, claimed),
            readings_of(fence_body(claimed)),
            timeout_seconds=300,
        ),
    )
    assert status == 200, raw
    status, other, raw = await ask(
        server_client,
        other_claimed,
        approval_body(
            other_claimed, await gate3_screenshot(server_client, other_claimed), readings_of(fence_body(other_claimed))
        ),
    )
    assert status == 200, raw
    until = dict(sync_conn.execute("SELECT id, wait_until FROM approval_requests").fetchall())
    assert until[body["approval_id"]] == to_wire(start + timedelta(seconds=300))
    assert until[other["approval_id"]] == to_wire(start + timedelta(seconds=600))  # an older agent: its default

    assert (await login(server_client)).status == 303
    clock.advance(61)
    html = await (await server_client.get("/tasks")).text()
    assert "<strong>2</strong> 单等待人工确认" in html and "最早一单 3:59 后超时" in html
    assert "剩 3:59" in html and "剩 8:59" in html
    only = await (await server_client.get("/tasks?state=waiting_approval")).text()
    assert claimed.task_id in only and other_claimed.task_id in only
    assert 'value="waiting_approval" selected' in only

    # the phone gave up (APPROVAL_TIMEOUT): the task says so, and it no longer counts
    status, raw = await post_json(
        server_client, fail_path(claimed.attempt_id), claimed.device, fail_body(claimed, reason_code="APPROVAL_TIMEOUT")
    )
    assert status == 200, raw
    html = await (await server_client.get("/tasks")).text()
    assert "<strong>1</strong> 单等待人工确认" in html
    detail = await (await server_client.get(f"/tasks/{claimed.task_id}")).text()
    assert "等待人工确认超时" in detail
