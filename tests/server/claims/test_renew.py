"""Lease renew (docs/api.md "POST /api/v1/tasks/{task_id}/lease/renew"): CAS on the exact lease text, every claim field
must match, cap at the authorization expiry, equal time = expired (no grace, no revival), replay / conflict by
renew_request_id, out-of-order and concurrent renewals, and no change to business state."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import timedelta
from typing import Any

import pytest

from cmbuyer.schemas import validate
from cmbuyer.server.clock import ManualClock, from_wire, to_wire
from cmbuyer.server.config import Settings
from cmbuyer.server.store import audit
from cmbuyer.server.tx.common import new_id
from tests.server.claims.conftest import CLAIM, Claimed, claim_ok, fingerprint, post, renew_path
from tests.server.conftest import DeviceCreds, Maker

NOT_CURRENT = (409, b'{"error":"claim_not_current"}')


@pytest.fixture
async def held(server_client: Any, dev: DeviceCreds) -> tuple[DeviceCreds, str, Claimed]:
    session = new_id()
    return dev, session, await claim_ok(server_client, dev, session)


async def renew(client: Any, creds: DeviceCreds, task_id: str, body: dict[str, Any]) -> tuple[int, bytes]:
    status, raw, _ = await post(client, renew_path(task_id), creds, body)
    return status, raw


def business_state(conn: sqlite3.Connection) -> list[Any]:
    return [
        tuple(r)
        for r in conn.execute(
            "SELECT t.state, t.version, a.state, x.state, x.claim_generation, x.token_hash, x.nonce"
            " FROM attempts x JOIN tasks t ON t.id = x.task_id JOIN authorizations a ON a.id = x.authorization_id"
        )
    ]


async def test_renew_extends_to_now_plus_ttl_and_changes_nothing_else(
    server_client: Any,
    held: tuple[DeviceCreds, str, Claimed],
    clock: ManualClock,
    settings: Settings,
    sync_conn: sqlite3.Connection,
) -> None:
    dev, session, got = held
    before = business_state(sync_conn)
    clock.advance(30)
    status, raw = await renew(server_client, dev, got.task_id, got.renew_body(session))
    assert status == 200
    body = json.loads(raw)
    validate("lease_renew.response", body)
    assert body == {
        "task_id": got.task_id,
        "attempt_id": got.attempt_id,
        "claim_generation": 1,
        "lease_expires_at": to_wire(clock.now() + timedelta(seconds=settings.claim_lease_ttl)),
        "server_now": to_wire(clock.now()),
    }
    assert "claim_token" not in raw.decode()
    assert business_state(sync_conn) == before  # token, generation, versions, states unchanged
    assert sync_conn.execute("SELECT lease_expires_at FROM attempts").fetchone()[0] == body["lease_expires_at"]
    row = audit.all_rows(sync_conn)[-1]
    assert row.action == "attempt.lease_renew" and row.detail["previous_lease_expires_at"] == got.lease


async def test_new_lease_is_capped_at_the_authorization_expiry(
    server_client: Any, held: tuple[DeviceCreds, str, Claimed], clock: ManualClock
) -> None:
    dev, session, got = held
    expires = got.body["authorization"]["expires_at"]
    lease = got.lease
    while True:  # walk the lease up to just before the authorization expiry
        clock.set(from_wire(lease) - timedelta(seconds=1))
        status, raw = await renew(
            server_client, dev, got.task_id, got.renew_body(session, expected_lease_expires_at=lease)
        )
        assert status == 200
        lease = json.loads(raw)["lease_expires_at"]
        if lease == expires:
            break
        assert lease < expires
    clock.set(from_wire(expires) - timedelta(microseconds=1))
    status, raw = await renew(server_client, dev, got.task_id, got.renew_body(session, expected_lease_expires_at=lease))
    assert status == 200 and json.loads(raw)["lease_expires_at"] == expires  # capped, never beyond


async def test_lease_equal_to_now_is_expired_and_never_revived(
    server_client: Any, held: tuple[DeviceCreds, str, Claimed], clock: ManualClock, sync_conn: sqlite3.Connection
) -> None:
    dev, session, got = held
    clock.set(from_wire(got.lease) - timedelta(microseconds=1))
    status, raw = await renew(server_client, dev, got.task_id, got.renew_body(session))
    assert status == 200
    lease = json.loads(raw)["lease_expires_at"]
    clock.set(lease)  # exactly at the end
    before = fingerprint(sync_conn)
    assert (
        await renew(server_client, dev, got.task_id, got.renew_body(session, expected_lease_expires_at=lease))
        == NOT_CURRENT
    )
    clock.advance(-60)  # even a clock that steps back does not revive … (the row is unchanged)
    clock.advance(60 + 3600)
    assert (
        await renew(server_client, dev, got.task_id, got.renew_body(session, expected_lease_expires_at=lease))
        == NOT_CURRENT
    )
    assert fingerprint(sync_conn) == before
    assert sync_conn.execute("SELECT state FROM attempts").fetchone()[0] == "OPEN"  # no automatic close


async def test_authorization_expiry_equal_to_now_refuses_renewal(
    server_client: Any, held: tuple[DeviceCreds, str, Claimed], clock: ManualClock, sync_conn: sqlite3.Connection
) -> None:
    dev, session, got = held
    clock.advance(1)  # the lease is still live; the authorization row ends exactly now
    sync_conn.execute("UPDATE authorizations SET expires_at = ?", (to_wire(clock.now()),))
    assert await renew(server_client, dev, got.task_id, got.renew_body(session)) == NOT_CURRENT


@pytest.mark.parametrize("expected", ["twin", "earlier", "later"])
async def test_cas_needs_the_exact_stored_text(
    server_client: Any, held: tuple[DeviceCreds, str, Claimed], sync_conn: sqlite3.Connection, expected: str
) -> None:
    dev, session, got = held
    value = {
        "twin": got.lease.replace(".000000Z", "Z"),
        "earlier": to_wire(from_wire(got.lease) - timedelta(microseconds=1)),
        "later": to_wire(from_wire(got.lease) + timedelta(seconds=1)),
    }[expected]
    assert value != got.lease
    before = fingerprint(sync_conn)
    assert (
        await renew(server_client, dev, got.task_id, got.renew_body(session, expected_lease_expires_at=value))
        == NOT_CURRENT
    )
    assert fingerprint(sync_conn) == before


async def test_replay_and_same_key_other_body(
    server_client: Any, held: tuple[DeviceCreds, str, Claimed], clock: ManualClock, sync_conn: sqlite3.Connection
) -> None:
    dev, session, got = held
    body = got.renew_body(session)
    clock.advance(5)
    first = await renew(server_client, dev, got.task_id, body)
    assert first[0] == 200
    lease_after = sync_conn.execute("SELECT lease_expires_at FROM attempts").fetchone()[0]
    clock.advance(5)
    assert await renew(server_client, dev, got.task_id, body) == first  # byte-identical, no second CAS
    assert sync_conn.execute("SELECT lease_expires_at FROM attempts").fetchone()[0] == lease_after
    before = fingerprint(sync_conn)
    other = dict(body, expected_lease_expires_at=lease_after)
    assert await renew(server_client, dev, got.task_id, other) == (409, b'{"error":"idempotency_conflict"}')
    status, raw, _ = await post(
        server_client, CLAIM, dev, {"session_id": session, "claim_request_id": body["renew_request_id"]}
    )
    assert (status, raw) == (409, b'{"error":"idempotency_conflict"}')  # same key on another endpoint
    assert fingerprint(sync_conn) == before


async def test_out_of_order_and_concurrent_renewals(
    server_client: Any, held: tuple[DeviceCreds, str, Claimed], clock: ManualClock
) -> None:
    dev, session, got = held
    clock.advance(1)
    bodies = [got.renew_body(session) for _ in range(6)]
    results = await asyncio.gather(*(renew(server_client, dev, got.task_id, b) for b in bodies))
    winners = [i for i, (s, _) in enumerate(results) if s == 200]
    assert len(winners) == 1
    assert all(r == NOT_CURRENT for i, r in enumerate(results) if i not in winners)
    # a delayed duplicate of the winner replays; a delayed loser stays refused
    assert await renew(server_client, dev, got.task_id, bodies[winners[0]]) == results[winners[0]]
    loser = next(i for i in range(6) if i not in winners)
    assert await renew(server_client, dev, got.task_id, bodies[loser]) == NOT_CURRENT


@pytest.mark.parametrize("wrong", ["device", "attempt", "generation", "token", "other_token", "session", "task"])
async def test_every_claim_field_must_match(
    server_client: Any, ready_device: Maker, make_task: Maker, sync_conn: sqlite3.Connection, wrong: str
) -> None:
    make_task(start=True)
    make_task(start=True, goods_id="42")
    a, b = ready_device("a"), ready_device("b")
    session_a, session_b = new_id(), new_id()
    mine = await claim_ok(server_client, a, session_a)
    theirs = await claim_ok(server_client, b, session_b)
    creds, task_id, body = a, mine.task_id, mine.renew_body(session_a)
    if wrong == "device":
        creds = b
        body = mine.renew_body(session_b)
    elif wrong == "attempt":
        body["attempt_id"] = theirs.attempt_id
    elif wrong == "generation":
        body["claim_generation"] = 2
    elif wrong == "token":
        body["claim_token"] = f"{int(mine.token, 16) ^ 1:064x}"
    elif wrong == "other_token":
        body["claim_token"] = theirs.token
    elif wrong == "session":
        body["session_id"] = new_id()
    elif wrong == "task":
        task_id = theirs.task_id
    before = fingerprint(sync_conn)
    status, raw = await renew(server_client, creds, task_id, body)
    assert (status, raw) == NOT_CURRENT
    assert fingerprint(sync_conn) == before


async def test_odd_business_state_is_not_current(
    server_client: Any, held: tuple[DeviceCreds, str, Claimed], sync_conn: sqlite3.Connection
) -> None:
    dev, session, got = held
    kept = sync_conn.execute("SELECT sku_options FROM tasks").fetchone()[0]
    sync_conn.execute('UPDATE tasks SET sku_options = \'[["颜色","other"]]\'')  # source drift → fail closed
    assert await renew(server_client, dev, got.task_id, got.renew_body(session)) == NOT_CURRENT
    sync_conn.execute("UPDATE tasks SET sku_options = ?", (kept,))
    sync_conn.execute("UPDATE tasks SET state = 'FAILED'")
    assert await renew(server_client, dev, got.task_id, got.renew_body(session)) == NOT_CURRENT
    sync_conn.execute("UPDATE tasks SET state = 'ORDERING'")
    assert (await renew(server_client, dev, got.task_id, got.renew_body(session)))[0] == 200


async def test_bad_task_id_in_path_is_400(server_client: Any, held: tuple[DeviceCreds, str, Claimed]) -> None:
    dev, session, got = held
    for bad in (got.task_id.upper(), "x", got.task_id + "0", "00000000-0000-0000-0000-000000000000"):
        status, raw = await renew(server_client, dev, bad, got.renew_body(session))
        assert (status, raw) == (400, b'{"error":"invalid_request"}')
