"""Fixtures and helpers for the claim/lease tests: a ready device (authenticated, with a fresh
READY heartbeat), request helpers against the real server, and a fingerprint of every table a device
request could write, to prove that refused requests write nothing."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from cmbuyer.server.clock import ManualClock
from cmbuyer.server.db import run_in_transaction
from cmbuyer.server.domain.claims import ClaimPolicy
from cmbuyer.server.services.heartbeat import record_heartbeat
from cmbuyer.server.tx.common import new_id
from tests.server.conftest import DeviceCreds, DeviceMaker, Maker

CLAIM = "/api/v1/tasks/claim-next"
HEARTBEAT = "/api/v1/devices/heartbeat"


def renew_path(task_id: str) -> str:
    return f"/api/v1/tasks/{task_id}/lease/renew"


def heartbeat_body(device_id: str, **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "device_id": device_id,
        "client_version": "0.1.0",
        "adb_serial": "192.168.0.173:5555",
        "android_release": "16",
        "pdd_version": "8.17.0",
        "state": "READY",
    }
    body.update(over)
    return body


def fingerprint(conn: sqlite3.Connection) -> dict[str, Any]:
    """Everything a device request may change, as plain data (compare before/after)."""
    out: dict[str, Any] = {}
    for table in ("device_requests", "attempts", "audit_log", "authorizations", "tasks"):
        out[table] = [tuple(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY rowid")]
    out["devices"] = [tuple(r) for r in conn.execute("SELECT * FROM devices ORDER BY id")]
    return out


@dataclass
class Claimed:
    """A decoded 200 claim-next answer (:meth:`from_raw`) and the claim fields the tests use."""

    raw: bytes
    body: dict[str, Any]
    task_id: str
    attempt_id: str
    token: str
    lease: str

    @classmethod
    def from_raw(cls, raw: bytes) -> Claimed:
        """Decode a 200 answer's bytes; KeyError/JSONDecodeError when it is not a claim."""
        body = json.loads(raw)
        attempt = body["attempt"]
        return cls(
            raw,
            body,
            str(body["task"]["id"]),
            str(attempt["id"]),
            str(attempt["claim_token"]),
            str(attempt["lease_expires_at"]),
        )

    def renew_body(self, session_id: str, **over: Any) -> dict[str, Any]:
        body = {
            "renew_request_id": new_id(),
            "session_id": session_id,
            "attempt_id": self.attempt_id,
            "claim_generation": self.body["attempt"]["claim_generation"],
            "claim_token": self.token,
            "expected_lease_expires_at": self.lease,
        }
        body.update(over)
        return body


@pytest.fixture
def policy(settings: Any) -> ClaimPolicy:
    return ClaimPolicy.from_settings(settings)


@pytest.fixture
def ready_device(
    make_device: DeviceMaker, sync_conn: sqlite3.Connection, clock: ManualClock, policy: ClaimPolicy
) -> Callable[..., DeviceCreds]:
    """A new ACTIVE device whose latest heartbeat (at the clock's now) is READY with an allowed version."""

    def make(name: str = "phone") -> DeviceCreds:
        creds = make_device(name)
        run_in_transaction(
            sync_conn,
            lambda c: record_heartbeat(
                c, device_id=creds.device_id, body=heartbeat_body(creds.device_id), now=clock.now(), policy=policy
            ),
        )
        return creds

    return make


@pytest.fixture
def dev(make_task: Maker, ready_device: Callable[..., DeviceCreds]) -> DeviceCreds:
    """A started task, then a :func:`ready_device` to claim it."""
    make_task(start=True)
    return ready_device()


async def post(client: Any, path: str, creds: DeviceCreds | None, body: Any, **headers: str) -> tuple[int, bytes, Any]:
    """POST JSON (``body`` dict → canonical text, bytes as is); returns (status, raw body, response)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    hdrs = {"Content-Type": "application/json", **(creds.headers() if creds else {}), **headers}
    resp = await client.post(path, data=data, headers=hdrs)
    raw = await resp.read()
    return resp.status, raw, resp


async def claim(client: Any, creds: DeviceCreds, session_id: str, key: str | None = None) -> tuple[int, bytes]:
    status, raw, _ = await post(client, CLAIM, creds, {"session_id": session_id, "claim_request_id": key or new_id()})
    return status, raw


async def claim_ok(client: Any, creds: DeviceCreds, session_id: str, key: str | None = None) -> Claimed:
    status, raw = await claim(client, creds, session_id, key)
    assert status == 200, (status, raw)
    return Claimed.from_raw(raw)
