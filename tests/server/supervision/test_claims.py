"""claim-next and the heartbeat under supervision: which pair a claim is for, when its attempt is
supervised, a held pair claims nothing, and the replay stays byte for byte."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from cmbuyer.schemas import validate
from cmbuyer.server.config import load_settings
from cmbuyer.server.domain.errors import SettingsError
from cmbuyer.server.store import supervision as store
from cmbuyer.server.tx.common import new_id
from tests.server.conftest import DeviceCreds, DeviceMaker, Maker
from tests.server.submissions.helpers import CLAIM_NEXT, HEARTBEAT, heartbeat_body, post_json
from tests.server.supervision.helpers import put_pair

APP_KEY = "app:8.17.0:81700"  # the version submissions.helpers.heartbeat_body reports


async def _claim(
    client: Any, creds: DeviceCreds, *, heartbeat_pack: str | None = None, **extra: Any
) -> tuple[int, bytes, dict[str, Any]]:
    """A READY heartbeat (naming ``heartbeat_pack`` when given), then claim-next with ``extra`` fields."""
    beat = heartbeat_body(creds.device_id)
    if heartbeat_pack is not None:
        beat["pack_id"] = heartbeat_pack
    status, raw = await post_json(client, HEARTBEAT, creds, beat)
    assert status == 200, raw
    body = {"session_id": new_id(), "claim_request_id": new_id(), **extra}
    status, raw = await post_json(client, CLAIM_NEXT, creds, body)
    return status, raw, body


async def _claim_ok(client: Any, creds: DeviceCreds, **kwargs: Any) -> dict[str, Any]:
    """:func:`_claim`, asserting a 200; the answer."""
    status, raw, _ = await _claim(client, creds, **kwargs)
    assert status == 200, raw
    answer: dict[str, Any] = json.loads(raw)
    return answer


@pytest.fixture
def dev(make_task: Maker, make_device: DeviceMaker) -> DeviceCreds:
    """A started task, then a device (``make_device()``) to claim it."""
    make_task(start=True)
    return make_device()


def _attempt(conn: sqlite3.Connection, attempt_id: str) -> tuple[str | None, int]:
    row = conn.execute("SELECT pack_key, supervised FROM attempts WHERE id = ?", (attempt_id,)).fetchone()
    return row[0], row[1]


async def test_new_pair_is_supervised_and_gets_a_row(
    server_client: Any, dev: DeviceCreds, sync_conn: sqlite3.Connection
) -> None:
    answer = await _claim_ok(server_client, dev)
    validate("claim_next.response", answer)
    assert answer["attempt"]["supervised"] is True
    assert _attempt(sync_conn, answer["attempt"]["id"]) == (APP_KEY, 1)
    pair = store.get_pair(sync_conn, dev.device_id, APP_KEY)
    assert pair is not None and (pair.confirmed_orders, pair.held) == (0, False)
    audit = sync_conn.execute("SELECT detail_json FROM audit_log WHERE action = 'task.claim'").fetchone()[0]
    assert json.loads(audit)["pack_key"] == APP_KEY and json.loads(audit)["supervised"] is True


async def test_pack_key_order_claim_then_heartbeat_then_app(
    server_client: Any, make_device: DeviceMaker, make_task: Maker, sync_conn: sqlite3.Connection
) -> None:
    for goods in ("11", "12", "13"):
        make_task(start=True, goods_id=goods)
    named, reported, none = make_device("named"), make_device("reported"), make_device("none")
    answer = await _claim_ok(server_client, named, heartbeat_pack="pdd-8.17.0", pack_id="pdd-8.17.0-op")
    assert _attempt(sync_conn, answer["attempt"]["id"])[0] == "pdd-8.17.0-op"
    answer = await _claim_ok(server_client, reported, heartbeat_pack="pdd-8.17.0")
    assert _attempt(sync_conn, answer["attempt"]["id"])[0] == "pdd-8.17.0"
    answer = await _claim_ok(server_client, none, heartbeat_pack="NO_PACK")  # NO_PACK is not a pack id
    assert _attempt(sync_conn, answer["attempt"]["id"])[0] == APP_KEY


@pytest.mark.parametrize("supervised_orders", ["0"])
async def test_off_means_unsupervised(server_client: Any, dev: DeviceCreds, sync_conn: sqlite3.Connection) -> None:
    answer = await _claim_ok(server_client, dev)
    assert answer["attempt"]["supervised"] is False
    assert _attempt(sync_conn, answer["attempt"]["id"]) == (APP_KEY, 0)
    assert store.get_pair(sync_conn, dev.device_id, APP_KEY) is None  # no pair row for unsupervised claims


async def test_confirmed_pairs_run_unsupervised_until_n(
    server_client: Any, make_device: DeviceMaker, make_task: Maker, sync_conn: sqlite3.Connection
) -> None:
    make_task(start=True, goods_id="21")
    make_task(start=True, goods_id="22")
    two, three = make_device("two"), make_device("three")
    put_pair(sync_conn, two.device_id, APP_KEY, confirmed=2)
    put_pair(sync_conn, three.device_id, APP_KEY, confirmed=3)
    answer = await _claim_ok(server_client, two)
    assert answer["attempt"]["supervised"] is True
    answer = await _claim_ok(server_client, three)
    assert answer["attempt"]["supervised"] is False
    # another pack of the same device is a new pair: supervised again
    sync_conn.execute(
        "UPDATE attempts SET state = 'CLOSED', close_reason = 'FAILED', closed_at = created_at WHERE device_id = ?",
        (three.device_id,),
    )
    make_task(start=True, goods_id="23")
    answer = await _claim_ok(server_client, three, pack_id="pdd-8.17.0-new")
    assert answer["attempt"]["supervised"] is True


@pytest.mark.parametrize("supervised_orders", ["3", "0"])
async def test_held_pair_claims_nothing_and_the_heartbeat_says_why(
    server_client: Any, dev: DeviceCreds, sync_conn: sqlite3.Connection
) -> None:
    """Held blocks also with supervision off: turning it off does not clear a person's "wrong"."""
    put_pair(sync_conn, dev.device_id, APP_KEY, confirmed=5, held=True)
    status, raw = await post_json(server_client, HEARTBEAT, dev, heartbeat_body(dev.device_id))
    assert status == 200
    answer = json.loads(raw)
    validate("heartbeat.response", answer)
    assert answer["supervision_hold"] is True
    before = sync_conn.execute("SELECT count(*) FROM attempts").fetchone()[0]
    body = {"session_id": new_id(), "claim_request_id": new_id()}
    status, raw = await post_json(server_client, CLAIM_NEXT, dev, body)
    assert (status, raw) == (204, b"")
    assert sync_conn.execute("SELECT count(*) FROM attempts").fetchone()[0] == before
    assert sync_conn.execute("SELECT state FROM tasks").fetchone()[0] == "PENDING"
    # the EMPTY is stored like any other: the same key replays 204 even after the hold is lifted
    put_pair(sync_conn, dev.device_id, APP_KEY, confirmed=0)
    assert await post_json(server_client, CLAIM_NEXT, dev, body) == (204, b"")
    status, raw = await post_json(server_client, HEARTBEAT, dev, heartbeat_body(dev.device_id))
    assert "supervision_hold" not in json.loads(raw)
    # another pack of the device is not held
    put_pair(sync_conn, dev.device_id, APP_KEY, confirmed=0, held=True)
    status, raw, _ = await _claim(server_client, dev, pack_id="pdd-8.17.0")
    assert status == 200, raw


