"""Heartbeat (docs/api.md "POST /api/v1/devices/heartbeat"): records what the phone host reports, answers
app_version_allowed from CMBUYER_ALLOWED_APP_VERSIONS and the server time; audit rows only when a reported fact
changes."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from cmbuyer.schemas import validate
from cmbuyer.server.clock import ManualClock, to_wire
from cmbuyer.server.db import run_in_transaction
from cmbuyer.server.services import devices as device_service
from cmbuyer.server.store import audit
from cmbuyer.server.store import devices as device_store
from cmbuyer.server.tx.common import Actor
from tests.server.claims.conftest import HEARTBEAT, heartbeat_body, post
from tests.server.conftest import Maker


@pytest.mark.parametrize(
    ("version", "allowed"), [("8.17.0", True), ("8.17.1", False), (None, False), ("8.17.0 ", False)]
)  # exact names only
async def test_heartbeat_records_and_answers(
    server_client: Any,
    make_device: Maker,
    sync_conn: sqlite3.Connection,
    clock: ManualClock,
    version: str | None,
    allowed: bool,
) -> None:
    dev = make_device()
    body = heartbeat_body(dev.device_id, pdd_version=version, pdd_version_code=81700, state="BUSY")
    status, raw, _ = await post(server_client, HEARTBEAT, dev, body)
    assert status == 200
    answer = json.loads(raw)
    validate("heartbeat.response", answer)
    assert answer == {
        "device_id": dev.device_id,
        "app_version_allowed": allowed,
        "server_now": to_wire(clock.now()),
        "heartbeat_interval_seconds": 10,
    }
    row = device_store.get(sync_conn, dev.device_id)
    assert row is not None
    assert (
        row.last_heartbeat_at,
        row.pdd_version,
        row.pdd_version_code,
        row.reported_state,
        row.app_version_allowed,
        row.adb_serial,
    ) == (to_wire(clock.now()), version, 81700, "BUSY", allowed, "192.168.0.173:5555")


async def test_audit_only_when_a_reported_fact_changes(
    server_client: Any, make_device: Maker, sync_conn: sqlite3.Connection, clock: ManualClock
) -> None:
    dev = make_device()
    for _ in range(3):
        assert (await post(server_client, HEARTBEAT, dev, heartbeat_body(dev.device_id)))[0] == 200
        clock.advance(10)
    assert (await post(server_client, HEARTBEAT, dev, heartbeat_body(dev.device_id, state="PAUSED")))[0] == 200
    rows = [r for r in audit.for_subject(sync_conn, "device", dev.device_id) if r.action == "device.heartbeat"]
    assert len(rows) == 2
    assert rows[-1].detail == {"reported_state": "PAUSED"}
    assert sync_conn.execute("SELECT last_heartbeat_at FROM devices WHERE id = ?", (dev.device_id,)).fetchone()[
        0
    ] == to_wire(clock.now())


async def test_revoked_device_heartbeat_is_401(
    server_client: Any, make_device: Maker, sync_conn: sqlite3.Connection, clock: ManualClock
) -> None:
    dev = make_device()
    run_in_transaction(
        sync_conn, lambda c: device_service.revoke_device(c, dev.device_id, Actor("cli", "t"), clock.now())
    )
    assert (await post(server_client, HEARTBEAT, dev, heartbeat_body(dev.device_id)))[:2] == (401, b"")


@pytest.mark.parametrize("field", ["client_version", "adb_serial", "android_release", "pdd_version"])
async def test_a_trailing_newline_is_refused_and_nothing_stored(
    server_client: Any, make_device: Maker, sync_conn: sqlite3.Connection, field: str
) -> None:
    """The $-anchored text pattern let ``"8.17.0\\n"`` through and the newline was stored."""
    dev = make_device()
    body = heartbeat_body(dev.device_id, pdd_version="8.17.0", pdd_version_code=81700, state="READY")
    assert (await post(server_client, HEARTBEAT, dev, body))[0] == 200
    before = tuple(sync_conn.execute("SELECT * FROM devices WHERE id = ?", (dev.device_id,)).fetchone())
    audits = sync_conn.execute("SELECT count(*) FROM audit_log").fetchone()[0]
    status, raw, _ = await post(server_client, HEARTBEAT, dev, {**body, field: body[field] + "\n", "state": "BUSY"})
    assert status == 400 and json.loads(raw) == {"error": "invalid_request"}
    assert tuple(sync_conn.execute("SELECT * FROM devices WHERE id = ?", (dev.device_id,)).fetchone()) == before
    assert sync_conn.execute("SELECT count(*) FROM audit_log").fetchone()[0] == audits
