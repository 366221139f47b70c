"""Authentication before any body byte on every device route (raw socket: a huge declared body that
is never sent still gets its 401 at once), revocation mid-flow (401, nothing written, no takeover),
and large numbers of events (batch cap, body cap, consecutive sequence numbers over many batches)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from typing import Any

import pytest

from cmbuyer.server.clock import ManualClock
from cmbuyer.server.tx.common import new_id
from tests.server.conftest import Maker
from tests.server.submissions.helpers import (
    CLAIM_NEXT,
    HEARTBEAT,
    Claim,
    assert_fence_refused_after_revocation,
    event,
    events_body,
    events_path,
    fence_path,
    fingerprint,
    heartbeat_body,
    post_json,
    result_path,
)
from tests.soak import soak_iterations

ZERO = "13c9f507-7473-4fa6-8d71-8786c34c6301"
ROUTES = [
    HEARTBEAT,
    CLAIM_NEXT,
    f"/api/v1/tasks/{ZERO}/lease/renew",
    events_path(ZERO),
    f"/api/v1/tasks/{ZERO}/evidence",
    f"/api/v1/purchase-attempts/{ZERO}/fail",
    fence_path(ZERO),
    result_path(ZERO),
]


async def _raw(port: int, head: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head)
        await writer.drain()
        return await asyncio.wait_for(reader.read(4096), 5)
    finally:
        writer.close()


async def test_401_before_any_body_byte_on_every_route(server_client: Any, claimed: Claim) -> None:
    port = server_client.server.port
    bad_token = "f" * 64
    for path in ROUTES:
        for expect in (b"", b"Expect: 100-continue\r\n"):
            head = (
                (
                    f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    f"Authorization: Bearer {bad_token}\r\nX-CMBuyer-Device-ID: {claimed.device.device_id}\r\n"
                    "Content-Length: 1000000000\r\n"
                ).encode()
                + expect
                + b"\r\n"
            )
            answer = await _raw(port, head)  # the body is never sent: a reader would wait forever
            assert answer.startswith(b"HTTP/1.1 401"), (path, answer[:60])
            assert b"100 Continue" not in answer
            assert answer.endswith(b"\r\n\r\n")  # empty body


async def test_revoked_mid_flow_is_401_and_nobody_takes_over(
    server_client: Any, claimed: Claim, sync_conn: sqlite3.Connection, clock: ManualClock, make_device: Maker
) -> None:
    await assert_fence_refused_after_revocation(server_client, claimed, sync_conn, clock.now())
    other = make_device("b")
    assert (await post_json(server_client, HEARTBEAT, other, heartbeat_body(other.device_id)))[0] == 200
    status, _ = await post_json(
        server_client, CLAIM_NEXT, other, {"session_id": new_id(), "claim_request_id": new_id()}
    )
    assert status == 204  # the revoked device's claim is not released to anyone
    row = sync_conn.execute("SELECT state, device_id FROM attempts WHERE id = ?", (claimed.attempt_id,)).fetchone()
    assert tuple(row) == ("OPEN", claimed.device.device_id)


@pytest.mark.slow(seconds_per_iteration=1)  # a soak loop: in `make soak`, timeout scaled
async def test_event_volume(server_client: Any, claimed: Claim, sync_conn: sqlite3.Connection) -> None:
    path = events_path(claimed.task_id)
    before = fingerprint(sync_conn)
    status, raw = await post_json(server_client, path, claimed.device, events_body(claimed, [event()] * 21))
    assert (status, json.loads(raw)) == (400, {"error": "invalid_request"})
    status, raw = await post_json(server_client, path, claimed.device, {**events_body(claimed), "events": []})
    assert (status, json.loads(raw)) == (400, {"error": "invalid_request"})
    big = events_body(claimed, [event(summary="长" * 200)] * 20)  # > 16 KiB as JSON with \u escapes
    status, raw = await post_json(server_client, path, claimed.device, json.dumps(big, ensure_ascii=True).encode())
    assert (status, json.loads(raw)) == (413, {"error": "request_too_large"})
    assert fingerprint(sync_conn) == before
    batches = soak_iterations(25)
    expected_first = 1
    for _ in range(batches):
        status, raw = await post_json(server_client, path, claimed.device, events_body(claimed, [event()] * 20))
        assert status == 200, raw
        answer = json.loads(raw)
        assert (answer["first_seq"], answer["last_seq"]) == (expected_first, expected_first + 19)
        expected_first += 20
    seqs = [
        r[0]
        for r in sync_conn.execute("SELECT seq FROM events WHERE attempt_id = ? ORDER BY seq", (claimed.attempt_id,))
    ]
    assert seqs == list(range(1, expected_first))
