"""Submission fence (docs/api.md "POST /api/v1/purchase-attempts/{aid}/submission-fence"): the first response
permits the click, replays never do, and every single mismatch is refused with nothing written."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from typing import Any

import pytest

from cmbuyer.server.clock import ManualClock, from_wire
from cmbuyer.server.config import Settings
from cmbuyer.server.tx.common import new_id
from tests.server.conftest import Maker
from tests.server.submissions.helpers import (
    Claim,
    assert_fence_refused_after_revocation,
    claim_http,
    events_body,
    events_path,
    fence_body,
    fence_path,
    fingerprint,
    post_json,
    post_writing_nothing,
    task_row,
)


async def test_first_fence_permits_then_replay_never(
    server_client: Any, claimed: Claim, sync_conn: sqlite3.Connection
) -> None:
    body = fence_body(claimed)
    status, raw = await post_json(server_client, fence_path(claimed.attempt_id), claimed.device, body)
    assert status == 200, raw
    first = json.loads(raw)
    assert first["click_permitted"] is True and first["reconciliation_required"] is False
    assert first["status"] == "FENCED" and first["submit_text"] == "提交订单"
    task = task_row(sync_conn, claimed.task_id)
    assert (task["state"], task["version"]) == ("SUBMITTING", claimed.task_version + 1)
    auth = sync_conn.execute("SELECT state FROM authorizations WHERE id = ?", (claimed.authorization_id,)).fetchone()
    assert auth[0] == "FENCED"
    for _ in range(3):
        status, raw2 = await post_json(server_client, fence_path(claimed.attempt_id), claimed.device, body)
        assert status == 200
        replay = json.loads(raw2)
        assert replay == {**first, "click_permitted": False, "reconciliation_required": True}
    # a new key for the same attempt/authorization: never a permit
    status, raw3 = await post_json(server_client, fence_path(claimed.attempt_id), claimed.device, fence_body(claimed))
    assert (status, json.loads(raw3)) == (409, {"error": "submission_fenced"})
    # same key, different payload
    status, raw4 = await post_json(
        server_client, fence_path(claimed.attempt_id), claimed.device, {**body, "confirm_page_amount": "25.75"}
    )
    assert (status, json.loads(raw4)) == (409, {"error": "idempotency_conflict"})
    assert sync_conn.execute("SELECT count(*) FROM order_submissions").fetchone()[0] == 1
    actions = [r[0] for r in sync_conn.execute("SELECT action FROM audit_log WHERE action = 'submission.fence'")]
    assert actions == ["submission.fence"]


async def test_fence_after_first_event_from_ordering(
    server_client: Any, claimed: Claim, sync_conn: sqlite3.Connection
) -> None:
    status, raw = await post_json(server_client, events_path(claimed.task_id), claimed.device, events_body(claimed))
    assert status == 200, raw
    status, raw = await post_json(server_client, fence_path(claimed.attempt_id), claimed.device, fence_body(claimed))
    assert (status, json.loads(raw)["error"]) == (409, "version_conflict")
    status, raw = await post_json(
        server_client,
        fence_path(claimed.attempt_id),
        claimed.device,
        fence_body(claimed, expected_task_version=claimed.task_version + 1),
    )
    assert status == 200 and json.loads(raw)["click_permitted"] is True
    assert task_row(sync_conn, claimed.task_id)["version"] == claimed.task_version + 2


async def test_fullwidth_letters_equal_ascii_after_nfkc(server_client: Any, claimed: Claim) -> None:
    # "黑色CHA(纯棉)" with full-width Ｃ Ｈ Ａ and full-width parentheses: NFKC makes them equal.
    color = "黑色ＣＨＡ（纯棉）"
    status, raw = await post_json(
        server_client, fence_path(claimed.attempt_id), claimed.device, fence_body(claimed, selected_color=color)
    )
    assert status == 200 and json.loads(raw)["click_permitted"] is True


async def test_outer_whitespace_of_a_read_name_is_trimmed(server_client: Any, claimed: Claim) -> None:
    # real option tiles carry leading spaces ("  奶白色+礼盒"): normalize_sku trims them, on both sides
    status, raw = await post_json(
        server_client,
        fence_path(claimed.attempt_id),
        claimed.device,
        fence_body(claimed, selected_color="  " + claimed.sku_color),
    )
    assert status == 200 and json.loads(raw)["click_permitted"] is True


def _mutations(c: Claim) -> dict[str, dict[str, Any]]:
    other_token = "0" * 64
    return {
        "wrong token": {"claim_token": other_token},
        "wrong generation": {"claim_generation": c.generation + 1},
        "wrong version": {"expected_task_version": c.task_version + 1},
        "older version": {"expected_task_version": c.task_version - 1},
        "wrong task": {"task_id": new_id()},
        "wrong authorization": {"authorization_id": new_id()},
        "price over cap by 0.01 (computed)": {
            "gate1_unit_price": "15.01",
            "gate2_unit_price": "15.01",
            "gate3_unit_price": "15.01",
            "confirm_page_amount": "30.00",
        },
        "confirm amount over cap by 0.01": {"confirm_page_amount": "30.01"},
        "unequal gate prices": {"gate2_unit_price": "12.89"},
        "gate 3 price differs": {"gate3_unit_price": "12.87"},
        "total above unit × quantity by 0.01 (a fee)": {"confirm_page_amount": "25.77"},
        "payment mode 先用后付": {"payment_mode": "先用后付"},
        "payment mode 免密支付": {"payment_mode": "免密支付"},
        "payment mode 多多支付": {"payment_mode": "多多支付"},
        "payment mode with the allowed name inside": {"payment_mode": "使用微信支付"},
        "size read where the task has one: none read": {"selected_size": None},
        "submit count 0": {"submit_control_match_count": 0},
        "submit count 2": {"submit_control_match_count": 2},
        "colour with 【】 instead of []": {"selected_color": c.sku_color.replace("(", "【").replace(")", "】")},
        # outer whitespace is trimmed on both sides (normalize_sku); a space inside a name is not
        "colour differs by an inner space": {"selected_color": c.sku_color[:2] + " " + c.sku_color[2:]},
        "colour prefix only": {"selected_color": c.sku_color[:-1]},
        "size case differs": {"selected_size": c.sku_size.lower()},
        "quantity +1": {"quantity_read": c.quantity + 1},
        "quantity -1": {"quantity_read": c.quantity - 1},
    }


async def test_each_single_mismatch_refused_nothing_written(
    server_client: Any, claimed: Claim, sync_conn: sqlite3.Connection
) -> None:
    before = fingerprint(sync_conn)
    for label, change in _mutations(claimed).items():
        status, raw = await post_json(
            server_client, fence_path(claimed.attempt_id), claimed.device, fence_body(claimed, **change)
        )
        assert status == 409, (label, status, raw)
        assert b"click_permitted" not in raw, label
        assert fingerprint(sync_conn) == before, label
    # exactly at the cap is fine: 15.00 × 2 = 30.00
    status, raw = await post_json(
        server_client,
        fence_path(claimed.attempt_id),
        claimed.device,
        fence_body(
            claimed,
            gate1_unit_price="15.00",
            gate2_unit_price="15.00",
            gate3_unit_price="15.00",
            confirm_page_amount="30.00",
        ),
    )
    assert status == 200 and json.loads(raw)["click_permitted"] is True


# One row per refusal: the values READ on the screen that the server's re-check must refuse, and the detail
# word it answers with (docs/api.md "Fence refusals"). The default task is 黑色CHA(纯棉) / M(建议100-115),
# quantity 2, cap 30.00; the default reading passes (2 × 12.88 = 25.76, 微信支付).
GATE_TABLE: list[tuple[str, dict[str, Any]]] = [
    ("sku_mismatch", {"selected_color": "白色"}),  # read colour ≠ the authorization's
    ("sku_mismatch", {"selected_size": "L"}),
    ("sku_mismatch", {"selected_size": None}),  # the task has a size, none was read
    ("quantity_mismatch", {"quantity_read": 3}),
    ("unit_price_changed", {"gate2_unit_price": "12.87"}),
    ("unit_price_changed", {"gate3_unit_price": "12.87"}),
    ("unit_price_changed", {"gate1_unit_price": "12.89"}),
    ("total_over_cap", {"gate1_unit_price": "15.01", "gate2_unit_price": "15.01", "gate3_unit_price": "15.01"}),
    ("confirm_amount_over_cap", {"confirm_page_amount": "30.01"}),
    ("total_above_items", {"confirm_page_amount": "25.77"}),
    ("payment_mode_not_allowed", {"payment_mode": "先用后付"}),
    ("payment_mode_not_allowed", {"payment_mode": "多多支付余额"}),
    ("payment_mode_not_allowed", {"payment_mode": "微信支付 免密"}),
    ("submit_control_count", {"submit_control_match_count": 2}),
    ("submit_control_count", {"submit_control_match_count": 0}),
]


@pytest.mark.parametrize(("detail", "change"), GATE_TABLE, ids=[f"{d}:{sorted(c.items())}" for d, c in GATE_TABLE])
async def test_gate_refusal_table(
    server_client: Any, claimed: Claim, sync_conn: sqlite3.Connection, detail: str, change: dict[str, Any]
) -> None:
    # nothing written: no submission, no state change, no record
    status, raw = await post_writing_nothing(
        server_client, sync_conn, fence_path(claimed.attempt_id), claimed.device, fence_body(claimed, **change)
    )
    assert (status, json.loads(raw)) == (409, {"error": "fence_refused", "detail": detail})


async def test_gate_reading_passes_with_a_discount_and_allowed_modes(
    server_client: Any, claimed: Claim, sync_conn: sqlite3.Connection
) -> None:
    # A total below unit × quantity (a discount) is allowed; 支付宝 is the other default mode; the read
    # values (not the task's) are what the submission keeps — a colour/size report as its options.
    status, raw = await post_json(
        server_client,
        fence_path(claimed.attempt_id),
        claimed.device,
        fence_body(claimed, confirm_page_amount="18.23", payment_mode="支付宝", selected_color="黑色ＣＨＡ（纯棉）"),
    )
    assert status == 200 and json.loads(raw)["click_permitted"] is True
    row = sync_conn.execute(
        "SELECT selected_options, gate3_unit_price, payment_mode, confirm_page_amount FROM order_submissions"
    ).fetchone()
    assert tuple(row) == ('[["颜色","黑色ＣＨＡ（纯棉）"],["尺码","M(建议100-115)"]]', "12.88", "支付宝", "18.23")


async def test_payment_mode_allow_list_is_a_setting(
    aiohttp_client: Any, settings: Settings, clock: ManualClock, make_task: Maker, make_device: Maker
) -> None:
    from cmbuyer.server.app import create_app

    client = await aiohttp_client(create_app(replace(settings, allowed_payment_modes=("支付宝",)), clock))
    make_task(start=True)
    c = await claim_http(client, make_device())
    status, raw = await post_json(client, fence_path(c.attempt_id), c.device, fence_body(c))
    assert (status, json.loads(raw)) == (409, {"error": "fence_refused", "detail": "payment_mode_not_allowed"})
    status, raw = await post_json(client, fence_path(c.attempt_id), c.device, fence_body(c, payment_mode="支付宝"))
    assert status == 200 and json.loads(raw)["click_permitted"] is True


async def test_task_without_size_fences_only_without_a_size_read(
    server_client: Any, make_task: Maker, make_device: Maker, sync_conn: sqlite3.Connection
) -> None:
    make_task(size=None, start=True)
    c = await claim_http(server_client, make_device())
    assert c.sku_size is None  # claim-next carries the null
    before = fingerprint(sync_conn)
    for read in ("M(建议100-115)", "均码"):
        status, raw = await post_json(
            server_client, fence_path(c.attempt_id), c.device, fence_body(c, selected_size=read)
        )
        assert (status, json.loads(raw)) == (409, {"error": "fence_refused", "detail": "sku_mismatch"}), read
        both = [["颜色", "黑色CHA(纯棉)"], ["尺码", read]]
        status, raw = await post_json(
            server_client, fence_path(c.attempt_id), c.device, fence_body(c, selected_options=both)
        )
        assert (status, json.loads(raw)) == (409, {"error": "fence_refused", "detail": "sku_mismatch"}), read
        assert fingerprint(sync_conn) == before
    status, raw = await post_json(server_client, fence_path(c.attempt_id), c.device, fence_body(c))
    assert status == 200 and json.loads(raw)["click_permitted"] is True
    row = sync_conn.execute(
        "SELECT selected_options FROM order_submissions WHERE attempt_id = ?", (c.attempt_id,)
    ).fetchone()
    assert row[0] == '[["颜色","黑色CHA(纯棉)"]]'


async def test_expired_lease_refused_also_exactly_at_expiry(
    server_client: Any, claimed: Claim, clock: ManualClock, sync_conn: sqlite3.Connection
) -> None:
    before = fingerprint(sync_conn)
    clock.set(from_wire(claimed.lease_expires_at))  # now == lease end: expired (no grace)
    status, raw = await post_json(server_client, fence_path(claimed.attempt_id), claimed.device, fence_body(claimed))
    assert (status, json.loads(raw)) == (409, {"error": "claim_not_current"})
    clock.advance(3600)
    status, raw = await post_json(server_client, fence_path(claimed.attempt_id), claimed.device, fence_body(claimed))
    assert status == 409
    assert fingerprint(sync_conn) == before


async def test_lease_one_microsecond_before_expiry_is_accepted(
    server_client: Any, claimed: Claim, clock: ManualClock
) -> None:
    clock.set(from_wire(claimed.lease_expires_at))
    clock.advance(-0.000001)
    status, raw = await post_json(server_client, fence_path(claimed.attempt_id), claimed.device, fence_body(claimed))
    assert status == 200 and json.loads(raw)["click_permitted"] is True


async def test_expired_authorization_refused(
    server_client: Any, claimed: Claim, sync_conn: sqlite3.Connection, clock: ManualClock
) -> None:
    # Make the authorization end now while the lease would still run (defense in depth: the lease is
    # normally capped by the authorization).
    end = "2026-08-04T09:01:00.000000Z"
    assert claimed.lease_expires_at > end
    sync_conn.execute("UPDATE authorizations SET expires_at = ? WHERE id = ?", (end, claimed.authorization_id))
    clock.set(end)  # exactly at the authorization's expiry: expired
    status, raw = await post_writing_nothing(
        server_client, sync_conn, fence_path(claimed.attempt_id), claimed.device, fence_body(claimed)
    )
    assert (status, json.loads(raw)) == (409, {"error": "fence_refused", "detail": "authorization_expired"})


async def test_revoked_device_gets_empty_401(
    server_client: Any, claimed: Claim, sync_conn: sqlite3.Connection, clock: ManualClock
) -> None:
    await assert_fence_refused_after_revocation(server_client, claimed, sync_conn, clock.now())


async def test_second_attempt_of_same_authorization_refused(
    server_client: Any, claimed: Claim, make_device: Maker, make_task: Maker, sync_conn: sqlite3.Connection
) -> None:
    """Another device's attempt cannot fence this authorization, and this authorization cannot get a
    second attempt (attempts.authorization_id is UNIQUE)."""
    make_task(start=True, goods_id="937122477376")
    other = await claim_http(server_client, make_device("phone-2"))
    before = fingerprint(sync_conn)
    # other attempt, this authorization
    status, raw = await post_json(
        server_client,
        fence_path(other.attempt_id),
        other.device,
        fence_body(other, authorization_id=claimed.authorization_id),
    )
    assert (status, json.loads(raw)) == (409, {"error": "claim_not_current"})
    # this attempt, fenced by the other device's credentials/token
    status, raw = await post_json(
        server_client, fence_path(claimed.attempt_id), other.device, fence_body(claimed, claim_token=other.token)
    )
    assert (status, json.loads(raw)) == (409, {"error": "claim_not_current"})
    assert fingerprint(sync_conn) == before
    with pytest.raises(sqlite3.IntegrityError):
        sync_conn.execute(
            "INSERT INTO attempts SELECT ?, task_id, authorization_id, device_id, session_id,"
            " claim_generation, nonce, randomblob(32), claimed_task_version, lease_expires_at,"
            " 'CLOSED', 'FAILED', response_json, 1, created_at, created_at, NULL, 0"
            " FROM attempts WHERE id = ?",
            (new_id(), claimed.attempt_id),
        )


async def test_fence_bad_json_and_path(server_client: Any, claimed: Claim) -> None:
    status, raw = await post_json(server_client, fence_path("not-a-uuid"), claimed.device, fence_body(claimed))
    assert (status, json.loads(raw)) == (400, {"error": "invalid_request"})
    status, raw = await post_json(
        server_client, fence_path(claimed.attempt_id), claimed.device, fence_body(claimed, gate1_unit_price=12.88)
    )
    assert (status, json.loads(raw)) == (400, {"error": "invalid_request"})
    status, raw = await post_json(
        server_client, fence_path(claimed.attempt_id), claimed.device, fence_body(claimed, quantity_read=True)
    )
    assert status == 400
    status, raw = await post_json(server_client, fence_path(claimed.attempt_id), None, fence_body(claimed))
    assert (status, raw) == (401, b"")
