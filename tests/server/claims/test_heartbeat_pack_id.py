"""Heartbeat ``pack_id`` (docs/api.md "POST /api/v1/devices/heartbeat"): a selector pack id or ``NO_PACK`` is stored
on the device row; a heartbeat without it (an older agent, or an unknown app version) stores NULL, never
keeps an earlier report; anything else is the strict ``400 invalid_request`` and changes nothing.
Real aiohttp app on a loopback port, real SQLite file."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from cmbuyer.server.clock import ManualClock
from cmbuyer.server.store import audit
from cmbuyer.server.store import devices as device_store
from tests.server.claims.conftest import HEARTBEAT, fingerprint, heartbeat_body, post
from tests.server.conftest import Maker

PACK = "pdd-8.17.0-81700"


def _pack_id(conn: sqlite3.Connection, device_id: str) -> str | None:
    row = device_store.get(conn, device_id)
    assert row is not None
    return row.pack_id


async def test_pack_id_no_pack_and_absent_are_stored_as_reported(
    server_client: Any, make_device: Maker, sync_conn: sqlite3.Connection, clock: ManualClock
) -> None:
    dev = make_device()
    assert _pack_id(sync_conn, dev.device_id) is None  # never heartbeated: unknown
    for sent, stored in (
        (PACK, PACK),
        ("NO_PACK", "NO_PACK"),
        ("my-pack_8.22.0+fix.2", "my-pack_8.22.0+fix.2"),
        (None, None),
    ):  # None: an agent that does not report packs leaves the field out
        body = heartbeat_body(dev.device_id) if sent is None else heartbeat_body(dev.device_id, pack_id=sent)
        status, raw, _ = await post(server_client, HEARTBEAT, dev, body)
        assert status == 200, raw
        assert set(json.loads(raw)) == {"device_id", "app_version_allowed", "server_now", "heartbeat_interval_seconds"}
        assert _pack_id(sync_conn, dev.device_id) == stored, sent
        clock.advance(10)


async def test_a_pack_change_is_audited_once(
    server_client: Any, make_device: Maker, sync_conn: sqlite3.Connection, clock: ManualClock
) -> None:
    dev = make_device()
    bodies = [heartbeat_body(dev.device_id, pack_id=PACK)] * 3 + [
        heartbeat_body(dev.device_id, pack_id="NO_PACK"),
        heartbeat_body(dev.device_id),
    ]
    for body in bodies:
        assert (await post(server_client, HEARTBEAT, dev, body))[0] == 200
        clock.advance(10)
    rows = audit.for_subject(sync_conn, "device", dev.device_id)
    details = [r.detail for r in rows if r.action == "device.heartbeat"]
    assert len(details) == 3  # first report, PACK → NO_PACK, NO_PACK → unknown; the steady beats add nothing
    assert details[0]["pack_id"] == PACK
    assert details[1:] == [{"pack_id": "NO_PACK"}, {"pack_id": None}]


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "no pack",
        "NO_PACK ",
        "No_Pack",
        "Pdd-8.17.0",
        "-pdd",
        ".pdd",
        "pdd/8.17.0",
        "pdd\n",
        "pdd-８",
        "x" * 65,
        None,
        0,
        True,
        ["pdd"],
        {"id": "pdd"},
    ],
)
async def test_a_bad_pack_id_is_refused_and_changes_nothing(
    server_client: Any, make_device: Maker, sync_conn: sqlite3.Connection, bad: Any
) -> None:
    dev = make_device()
    assert (await post(server_client, HEARTBEAT, dev, heartbeat_body(dev.device_id, pack_id=PACK)))[0] == 200
    before = fingerprint(sync_conn)
    status, raw, _ = await post(server_client, HEARTBEAT, dev, heartbeat_body(dev.device_id, pack_id=bad))
    assert (status, json.loads(raw)) == (400, {"error": "invalid_request"})
    assert fingerprint(sync_conn) == before
    assert _pack_id(sync_conn, dev.device_id) == PACK
