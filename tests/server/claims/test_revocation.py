"""Revocation linearized with claims (docs/api.md "Device authentication", "Linearization with revocation"): a
revocation committed first makes a later claim/renew fail with the empty 401 even when authentication had already
passed; a claim committed first stays (no automatic release, no takeover)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

from cmbuyer.server.clock import ManualClock
from cmbuyer.server.config import Settings
from cmbuyer.server.db import connect_sync, run_in_transaction
from cmbuyer.server.domain.claims import ClaimPolicy
from cmbuyer.server.services import claim_next as claim_service
from cmbuyer.server.services import devices as device_service
from cmbuyer.server.tx.common import Actor, new_id
from cmbuyer.server.tx.device_tx import DeviceNotActive
from cmbuyer.server.web.keys import DB
from tests.server.claims.conftest import claim, claim_ok, fingerprint, post, renew_path
from tests.server.conftest import DeviceCreds, Maker

CLI = Actor("cli", "pytest")


def revoke(conn: sqlite3.Connection, device_id: str, clock: ManualClock) -> None:
    assert run_in_transaction(conn, lambda c: device_service.revoke_device(c, device_id, CLI, clock.now()))


def before_each_write(client: Any, monkeypatch: pytest.MonkeyPatch, hook: Callable[[], object]) -> None:
    """Run ``hook`` on the event loop each time the app queues a write transaction, before it is queued."""
    db = client.server.app[DB]
    real_write = db.write

    async def hooked_write(job: Any, **kwargs: Any) -> Any:
        hook()
        return await real_write(job, **kwargs)

    monkeypatch.setattr(db, "write", hooked_write)


async def test_revocation_committed_after_authentication_but_before_the_claim_transaction(
    server_client: Any,
    dev: DeviceCreds,
    sync_conn: sqlite3.Connection,
    clock: ManualClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # authentication already passed on the reader
    before_each_write(server_client, monkeypatch, lambda: revoke(sync_conn, dev.device_id, clock))
    before = fingerprint(sync_conn)
    status, raw, resp = await post(
        server_client, "/api/v1/tasks/claim-next", dev, {"session_id": new_id(), "claim_request_id": new_id()}
    )
    assert (status, raw, resp.headers["WWW-Authenticate"]) == (401, b"", "Bearer")
    after = fingerprint(sync_conn)
    assert after["attempts"] == [] and after["device_requests"] == [] and after["tasks"] == before["tasks"]


async def test_revocation_holding_the_write_lock_while_a_claim_waits(
    server_client: Any,
    dev: DeviceCreds,
    settings: Settings,
    clock: ManualClock,
    sync_conn: sqlite3.Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queued = asyncio.Event()
    before_each_write(server_client, monkeypatch, queued.set)
    cli = connect_sync(settings.db_path)
    try:
        cli.execute("BEGIN IMMEDIATE")  # the CLI holds SQLite's write lock …
        assert device_service.revoke_device(cli, dev.device_id, CLI, clock.now())
        request = asyncio.create_task(claim(server_client, dev, new_id()))
        await queued.wait()  # … the claim passed authentication and queued its transaction …
        await asyncio.sleep(0.05)  # let the writer reach BEGIN IMMEDIATE (outcome is the same either way)
        cli.execute("COMMIT")  # … the revocation commits first
        assert await request == (401, b"")
    finally:
        cli.close()
    assert sync_conn.execute("SELECT count(*) FROM attempts").fetchone()[0] == 0
    assert sync_conn.execute("SELECT state FROM tasks").fetchone()[0] == "PENDING"


async def test_claim_committed_first_stays_after_revocation(
    server_client: Any, ready_device: Maker, make_task: Maker, sync_conn: sqlite3.Connection, clock: ManualClock
) -> None:
    make_task(start=True)
    dev = ready_device()
    other = ready_device("other")
    session = new_id()
    got = await claim_ok(server_client, dev, session)
    revoke(sync_conn, dev.device_id, clock)
    before = fingerprint(sync_conn)
    status, raw, _ = await post(server_client, renew_path(got.task_id), dev, got.renew_body(session))
    assert (status, raw) == (401, b"")
    assert await claim(server_client, dev, session) == (401, b"")
    assert await claim(server_client, other, new_id()) == (204, b"")  # no takeover by another device
    clock.set(got.lease)  # even after the lease ends nothing is released
    assert await claim(server_client, other, new_id()) == (409, b'{"error":"app_version_not_allowed"}')
    after = fingerprint(sync_conn)
    assert after["attempts"] == before["attempts"] and after["tasks"] == before["tasks"]
    row = sync_conn.execute("SELECT state FROM attempts").fetchone()
    assert row[0] == "OPEN"


def test_service_level_both_orders(
    ready_device: Maker, make_task: Maker, sync_conn: sqlite3.Connection, clock: ManualClock, policy: ClaimPolicy
) -> None:
    make_task(start=True)
    make_task(start=True, goods_id="12")
    a, b = ready_device("a"), ready_device("b")

    def job(device_id: str) -> Callable[[sqlite3.Connection], Any]:
        return lambda c: claim_service.claim_next(
            c, device_id=device_id, session_id=new_id(), claim_request_id=new_id(), now=clock.now(), policy=policy
        )

    revoke(sync_conn, a.device_id, clock)
    before = fingerprint(sync_conn)
    with pytest.raises(DeviceNotActive):
        run_in_transaction(sync_conn, job(a.device_id))
    assert fingerprint(sync_conn) == before
    assert run_in_transaction(sync_conn, job(b.device_id)).status == 200
    revoke(sync_conn, b.device_id, clock)
    assert sync_conn.execute("SELECT state FROM attempts WHERE device_id = ?", (b.device_id,)).fetchone()[0] == "OPEN"
