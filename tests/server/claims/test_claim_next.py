"""claim-next (docs/api.md "POST /api/v1/tasks/claim-next"): eligibility, snapshot match, stable order, rollback,
idempotent success/EMPTY/conflict (also after a restart), one open claim per device, same-session
resume, the heartbeat gate, and the exact authorization-expiry boundary."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import timedelta
from typing import Any

import pytest

from cmbuyer.schemas import validate
from cmbuyer.server.app import create_app
from cmbuyer.server.clock import ManualClock, from_wire, to_wire
from cmbuyer.server.config import Settings
from cmbuyer.server.domain.claims import ClaimPolicy
from cmbuyer.server.store import audit
from cmbuyer.server.tx.common import new_id
from tests.server.claims.conftest import CLAIM, Claimed, claim, claim_ok, fingerprint, post
from tests.server.conftest import DeviceCreds, Maker


def counts(conn: sqlite3.Connection) -> tuple[int, int]:
    return (
        conn.execute("SELECT count(*) FROM attempts").fetchone()[0],
        conn.execute("SELECT count(*) FROM device_requests").fetchone()[0],
    )


async def test_claim_returns_the_snapshot_and_moves_task_and_authorization(
    server_client: Any,
    ready_device: Maker,
    make_task: Maker,
    sync_conn: sqlite3.Connection,
    clock: ManualClock,
    settings: Settings,
) -> None:
    task = make_task(start=True)
    dev = ready_device()
    session = new_id()
    got = await claim_ok(server_client, dev, session)
    validate("claim_next.response", got.body)
    assert got.body["task"] == {
        "id": task.id,
        "version": task.version + 1,
        "title": task.title,
        "product_url": task.product_url,
        "goods_id": task.goods_id,
        "sku_options": [["颜色", "黑色CHA(纯棉)"], ["尺码", "M(建议100-115)"]],
        "sku_color": "黑色CHA(纯棉)",  # the colour/size special case, read back for agents that know only colour/size
        "sku_size": "M(建议100-115)",
        "quantity": task.quantity,
        "max_total_price": task.max_total_price,
    }
    assert got.body["authorization"]["task_version"] == task.version
    assert got.body["attempt"]["claim_generation"] == 1
    assert got.body["server_now"] == to_wire(clock.now())
    assert got.lease == to_wire(clock.now() + timedelta(seconds=settings.claim_lease_ttl))
    assert set(got.body) == {"task", "authorization", "attempt", "server_now"}  # no script/selector/permit
    assert tuple(sync_conn.execute("SELECT state, version FROM tasks WHERE id = ?", (task.id,)).fetchone()) == (
        "CLAIMED",
        task.version + 1,
    )
    assert (
        sync_conn.execute(
            "SELECT state FROM authorizations WHERE id = ?", (got.body["authorization"]["id"],)
        ).fetchone()[0]
        == "CLAIMED"
    )
    attempt = sync_conn.execute("SELECT * FROM attempts").fetchone()
    assert attempt["device_id"] == dev.device_id and attempt["session_id"] == session
    assert attempt["claimed_task_version"] == task.version + 1 and attempt["state"] == "OPEN"
    assert "claim_token" not in attempt["response_json"]
    rows = audit.for_subject(sync_conn, "task", task.id)
    assert rows[-1].action == "task.claim" and rows[-1].generation == 1 and rows[-1].actor_id == dev.device_id


async def test_empty_is_204_persisted_and_replays_even_after_a_task_appears(
    server_client: Any, ready_device: Maker, make_task: Maker, sync_conn: sqlite3.Connection
) -> None:
    dev = ready_device()
    session, key = new_id(), new_id()
    status, raw = await claim(server_client, dev, session, key)
    assert (status, raw) == (204, b"")
    rec = sync_conn.execute("SELECT status, response_json, attempt_id FROM device_requests").fetchone()
    assert tuple(rec) == (204, None, None)
    make_task(start=True)
    assert await claim(server_client, dev, session, key) == (204, b"")  # stable: same key, same EMPTY
    assert counts(sync_conn) == (0, 1)
    got = await claim_ok(server_client, dev, session)  # a new key sees the new task
    assert got.body["task"]["goods_id"]


async def test_same_key_replays_byte_identical_also_after_restart(
    aiohttp_client: Any,
    server_client: Any,
    ready_device: Maker,
    make_task: Maker,
    settings: Settings,
    clock: ManualClock,
    sync_conn: sqlite3.Connection,
) -> None:
    task = make_task(start=True)
    dev = ready_device()
    session, key = new_id(), new_id()
    first = await claim_ok(server_client, dev, session, key)
    sync_conn.execute("UPDATE tasks SET title = 'edited later' WHERE id = ?", (task.id,))  # source row drifts
    clock.advance(5)
    status, raw = await claim(server_client, dev, session, key)
    assert (status, raw) == (200, first.raw)
    await server_client.close()
    restarted = await aiohttp_client(create_app(settings, clock))
    status, raw = await claim(restarted, dev, session, key)
    assert (status, raw) == (200, first.raw)  # same token rebuilt by HMAC after the restart
    assert counts(sync_conn) == (1, 1)


async def test_same_key_other_payload_or_other_device_is_idempotency_conflict_and_writes_nothing(
    server_client: Any, ready_device: Maker, make_task: Maker, sync_conn: sqlite3.Connection
) -> None:
    make_task(start=True)
    make_task(start=True, goods_id="111")
    a, b = ready_device("a"), ready_device("b")
    key = new_id()
    await claim_ok(server_client, a, new_id(), key)
    before = fingerprint(sync_conn)
    for creds in (a, b):
        status, raw = await claim(server_client, creds, new_id(), key)
        assert (status, raw) == (409, b'{"error":"idempotency_conflict"}')
    assert fingerprint(sync_conn) == before


async def test_refused_request_stores_nothing_so_a_corrected_retry_with_the_same_key_works(
    server_client: Any, dev: DeviceCreds, sync_conn: sqlite3.Connection
) -> None:
    key, session = new_id(), new_id()
    status, _, _ = await post(server_client, CLAIM, dev, {"session_id": session.upper(), "claim_request_id": key})
    assert status == 400
    sync_conn.execute("UPDATE devices SET reported_state = 'BUSY'")
    assert (await claim(server_client, dev, session, key))[0] == 409  # gate refused: nothing stored
    sync_conn.execute("UPDATE devices SET reported_state = 'READY'")
    await claim_ok(server_client, dev, session, key)


async def test_ineligible_tasks_are_never_claimed(
    server_client: Any, ready_device: Maker, make_task: Maker, sync_conn: sqlite3.Connection
) -> None:
    make_task(start=False)  # DRAFT: no authorization
    edited = make_task(start=True, goods_id="222")
    sync_conn.execute(  # snapshot mismatch
        "UPDATE tasks SET sku_options = json_set(sku_options, '$[1][1]', 'L') WHERE id = ?", (edited.id,)
    )
    bumped = make_task(start=True, goods_id="333")
    sync_conn.execute("UPDATE tasks SET version = version + 1 WHERE id = ?", (bumped.id,))  # version mismatch
    for field, value in (
        ("quantity", 3),
        ("max_total_price", "31.00"),
        ("sku_options", '[["颜色","白色"],["尺码","M(建议100-115)"]]'),
        ("sku_options", '[["颜色分类","黑色CHA(纯棉)"],["尺码","M(建议100-115)"]]'),
        ("title", "x"),
        ("goods_id", "4440"),
        ("product_url", "https://mobile.yangkeduo.com/goods.html?goods_id=1"),
    ):
        t = make_task(start=True, goods_id="444")
        sync_conn.execute(f"UPDATE tasks SET {field} = ? WHERE id = ?", (value, t.id))
    closed = make_task(start=True, goods_id="555")
    sync_conn.execute("UPDATE authorizations SET state = 'CLOSED', closed_at = 'x' WHERE task_id = ?", (closed.id,))
    failed = make_task(start=True, goods_id="666")
    sync_conn.execute("UPDATE tasks SET state = 'FAILED' WHERE id = ?", (failed.id,))
    dev = ready_device()
    before = fingerprint(sync_conn)
    assert (await claim(server_client, dev, new_id()))[0] == 204
    after = fingerprint(sync_conn)
    assert after["tasks"] == before["tasks"] and after["authorizations"] == before["authorizations"]
    assert after["attempts"] == []


async def test_authorization_expiry_boundary_is_exclusive_and_caps_the_lease(
    server_client: Any,
    ready_device: Maker,
    make_task: Maker,
    sync_conn: sqlite3.Connection,
    clock: ManualClock,
    policy: ClaimPolicy,
) -> None:
    task = make_task(start=True)
    expires = sync_conn.execute("SELECT expires_at FROM authorizations WHERE task_id = ?", (task.id,)).fetchone()[0]
    dev = ready_device()
    clock.set(expires)  # now == expires_at → expired
    sync_conn.execute("UPDATE devices SET last_heartbeat_at = ?", (to_wire(clock.now()),))
    assert (await claim(server_client, dev, new_id()))[0] == 204
    clock.set(from_wire(expires) - timedelta(microseconds=1))
    got = await claim_ok(server_client, dev, new_id())
    assert got.lease == expires  # min(now + TTL, authorization expiry)
    assert got.body["authorization"]["expires_at"] == expires


async def test_stable_order_oldest_authorization_first(
    server_client: Any, ready_device: Maker, make_task: Maker, clock: ManualClock
) -> None:
    tasks = []
    for i in range(4):
        tasks.append(make_task(start=True, goods_id=f"9{i}"))
        clock.advance(1)
    claimed = []
    for i in range(4):
        dev = ready_device(f"d{i}")
        claimed.append((await claim_ok(server_client, dev, new_id())).task_id)
    assert claimed == [t.id for t in tasks]


async def test_failure_mid_transaction_rolls_back_everything(
    server_client: Any,
    dev: DeviceCreds,
    sync_conn: sqlite3.Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = fingerprint(sync_conn)

    def broken_audit(*_a: Any, **_k: Any) -> None:
        raise sqlite3.OperationalError("disk I/O error")  # the last statement of the claim fails

    monkeypatch.setattr(audit, "append", broken_audit)  # the store module every audit row goes through
    status, raw, _ = await post(server_client, CLAIM, dev, {"session_id": new_id(), "claim_request_id": new_id()})
    assert (status, raw) == (503, b"")
    assert fingerprint(sync_conn) == before  # no attempt, no request record, task still PENDING
    monkeypatch.undo()
    await claim_ok(server_client, dev, new_id())


async def _open_claim_of_two(
    client: Any, ready_device: Maker, make_task: Maker, goods_id: str
) -> tuple[DeviceCreds, str, Claimed]:
    """Two started tasks (the second of goods ``goods_id``) and a ready device with an open claim of one in a new
    session: the device, the session and the claim."""
    make_task(start=True)
    make_task(start=True, goods_id=goods_id)
    dev = ready_device()
    session = new_id()
    return dev, session, await claim_ok(client, dev, session)


async def test_open_claim_same_session_resumes_the_same_attempt_with_the_current_lease(
    server_client: Any, ready_device: Maker, make_task: Maker, sync_conn: sqlite3.Connection, clock: ManualClock
) -> None:
    dev, session, first = await _open_claim_of_two(server_client, ready_device, make_task, goods_id="777")
    clock.advance(10)
    sync_conn.execute("UPDATE devices SET last_heartbeat_at = ?", (to_wire(clock.now()),))
    status, raw, _ = await post(
        server_client, f"/api/v1/tasks/{first.task_id}/lease/renew", dev, first.renew_body(session)
    )
    assert status == 200
    renewed = json.loads(raw)["lease_expires_at"]
    key = new_id()
    again = await claim_ok(server_client, dev, session, key)
    assert again.attempt_id == first.attempt_id and again.token == first.token
    assert again.lease == renewed and again.body["server_now"] == to_wire(clock.now())
    assert again.body["task"] == first.body["task"] and again.body["authorization"] == first.body["authorization"]
    assert (await claim(server_client, dev, session, key)) == (200, again.raw)  # the new key replays too
    assert counts(sync_conn)[0] == 1
    assert audit.all_rows(sync_conn)[-1].action == "claim.resume"


async def test_open_claim_other_session_expired_lease_or_odd_state_needs_a_person(
    server_client: Any, ready_device: Maker, make_task: Maker, sync_conn: sqlite3.Connection, clock: ManualClock
) -> None:
    dev, session, first = await _open_claim_of_two(server_client, ready_device, make_task, goods_id="888")
    manual = (409, b'{"error":"claim_requires_manual"}')
    before = fingerprint(sync_conn)
    assert await claim(server_client, dev, new_id()) == manual  # other session
    # ORDERING is resumable only at exactly claimed version + 1 (docs/api.md "POST /api/v1/tasks/claim-next")
    sync_conn.execute("UPDATE tasks SET state = 'ORDERING', version = version + 1 WHERE id = ?", (first.task_id,))
    assert (await claim_ok(server_client, dev, session)).attempt_id == first.attempt_id
    sync_conn.execute("UPDATE tasks SET version = version + 1 WHERE id = ?", (first.task_id,))
    assert await claim(server_client, dev, session) == manual
    sync_conn.execute("UPDATE tasks SET state = 'SUBMITTING' WHERE id = ?", (first.task_id,))
    assert await claim(server_client, dev, session) == manual
    sync_conn.execute("UPDATE tasks SET state = 'CLAIMED', version = version - 2 WHERE id = ?", (first.task_id,))
    assert (await claim_ok(server_client, dev, session)).attempt_id == first.attempt_id
    kept = sync_conn.execute("SELECT sku_options FROM tasks WHERE id = ?", (first.task_id,)).fetchone()[0]
    sync_conn.execute('UPDATE tasks SET sku_options = \'[["颜色","XL"]]\' WHERE id = ?', (first.task_id,))  # drift
    assert await claim(server_client, dev, session) == manual
    sync_conn.execute("UPDATE tasks SET sku_options = ? WHERE id = ?", (kept, first.task_id))
    clock.set(first.lease)  # lease end == now → expired: never resumed, never transferred
    sync_conn.execute("UPDATE devices SET last_heartbeat_at = ?", (to_wire(clock.now()),))
    assert await claim(server_client, dev, session) == manual
    other = ready_device("other")
    assert (await claim_ok(server_client, other, new_id())).task_id != first.task_id
    rows = sync_conn.execute("SELECT task_id, device_id, state FROM attempts ORDER BY created_at").fetchall()
    assert tuple(rows[0]) == (first.task_id, dev.device_id, "OPEN")
    assert len(rows) == 2
    assert len(before["attempts"]) == 1


@pytest.mark.parametrize("change", ["missing", "stale", "not_ready", "version", "null_version"])
async def test_heartbeat_gate(
    server_client: Any,
    make_device: Maker,
    ready_device: Maker,
    make_task: Maker,
    sync_conn: sqlite3.Connection,
    clock: ManualClock,
    settings: Settings,
    change: str,
) -> None:
    make_task(start=True)
    dev = make_device() if change == "missing" else ready_device()
    if change == "stale":
        clock.advance(settings.heartbeat_interval * settings.heartbeat_stale_factor)  # exactly at the limit
    elif change == "not_ready":
        sync_conn.execute("UPDATE devices SET reported_state = 'BUSY'")
    elif change == "version":
        sync_conn.execute("UPDATE devices SET pdd_version = '8.16.0'")
    elif change == "null_version":
        sync_conn.execute("UPDATE devices SET pdd_version = NULL")
    before = fingerprint(sync_conn)
    assert await claim(server_client, dev, new_id()) == (409, b'{"error":"app_version_not_allowed"}')
    assert fingerprint(sync_conn) == before
    if change == "stale":
        clock.advance(-0.000001)  # one microsecond younger than the limit → fresh
        await claim_ok(server_client, dev, new_id())


async def test_heartbeat_gate_uses_the_current_configuration(
    aiohttp_client: Any, ready_device: Maker, make_task: Maker, settings: Settings, clock: ManualClock
) -> None:
    from dataclasses import replace

    make_task(start=True)
    dev = ready_device()  # reported 8.17.0 while it was allowed
    client = await aiohttp_client(create_app(replace(settings, allowed_app_versions=("9.0.0",)), clock))
    assert (await claim(client, dev, new_id()))[0] == 409


async def test_two_devices_racing_for_one_task(
    server_client: Any, ready_device: Maker, make_task: Maker, sync_conn: sqlite3.Connection
) -> None:
    make_task(start=True)
    a, b = ready_device("a"), ready_device("b")
    results = await asyncio.gather(claim(server_client, a, new_id()), claim(server_client, b, new_id()))
    assert sorted(s for s, _ in results) == [200, 204]
    assert sync_conn.execute("SELECT count(*) FROM attempts").fetchone()[0] == 1


async def test_n_devices_m_tasks_each_task_at_most_once(
    server_client: Any, ready_device: Maker, make_task: Maker, sync_conn: sqlite3.Connection
) -> None:
    tasks = {make_task(start=True, goods_id=f"5{i}").id for i in range(7)}
    devices = [ready_device(f"d{i}") for i in range(16)]
    sessions = {d.device_id: new_id() for d in devices}
    for _round in range(2):  # the second round: holders resume, the rest stay EMPTY
        results = await asyncio.gather(*(claim(server_client, d, sessions[d.device_id]) for d in devices))
        claimed = [json.loads(raw)["task"]["id"] for status, raw in results if status == 200]
        assert sorted(claimed) == sorted(tasks) and len(set(claimed)) == len(tasks)
        assert sum(1 for s, _ in results if s == 204) == len(devices) - len(tasks)
    rows = sync_conn.execute("SELECT device_id, task_id FROM attempts WHERE state = 'OPEN'").fetchall()
    assert len(rows) == len(tasks) and len({r[0] for r in rows}) == len(tasks)
    assert sync_conn.execute("SELECT count(*) FROM tasks WHERE state = 'CLAIMED'").fetchone()[0] == len(tasks)


async def test_error_bodies_leak_nothing(server_client: Any, ready_device: Maker, make_task: Maker) -> None:
    task = make_task(start=True)
    a = ready_device("a")
    session = new_id()
    got = await claim_ok(server_client, a, session)
    status, raw = await claim(server_client, a, new_id())
    assert status == 409
    for secret_ish in (task.id, got.token, got.attempt_id, "SELECT", "sqlite", "/"):
        assert secret_ish.encode() not in raw