async def test_claim_replay_is_byte_identical(server_client: Any, dev: DeviceCreds) -> None:
    status, raw, body = await _claim(server_client, dev, pack_id="pdd-8.17.0")
    assert status == 200
    assert await post_json(server_client, CLAIM_NEXT, dev, body) == (200, raw)
    # the pack id takes part in the comparison: the same key without it (or with another) is a conflict
    for other in ({k: v for k, v in body.items() if k != "pack_id"}, {**body, "pack_id": "pdd-8.22.0"}):
        status, raw2 = await post_json(server_client, CLAIM_NEXT, dev, other)
        assert (status, json.loads(raw2)) == (409, {"error": "idempotency_conflict"})


@pytest.mark.parametrize("pack_id", ["", "Pdd", "pdd 8", "-pdd", "x" * 65, 7, None, "NO_PACK", "pdd\n"])
async def test_bad_pack_id_is_400_nothing_written(
    server_client: Any, dev: DeviceCreds, sync_conn: sqlite3.Connection, pack_id: object
) -> None:
    await post_json(server_client, HEARTBEAT, dev, heartbeat_body(dev.device_id))
    status, raw = await post_json(
        server_client, CLAIM_NEXT, dev, {"session_id": new_id(), "claim_request_id": new_id(), "pack_id": pack_id}
    )
    assert (status, json.loads(raw)) == (400, {"error": "invalid_request"})
    assert sync_conn.execute("SELECT count(*) FROM attempts").fetchone()[0] == 0


