"""The fence of a supervised attempt: it needs this attempt's APPROVED request for exactly the
readings it is asked with; otherwise ``409 approval_required`` and nothing is written. Closing an attempt voids
its live request."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from typing import Any

import pytest

from cmbuyer.schemas import validate
from cmbuyer.server.clock import ManualClock, from_wire
from cmbuyer.server.db import run_in_transaction
from cmbuyer.server.services import admin_actions, recovery
from cmbuyer.server.tx.common import Actor
from tests.server.conftest import DeviceMaker, Maker
from tests.server.submissions.helpers import (
    Claim,
    claim_http,
    fail_body,
    fail_path,
    fence_body,
    fence_path,
    post_json,
    result_body,
    result_path,
)
from tests.server.supervision import helpers

APPROVAL_REQUIRED = {"error": "approval_required"}


async def _approved(client: Any, conn: sqlite3.Connection, c: Claim, readings: dict[str, Any]) -> str:
    """Ask for approval of ``readings`` with a real gate-3 screenshot and let a person approve it."""
    shot = await helpers.gate3_screenshot(client, c)
    status, answer, raw = await helpers.ask(client, c, helpers.approval_body(c, shot, readings))
    assert status == 200, raw
    helpers.person_decides(conn, answer["approval_id"])
    approval_id: str = answer["approval_id"]
    return approval_id


async def _fence(client: Any, c: Claim, body: dict[str, Any]) -> tuple[int, Any]:
    status, raw = await post_json(client, fence_path(c.attempt_id), c.device, body)
    return status, json.loads(raw)


async def test_without_approval_409_nothing_written_then_the_same_key_goes_through(
    server_client: Any, claimed: Claim, sync_conn: sqlite3.Connection
) -> None:
    body = fence_body(claimed)
    before = helpers.fingerprint(sync_conn)
    status, answer = await _fence(server_client, claimed, body)
    assert (status, answer) == (409, APPROVAL_REQUIRED)
    validate("device_error.response", answer)
    assert helpers.fingerprint(sync_conn) == before  # no submission, no state change, no request record
    # a WAITING request does not count either
    shot = await helpers.gate3_screenshot(server_client, claimed)
    _, waiting, _ = await helpers.ask(
        server_client, claimed, helpers.approval_body(claimed, shot, helpers.readings_of(body))
    )
    before = helpers.fingerprint(sync_conn)
    assert await _fence(server_client, claimed, body) == (409, APPROVAL_REQUIRED)
    assert helpers.fingerprint(sync_conn) == before
    # once a person approved these readings, the very same fence_key gets the permit
    helpers.person_decides(sync_conn, waiting["approval_id"])
    status, answer = await _fence(server_client, claimed, body)
    assert status == 200 and answer["click_permitted"] is True
    assert sync_conn.execute("SELECT count(*) FROM order_submissions").fetchone()[0] == 1


async def test_approved_readings_permit_even_in_another_spelling(
    server_client: Any, claimed: Claim, sync_conn: sqlite3.Connection
) -> None:
    body = fence_body(claimed)
    # the fence compares NFKC and trimmed names: the approval is bound to that comparison form
    await _approved(server_client, sync_conn, claimed, {**helpers.readings_of(body), "payment_mode": " 微信支付"})
    status, answer = await _fence(server_client, claimed, body)
    assert status == 200 and answer["click_permitted"] is True


@pytest.mark.parametrize(
    "key,stale",
    [("gate3_unit_price", "12.87"), ("confirm_page_amount", "25.75"), ("payment_mode", "支付宝"), ("quantity_read", 1)],
)
async def test_stale_readings_do_not_count(
    server_client: Any, claimed: Claim, sync_conn: sqlite3.Connection, key: str, stale: Any
) -> None:
    body = fence_body(claimed)
    await _approved(server_client, sync_conn, claimed, {**helpers.readings_of(body), key: stale})
    before = helpers.fingerprint(sync_conn)
    assert await _fence(server_client, claimed, body) == (409, APPROVAL_REQUIRED)
    assert helpers.fingerprint(sync_conn) == before


async def test_approval_of_another_attempt_does_not_count(
    server_client: Any, claimed: Claim, sync_conn: sqlite3.Connection, make_device: DeviceMaker, make_task: Maker
) -> None:
    make_task(start=True, goods_id="937122477376")  # the same SKU, quantity and prices: the same readings
    other = await claim_http(server_client, make_device("phone-2"))
    body = fence_body(claimed)
    await _approved(server_client, sync_conn, other, helpers.readings_of(body))
    before = helpers.fingerprint(sync_conn)
    assert await _fence(server_client, claimed, body) == (409, APPROVAL_REQUIRED)
    assert helpers.fingerprint(sync_conn) == before
    status, answer = await _fence(server_client, other, fence_body(other))
    assert status == 200 and answer["click_permitted"] is True


async def test_gate_refusals_come_first(server_client: Any, claimed: Claim, sync_conn: sqlite3.Connection) -> None:
    """An unapproved fence that also breaks a gate says which gate (the definite problem)."""
    status, answer = await _fence(server_client, claimed, fence_body(claimed, quantity_read=3))
    assert (status, answer) == (409, {"error": "fence_refused", "detail": "quantity_mismatch"})


@pytest.mark.parametrize("supervised_orders", ["0"])
async def test_unsupervised_attempt_needs_no_approval(server_client: Any, claimed: Claim) -> None:
    status, answer = await _fence(server_client, claimed, fence_body(claimed))
    assert status == 200 and answer["click_permitted"] is True


async def test_failing_the_attempt_voids_its_approval(
    server_client: Any, claimed: Claim, sync_conn: sqlite3.Connection
) -> None:
    approval_id = await _approved(server_client, sync_conn, claimed, helpers.readings_of(fence_body(claimed)))
    status, raw = await post_json(
        server_client,
        fail_path(claimed.attempt_id),
        claimed.device,
        fail_body(claimed, reason_code="REJECTED_BY_REVIEWER"),
    )
    assert status == 200, raw
    row = helpers.approval_row(sync_conn, approval_id)
    assert (row.state, row.decided_by) == ("VOID", "admin:reviewer")  # who approved stays on record
    status, answer = await helpers.status_of(server_client, claimed, approval_id)
    assert (status, answer["state"], answer["decided_at"]) == (200, "VOID", "2026-08-04T09:00:30.000000Z")
    void = sync_conn.execute("SELECT actor_kind, detail_json FROM audit_log WHERE action = 'approval.void'").fetchone()
    assert void[0] == "device" and json.loads(void[1])["why"] == "FAILED"
    # a closed attempt cannot ask again nor fence
    shot_free = helpers.approval_body(
        claimed,
        helpers.approval_row(sync_conn, approval_id).screenshot_asset_id,
        helpers.readings_of(fence_body(claimed)),
    )
    assert (await helpers.ask(server_client, claimed, shot_free))[:2] == (409, {"error": "claim_not_current"})
    assert await _fence(server_client, claimed, fence_body(claimed)) == (409, {"error": "claim_not_current"})


@pytest.mark.parametrize("action", ["reset_to_draft", "cancel"])
async def test_admin_reset_and_cancel_void_a_waiting_request(
    server_client: Any, claimed: Claim, sync_conn: sqlite3.Connection, clock: ManualClock, action: str
) -> None:
    shot = await helpers.gate3_screenshot(server_client, claimed)
    _, waiting, _ = await helpers.ask(
        server_client, claimed, helpers.approval_body(claimed, shot, helpers.readings_of(fence_body(claimed)))
    )
    version = sync_conn.execute("SELECT version FROM tasks WHERE id = ?", (claimed.task_id,)).fetchone()[0]
    run_in_transaction(
        sync_conn,
        lambda c: getattr(admin_actions, action)(
            c, claimed.task_id, version, None, Actor("admin", "boss"), clock.now()
        ),
    )
    row = helpers.approval_row(sync_conn, waiting["approval_id"])
    assert (row.state, row.decided_by, row.decided_at) == ("VOID", None, None)
    void = sync_conn.execute("SELECT actor_kind, actor_id FROM audit_log WHERE action = 'approval.void'").fetchone()
    assert tuple(void) == ("admin", "boss")


async def test_result_and_sweeper_void_the_used_approval(
    server_client: Any,
    claimed: Claim,
    sync_conn: sqlite3.Connection,
    clock: ManualClock,
    make_device: DeviceMaker,
    make_task: Maker,
) -> None:
    approval_id = await _approved(server_client, sync_conn, claimed, helpers.readings_of(fence_body(claimed)))
    status, answer = await _fence(server_client, claimed, fence_body(claimed))
    assert status == 200
    assert helpers.approval_row(sync_conn, approval_id).state == "APPROVED"  # the fence itself leaves it as it is
    status, raw = await post_json(
        server_client, result_path(answer["submission_id"]), claimed.device, result_body(claimed)
    )
    assert status == 200, raw
    assert helpers.approval_row(sync_conn, approval_id).state == "VOID"
    # the sweeper closes a fenced attempt whose lease ran out without a result
    make_task(start=True, goods_id="937122477377")
    late = await claim_http(server_client, make_device("phone-3"))
    late_id = await _approved(server_client, sync_conn, late, helpers.readings_of(fence_body(late)))
    assert (await _fence(server_client, late, fence_body(late)))[0] == 200
    now = from_wire(late.lease_expires_at) + timedelta(seconds=1)
    run_in_transaction(sync_conn, lambda c: recovery.sweep(c, now))
    assert helpers.approval_row(sync_conn, late_id).state == "VOID"
    void = sync_conn.execute(
        "SELECT actor_kind, detail_json FROM audit_log WHERE action = 'approval.void' ORDER BY id DESC"
    ).fetchone()
    assert void[0] == "system" and json.loads(void[1])["why"] == "LEASE_EXPIRED_AFTER_FENCE"
