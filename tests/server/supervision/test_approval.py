"""``POST /api/v1/purchase-attempts/{aid}/approval`` and ``…/approval/status`` (docs/api.md "Supervised first orders:
approval before the fence"): created once per
readings, replayed byte for byte, bound to the claim like the fence, refused with documented codes."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from cmbuyer.schemas import validate
from cmbuyer.server.clock import ManualClock, from_wire
from cmbuyer.server.domain.supervision import readings_hash
from cmbuyer.server.tx.common import new_id
from tests.server.submissions.helpers import Claim, fence_body, post_json
from tests.server.supervision import helpers


@pytest.fixture
async def shot(server_client: Any, claimed: Claim) -> str:
    """A real gate-3 screenshot of the claimed (supervised) attempt."""
    return await helpers.gate3_screenshot(server_client, claimed)


async def test_create_replay_and_conflict(
    server_client: Any, claimed: Claim, shot: str, sync_conn: sqlite3.Connection
) -> None:
    readings = helpers.readings_of(fence_body(claimed))
    body = helpers.approval_body(claimed, shot, readings)
    status, answer, raw = await helpers.ask(server_client, claimed, body)
    assert status == 200, raw
    validate("approval.response", answer)
    assert answer["state"] == "WAITING" and answer["decided_at"] is None
    row = helpers.approval_row(sync_conn, answer["approval_id"])
    assert (row.attempt_id, row.task_id, row.device_id, row.screenshot_asset_id) == (
        claimed.attempt_id,
        claimed.task_id,
        claimed.device.device_id,
        shot,
    )
    assert row.readings_hash == readings_hash(readings) and json.loads(row.readings_json) == readings
    audit = sync_conn.execute(
        "SELECT actor_kind, actor_id, detail_json FROM audit_log WHERE action = 'approval.request'"
    ).fetchall()
    assert len(audit) == 1 and tuple(audit[0][:2]) == ("device", claimed.device.device_id)
    assert json.loads(audit[0][2])["approval_id"] == answer["approval_id"]
    # same key, same body → the stored answer byte for byte (also after a person decided: poll status for news)
    helpers.person_decides(sync_conn, answer["approval_id"])
    assert (await helpers.ask(server_client, claimed, body))[::2] == (200, raw)
    # same key, another body → 409, nothing written
    before = helpers.fingerprint(sync_conn)
    status, other, _ = await helpers.ask(server_client, claimed, {**body, "readings": {**readings, "quantity_read": 3}})
    assert (status, other) == (409, {"error": "idempotency_conflict"})
    assert helpers.fingerprint(sync_conn) == before


async def test_new_readings_void_the_old_request_same_readings_answer_it(
    server_client: Any, claimed: Claim, shot: str, sync_conn: sqlite3.Connection
) -> None:
    readings = helpers.readings_of(fence_body(claimed))
    _, first, _ = await helpers.ask(server_client, claimed, helpers.approval_body(claimed, shot, readings))
    # an agent asking again (new key) with the same readings gets the same request, nothing new is stored
    _, again, _ = await helpers.ask(server_client, claimed, helpers.approval_body(claimed, shot, dict(readings)))
    assert again["approval_id"] == first["approval_id"] and again["state"] == "WAITING"
    helpers.person_decides(sync_conn, first["approval_id"])
    _, approved, _ = await helpers.ask(server_client, claimed, helpers.approval_body(claimed, shot, readings))
    assert (approved["approval_id"], approved["state"], approved["decided_at"]) == (
        first["approval_id"],
        "APPROVED",
        "2026-08-04T09:00:30.000000Z",
    )
    # other readings → the approved one becomes VOID (keeping who decided), a new one WAITS
    changed = {**readings, "gate3_unit_price": "12.87"}
    _, second, _ = await helpers.ask(server_client, claimed, helpers.approval_body(claimed, shot, changed))
    assert second["approval_id"] != first["approval_id"] and second["state"] == "WAITING"
    old = helpers.approval_row(sync_conn, first["approval_id"])
    assert (old.state, old.decided_by) == ("VOID", "admin:reviewer")
    assert (await helpers.status_of(server_client, claimed, first["approval_id"]))[1]["state"] == "VOID"
    voids = sync_conn.execute("SELECT detail_json FROM audit_log WHERE action = 'approval.void'").fetchall()
    assert [json.loads(v[0])["why"] for v in voids] == ["new_readings"]


async def test_a_rejection_stands_for_the_attempt(
    server_client: Any, claimed: Claim, shot: str, sync_conn: sqlite3.Connection
) -> None:
    readings = helpers.readings_of(fence_body(claimed))
    _, first, _ = await helpers.ask(server_client, claimed, helpers.approval_body(claimed, shot, readings))
    helpers.person_decides(sync_conn, first["approval_id"], "reject")
    for again in (readings, {**readings, "payment_mode": "支付宝"}):
        status, answer, _ = await helpers.ask(server_client, claimed, helpers.approval_body(claimed, shot, again))
        assert status == 200 and (answer["approval_id"], answer["state"]) == (first["approval_id"], "REJECTED")
    assert sync_conn.execute("SELECT count(*) FROM approval_requests").fetchone()[0] == 1


async def test_status_route(
    server_client: Any,
    claimed: Claim,
    other_claimed: Claim,
    shot: str,
    sync_conn: sqlite3.Connection,
) -> None:
    _, created, _ = await helpers.ask(
        server_client, claimed, helpers.approval_body(claimed, shot, helpers.readings_of(fence_body(claimed)))
    )
    approval_id = created["approval_id"]
    status, answer = await helpers.status_of(server_client, claimed, approval_id)
    assert status == 200 and answer["state"] == "WAITING"
    validate("approval.response", answer)
    before = helpers.fingerprint(sync_conn)
    helpers.person_decides(sync_conn, approval_id)
    status, answer = await helpers.status_of(server_client, claimed, approval_id)
    assert (status, answer["state"], answer["decided_at"]) == (200, "APPROVED", "2026-08-04T09:00:30.000000Z")
    # read-only: polling changes nothing (beyond what the person's decision changed)
    after_decision = helpers.fingerprint(sync_conn)
    await helpers.status_of(server_client, claimed, approval_id)
    assert (
        helpers.fingerprint(sync_conn) == after_decision
        and after_decision["device_requests"] == before["device_requests"]
    )
    assert await helpers.status_of(server_client, claimed, approval_id, claim_token="0" * 64) == (
        409,
        {"error": "claim_not_current"},
    )
    assert await helpers.status_of(server_client, claimed, approval_id, claim_generation=2) == (
        409,
        {"error": "claim_not_current"},
    )
    assert await helpers.status_of(server_client, claimed, new_id()) == (404, {"error": "not_found"})
    # another device — even with its own valid claim — and another attempt's URL look like an unknown id
    for url_of, sender in ((claimed, other_claimed), (other_claimed, claimed)):
        status, raw = await post_json(
            server_client,
            helpers.status_path(url_of.attempt_id),
            sender.device,
            {"approval_id": approval_id, "claim_generation": 1, "claim_token": sender.token},
        )
        assert (status, json.loads(raw)) == (404, {"error": "not_found"}), sender.device.device_id


@pytest.mark.parametrize("supervised_orders", ["0"])
async def test_not_supervised(server_client: Any, claimed: Claim, shot: str, sync_conn: sqlite3.Connection) -> None:
    before = helpers.fingerprint(sync_conn)
    status, answer, _ = await helpers.ask(
        server_client, claimed, helpers.approval_body(claimed, shot, helpers.readings_of(fence_body(claimed)))
    )
    assert (status, answer) == (409, {"error": "not_supervised"})
    assert helpers.fingerprint(sync_conn) == before


async def test_screenshot_must_be_this_attempts_gate3(
    server_client: Any,
    claimed: Claim,
    other_claimed: Claim,
    shot: str,
    sync_conn: sqlite3.Connection,
) -> None:
    foreign = await helpers.gate3_screenshot(server_client, other_claimed)
    wrong_kind = await helpers.gate3_screenshot(server_client, claimed, kind="QUANTITY_GATE_2")
    readings = helpers.readings_of(fence_body(claimed))
    before = helpers.fingerprint(sync_conn)
    for asset in (new_id(), foreign, wrong_kind):
        body = helpers.approval_body(claimed, asset, readings)
        status, answer, _ = await helpers.ask(server_client, claimed, body)
        assert (status, answer) == (422, {"error": "approval_screenshot_invalid"})
        validate("device_error.response", answer)
        assert helpers.fingerprint(sync_conn) == before
        # nothing was stored under the key: corrected, the same key goes through
        status, answer, _ = await helpers.ask(server_client, claimed, {**body, "screenshot_asset_id": shot})
        assert status == 200 and answer["state"] == "WAITING"
        before = helpers.fingerprint(sync_conn)


async def test_claim_checks_like_the_fence(
    server_client: Any, claimed: Claim, shot: str, sync_conn: sqlite3.Connection, clock: ManualClock
) -> None:
    readings = helpers.readings_of(fence_body(claimed))
    before = helpers.fingerprint(sync_conn)
    for over in (
        {"claim_token": "f" * 64},
        {"claim_generation": 2},
        {"task_id": new_id()},
        {"authorization_id": new_id()},
    ):
        status, answer, _ = await helpers.ask(
            server_client, claimed, helpers.approval_body(claimed, shot, readings, **over)
        )
        assert (status, answer) == (409, {"error": "claim_not_current"}), over
    status, raw = await post_json(
        server_client, helpers.approval_path(new_id()), claimed.device, helpers.approval_body(claimed, shot, readings)
    )
    assert (status, json.loads(raw)) == (409, {"error": "claim_not_current"})
    clock.set(from_wire(claimed.lease_expires_at))  # a lease ending exactly now has ended
    status, answer, _ = await helpers.ask(server_client, claimed, helpers.approval_body(claimed, shot, readings))
    assert (status, answer) == (409, {"error": "claim_not_current"})
    assert helpers.fingerprint(sync_conn) == before


@pytest.mark.parametrize(
    "mutate",
    [
        lambda b: {**b, "extra": 1},
        lambda b: {k: v for k, v in b.items() if k != "readings"},
        lambda b: {**b, "readings": {**b["readings"], "extra": "x"}},
        lambda b: {**b, "readings": {k: v for k, v in b["readings"].items() if k != "payment_mode"}},
        lambda b: {**b, "readings": {**b["readings"], "gate1_unit_price": "12.8"}},
        lambda b: {**b, "readings": {**b["readings"], "gate1_unit_price": 12.88}},
        lambda b: {**b, "readings": {**b["readings"], "quantity_read": True}},
        lambda b: {**b, "readings": {**b["readings"], "selected_options": [["颜色", ""]]}},
        lambda b: {**b, "readings": {**b["readings"], "selected_options": [["颜色", "   "]]}},
        lambda b: {**b, "readings": {**b["readings"], "selected_options": []}},
        lambda b: {**b, "readings": {**b["readings"], "selected_color": "黑色"}},  # both forms at once
        # an agent that knows only colour/size (colour/size): a blank colour
        lambda b: {
            **b,
            "readings": {k: v for k, v in b["readings"].items() if k != "selected_options"}
            | {"selected_color": "   ", "selected_size": None},
        },
        lambda b: {**b, "readings": {**b["readings"], "payment_mode": "x" * 33}},
        # bidi and invisible characters: the drawer showed "\u202e色黑" as 黑色
        lambda b: {**b, "readings": {**b["readings"], "selected_options": [["颜色", "\u202e色黑"]]}},
        lambda b: {**b, "readings": {**b["readings"], "selected_options": [["颜色", "黑色"], ["尺码", "M\u200b"]]}},
        lambda b: {**b, "readings": {**b["readings"], "selected_options": [["颜\u200b色", "黑色"]]}},
        lambda b: {**b, "readings": {**b["readings"], "payment_mode": "微信\u2066支付"}},
        lambda b: {**b, "readings": {**b["readings"], "selected_options": [["颜色", "黑\u0007色"]]}},
        lambda b: {**b, "readings": []},
        lambda b: {**b, "approval_key": "not-a-uuid"},
        lambda b: {**b, "screenshot_asset_id": None},
    ],
)
async def test_bad_bodies_are_400_nothing_written(
    server_client: Any, claimed: Claim, shot: str, sync_conn: sqlite3.Connection, mutate: Any
) -> None:
    before = helpers.fingerprint(sync_conn)
    body = mutate(helpers.approval_body(claimed, shot, helpers.readings_of(fence_body(claimed))))
    status, answer, _ = await helpers.ask(server_client, claimed, body)
    assert (status, answer) == (400, {"error": "invalid_request"})
    assert helpers.fingerprint(sync_conn) == before


async def test_edge_cases_of_the_routes(server_client: Any, claimed: Claim, shot: str) -> None:
    body = helpers.approval_body(claimed, shot, helpers.readings_of(fence_body(claimed)))
    status, raw = await post_json(server_client, helpers.approval_path("not-a-uuid"), claimed.device, body)
    assert (status, json.loads(raw)) == (400, {"error": "invalid_request"})
    status, raw = await post_json(server_client, helpers.approval_path(claimed.attempt_id), None, body)
    assert (status, raw) == (401, b"")
    status, raw = await post_json(
        server_client,
        helpers.approval_path(claimed.attempt_id),
        claimed.device,
        b'{"approval_key": 1, "approval_key": 2}',
    )
    assert (status, json.loads(raw)) == (400, {"error": "invalid_request"})
    status, raw = await post_json(server_client, helpers.approval_path(claimed.attempt_id), claimed.device, b"x" * 5000)
    assert (status, json.loads(raw)) == (413, {"error": "request_too_large"})
    resp = await server_client.post(
        helpers.approval_path(claimed.attempt_id),
        data=json.dumps(body),
        headers={**claimed.device.headers(), "Content-Type": "text/plain"},
    )
    assert (resp.status, await resp.json()) == (415, {"error": "unsupported_media_type"})
    status, raw = await post_json(
        server_client,
        helpers.status_path(claimed.attempt_id),
        claimed.device,
        {"approval_id": new_id(), "claim_generation": 1, "claim_token": claimed.token, "extra": True},
    )
    assert (status, json.loads(raw)) == (400, {"error": "invalid_request"})