def test_setting_values(tmp_path: Any) -> None:
    assert load_settings(tmp_path, {}).supervised_orders == 3
    assert load_settings(tmp_path, {"CMBUYER_SUPERVISED_ORDERS": "0"}).supervised_orders == 0
    assert load_settings(tmp_path, {"CMBUYER_SUPERVISED_ORDERS": "12"}).supervised_orders == 12
    for bad in ("-1", "three", "1.5", " 3", "1001"):
        with pytest.raises(SettingsError, match="CMBUYER_SUPERVISED_ORDERS"):
            load_settings(tmp_path, {"CMBUYER_SUPERVISED_ORDERS": bad})


def test_supervised_is_optional_in_the_claim_answer() -> None:
    """The response schema lets ``supervised`` be absent (attempts claimed by an older server resume without it)."""
    answer = {
        "task": {
            "id": new_id(),
            "version": 2,
            "title": "t",
            "product_url": "u",
            "goods_id": "1",
            "sku_options": [["颜色", "c"]],
            "sku_color": "c",
            "sku_size": None,
            "quantity": 1,
            "max_total_price": "1.00",
        },
        "authorization": {"id": new_id(), "task_version": 1, "expires_at": "2026-08-04T10:00:00Z"},
        "attempt": {
            "id": new_id(),
            "claim_token": "0" * 64,
            "claim_generation": 1,
            "lease_expires_at": "2026-08-04T09:02:00Z",
        },
        "server_now": "2026-08-04T09:00:00Z",
    }
    validate("claim_next.response", answer)
    validate("claim_next.response", {**answer, "attempt": {**answer["attempt"], "supervised": False}})


async def test_heartbeat_hold_follows_the_reported_pack(
    server_client: Any, make_device: DeviceMaker, sync_conn: sqlite3.Connection
) -> None:
    """The heartbeat's own ``pack_id`` names the pair; NO_PACK or none → the app version's pair."""
    dev = make_device()
    put_pair(sync_conn, dev.device_id, "pdd-8.17.0", confirmed=0, held=True)

    async def hold(**over: Any) -> bool | None:
        status, raw = await post_json(server_client, HEARTBEAT, dev, {**heartbeat_body(dev.device_id), **over})
        assert status == 200, raw
        answer = json.loads(raw)
        validate("heartbeat.response", answer)
        held: bool | None = answer.get("supervision_hold")
        return held

    assert await hold(pack_id="pdd-8.17.0") is True
    assert await hold(pack_id="pdd-8.17.0-b") is None
    assert await hold(pack_id="NO_PACK") is None and await hold() is None
    put_pair(sync_conn, dev.device_id, APP_KEY, confirmed=0, held=True)
    assert await hold(pack_id="NO_PACK") is True and await hold() is True
    assert await hold(pdd_version=None, pdd_version_code=None) is None  # no pack, no version: no pair


async def test_exempted_device_is_not_supervised_but_a_hold_stands(
    server_client: Any, make_device: DeviceMaker, make_task: Maker, sync_conn: sqlite3.Connection, clock: Any
) -> None:
    """``cmbuyer-server device supervision DEVICE off`` (the lead's CLI service) exempts the device."""
    from cmbuyer.server.db import run_in_transaction
    from cmbuyer.server.services import devices as device_service
    from tests.server.conftest import TEST_ACTOR

    make_task(start=True, goods_id="31")
    make_task(start=True, goods_id="32")
    free, held = make_device("free"), make_device("held")
    for dev in (free, held):
        run_in_transaction(
            sync_conn,
            lambda c, d=dev: device_service.set_supervision(
                c, d.device_id, off=True, actor=TEST_ACTOR, now=clock.now()
            ),
        )
    answer = await _claim_ok(server_client, free)
    assert answer["attempt"]["supervised"] is False
    assert _attempt(sync_conn, answer["attempt"]["id"]) == (APP_KEY, 0)
    put_pair(sync_conn, held.device_id, APP_KEY, confirmed=0, held=True)
    status, raw, _ = await _claim(server_client, held)
    assert (status, raw) == (204, b"")
