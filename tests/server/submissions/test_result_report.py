"""The result report's optional parts: ``order_sn`` and ``observation_reason`` are stored on
the submission as reported, change no state, take part in the idempotency comparison, and a bad value is
refused by the schema with nothing written."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.server.clock import ManualClock, from_wire
from cmbuyer.server.domain.reports import NO_TAP_REASONS
from cmbuyer.server.lifecycle import run_sweep
from tests.server.conftest import Maker
from tests.server.submissions.helpers import (
    fenced_http,
    fingerprint,
    post_json,
    post_writing_nothing,
    result_body,
    result_path,
    task_row,
)


def _extras(conn: sqlite3.Connection, sid: str) -> tuple[Any, ...]:
    return tuple(
        conn.execute(
            "SELECT state, observation, order_sn, observation_reason FROM order_submissions WHERE id = ?", (sid,)
        ).fetchone()
    )


async def test_order_number_is_stored_with_a_handoff(
    server_client: Any, make_device: Maker, make_task: Maker, sync_conn: sqlite3.Connection
) -> None:
    c, sid = await fenced_http(server_client, make_device, make_task)
    body = result_body(c, "EXTERNAL_PAYMENT_HANDOFF", order_sn="241201-0987654321")
    status, raw = await post_json(server_client, result_path(sid), c.device, body)
    assert status == 200, raw
    assert _extras(sync_conn, sid) == ("RECONCILIATION_REQUIRED", "EXTERNAL_PAYMENT_HANDOFF", "241201-0987654321", None)
    audit = json.loads(
        sync_conn.execute("SELECT detail_json FROM audit_log WHERE action = 'submission.result'").fetchone()[0]
    )
    assert audit["order_sn"] == "241201-0987654321" and "observation_reason" not in audit
    # the same key with another order number is a different request
    status, raw = await post_writing_nothing(
        server_client, sync_conn, result_path(sid), c.device, {**body, "order_sn": "241201-0000000"}
    )
    assert (status, json.loads(raw)) == (409, {"error": "idempotency_conflict"})


async def test_payment_suspected_is_stored_and_changes_no_state(
    server_client: Any, make_device: Maker, make_task: Maker, sync_conn: sqlite3.Connection
) -> None:
    c, sid = await fenced_http(server_client, make_device, make_task)
    status, raw = await post_json(
        server_client, result_path(sid), c.device, result_body(c, "UNKNOWN", observation_reason="PAYMENT_SUSPECTED")
    )
    assert status == 200, raw
    # the observation alone decides the state: UNKNOWN → a person reconciles, as without the reason
    assert json.loads(raw)["task_state"] == "RECONCILIATION_REQUIRED"
    assert _extras(sync_conn, sid) == ("RECONCILIATION_REQUIRED", "UNKNOWN", None, "PAYMENT_SUSPECTED")


async def test_late_result_keeps_its_order_number(
    server_client: Any, make_device: Maker, make_task: Maker, clock: ManualClock, sync_conn: sqlite3.Connection
) -> None:
    c, sid = await fenced_http(server_client, make_device, make_task)
    clock.set(from_wire(c.lease_expires_at))
    assert (await run_sweep(server_client.server.app)).submissions_to_reconciliation == 1
    status, raw = await post_json(
        server_client, result_path(sid), c.device, result_body(c, "SUBMITTED", order_sn="ABC123456")
    )
    assert status == 200, raw
    assert _extras(sync_conn, sid) == ("RECONCILIATION_REQUIRED", "SUBMITTED", "ABC123456", None)
    assert task_row(sync_conn, c.task_id)["state"] == "RECONCILIATION_REQUIRED"


@pytest.mark.parametrize(
    "change",
    [
        {"order_sn": "12345"},  # too short
        {"order_sn": "-12345678"},  # must start with a letter or digit
        {"order_sn": "2412 01234567"},
        {"order_sn": "２４１２０１２３４５６７"},  # full-width digits are not the wire form
        {"order_sn": "1" * 41},
        {"order_sn": "ABCDEF\n"},  # a trailing newline passed the $-anchored pattern
        {"order_sn": "241201-0987654321\r\n"},
        {"order_sn": None},  # optional means absent, not null
        {"order_sn": 241201234567},
        {"observation_reason": "PAID"},
        {"observation_reason": None},
        {"observation_reason": "payment_suspected"},
        # a reason that says no tap was sent comes only with UNKNOWN
        {"observation": "SUBMITTED", "observation_reason": "NOT_TAPPED_OBSCURED"},
        {"observation": "EXTERNAL_PAYMENT_HANDOFF", "observation_reason": "NOT_TAPPED_SCREEN_CHANGED"},
        {"observation": "SECURITY_CHALLENGE", "observation_reason": "SUBMIT_CONTROL_GONE"},
    ],
    ids=lambda c: repr(c),
)
async def test_bad_extras_refused_nothing_written(
    server_client: Any, make_device: Maker, make_task: Maker, sync_conn: sqlite3.Connection, change: dict[str, Any]
) -> None:
    c, sid = await fenced_http(server_client, make_device, make_task)
    before = fingerprint(sync_conn)
    status, raw = await post_json(server_client, result_path(sid), c.device, result_body(c, **change))
    assert status == 400, raw
    assert fingerprint(sync_conn) == before


@pytest.mark.parametrize("reason", sorted(NO_TAP_REASONS))
async def test_no_tap_sent_is_stored_with_unknown(
    server_client: Any, make_device: Maker, make_task: Maker, sync_conn: sqlite3.Connection, reason: str
) -> None:
    """The agent's last look refused the submit tap: UNKNOWN with the reason, a person reconciles."""
    c, sid = await fenced_http(server_client, make_device, make_task)
    status, raw = await post_json(
        server_client, result_path(sid), c.device, result_body(c, "UNKNOWN", observation_reason=reason)
    )
    assert status == 200, raw
    assert _extras(sync_conn, sid) == ("RECONCILIATION_REQUIRED", "UNKNOWN", None, reason)


def test_the_no_tap_reasons_are_the_wire_schemas() -> None:
    common = json.loads((Path(__file__).parents[3] / "shared" / "schemas" / "common.json").read_text("utf-8"))
    assert set(common["$defs"]["no_tap_reason"]["enum"]) == NO_TAP_REASONS
    assert NO_TAP_REASONS <= set(common["$defs"]["observation_reason"]["enum"])
