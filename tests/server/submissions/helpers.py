"""Helpers for the submission tests: claims through the REAL claim-next (HTTP against the in-process app,
or the service itself on a sync connection for multi-process tests), request bodies, PNG and
multipart builders, and a fingerprint of every table a device request may write."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from cmbuyer.server.config import DEFAULT_PAYMENT_MODES, Settings
from cmbuyer.server.db import run_in_transaction
from cmbuyer.server.domain.claims import ClaimPolicy
from cmbuyer.server.services import claim_next as claim_service
from cmbuyer.server.services import devices as device_service
from cmbuyer.server.services import evidence_upload
from cmbuyer.server.services import fence as fence_service
from cmbuyer.server.services.heartbeat import record_heartbeat
from cmbuyer.server.tx.common import new_id
from tests.device_bodies import fence_request
from tests.server.conftest import TEST_ACTOR, DeviceCreds, Maker

HEARTBEAT = "/api/v1/devices/heartbeat"
CLAIM_NEXT = "/api/v1/tasks/claim-next"


def events_path(task_id: str) -> str:
    return f"/api/v1/tasks/{task_id}/events"


def evidence_path(task_id: str) -> str:
    return f"/api/v1/tasks/{task_id}/evidence"


def fail_path(attempt_id: str) -> str:
    return f"/api/v1/purchase-attempts/{attempt_id}/fail"


def fence_path(attempt_id: str) -> str:
    return f"/api/v1/purchase-attempts/{attempt_id}/submission-fence"


def result_path(submission_id: str) -> str:
    return f"/api/v1/order-submissions/{submission_id}/result"


def heartbeat_body(device_id: str) -> dict[str, Any]:
    return {
        "device_id": device_id,
        "client_version": "0.1.0",
        "adb_serial": "192.168.0.173:5555",
        "android_release": "16",
        "pdd_version": "8.17.0",
        "pdd_version_code": 81700,
        "state": "READY",
    }


@dataclass(frozen=True)
class Claim:
    """A claim as the agent holds it (from a real claim-next 200 answer)."""

    device: DeviceCreds
    session_id: str
    task_id: str
    task_version: int
    authorization_id: str
    attempt_id: str
    token: str
    generation: int
    lease_expires_at: str
    quantity: int
    max_total_price: str
    sku_color: str | None
    sku_size: str | None
    sku_options: list[list[str]]

    @classmethod
    def from_body(cls, device: DeviceCreds, session_id: str, body: dict[str, Any]) -> Claim:
        t, a, att = body["task"], body["authorization"], body["attempt"]
        return cls(
            device,
            session_id,
            t["id"],
            t["version"],
            a["id"],
            att["id"],
            att["claim_token"],
            att["claim_generation"],
            att["lease_expires_at"],
            t["quantity"],
            t["max_total_price"],
            t["sku_color"],
            t["sku_size"],
            t["sku_options"],
        )


async def post_json(client: Any, path: str, creds: DeviceCreds | None, body: Any) -> tuple[int, bytes]:
    data = body if isinstance(body, bytes) else json.dumps(body, ensure_ascii=False).encode()
    headers = {"Content-Type": "application/json", **(creds.headers() if creds else {})}
    resp = await client.post(path, data=data, headers=headers)
    return resp.status, await resp.read()


async def claim_http(client: Any, creds: DeviceCreds) -> Claim:
    """Heartbeat + the real ``POST /api/v1/tasks/claim-next``; asserts a 200 claim."""
    status, raw = await post_json(client, HEARTBEAT, creds, heartbeat_body(creds.device_id))
    assert status == 200, raw
    session = new_id()
    status, raw = await post_json(client, CLAIM_NEXT, creds, {"session_id": session, "claim_request_id": new_id()})
    assert status == 200, (status, raw)
    return Claim.from_body(creds, session, json.loads(raw))


async def fence_http(client: Any, c: Claim, **over: Any) -> tuple[int, bytes]:
    """POST claim ``c``'s fence request (:func:`fence_body` with ``over``) as its device: (status, raw body)."""
    return await post_json(client, fence_path(c.attempt_id), c.device, fence_body(c, **over))


async def fenced_http(client: Any, make_device: Maker, make_task: Maker) -> tuple[Claim, str]:
    """A started task claimed over HTTP by a new device and fenced (click permitted): the claim and submission id."""
    make_task(start=True)
    c = await claim_http(client, make_device())
    status, raw = await fence_http(client, c)
    assert status == 200 and json.loads(raw)["click_permitted"] is True
    return c, json.loads(raw)["submission_id"]


def claim_direct(conn: sqlite3.Connection, settings: Settings, now: datetime, creds: DeviceCreds) -> Claim:
    """The same claim through the real services on a sync connection (multi-process tests)."""
    policy = ClaimPolicy.from_settings(settings)
    run_in_transaction(
        conn,
        lambda c: record_heartbeat(
            c, device_id=creds.device_id, body=heartbeat_body(creds.device_id), now=now, policy=policy
        ),
    )
    session = new_id()
    stored = run_in_transaction(
        conn,
        lambda c: claim_service.claim_next(
            c, device_id=creds.device_id, session_id=session, claim_request_id=new_id(), now=now, policy=policy
        ),
    )
    assert stored.status == 200 and stored.body is not None
    return Claim.from_body(creds, session, json.loads(stored.body))


def renew_body(c: Claim, **over: Any) -> dict[str, Any]:
    """A lease-renew body for this claim's current lease (fields overridable)."""
    return {
        "renew_request_id": new_id(),
        "session_id": c.session_id,
        "attempt_id": c.attempt_id,
        "claim_generation": c.generation,
        "claim_token": c.token,
        "expected_lease_expires_at": c.lease_expires_at,
    } | over


def fence_body(c: Claim, **over: Any) -> dict[str, Any]:
    """A fence request that passes every gate for the default task (2 × 12.88 ≤ 30.00, paid by 微信支付):
    :func:`tests.device_bodies.fence_request` with this claim's ids, token, SKU options and quantity. The
    options go as ``selected_options`` (today's agent) unless ``over`` names ``selected_color``/``selected_size``
    (an agent that knows only colour/size), which then replace them."""
    legacy = "selected_color" in over or "selected_size" in over
    claim = {
        "task_id": c.task_id,
        "expected_task_version": c.task_version,
        "authorization_id": c.authorization_id,
        "claim_generation": c.generation,
        "claim_token": c.token,
        "quantity_read": c.quantity,
    }
    if legacy:
        claim |= {"selected_color": c.sku_color, "selected_size": c.sku_size}
    body = fence_request(**(claim | over))
    if legacy:
        body.pop("selected_options", None)
        return body
    del body["selected_color"], body["selected_size"]
    body.setdefault("selected_options", c.sku_options)
    return body


def event(
    step: str = "OPEN_PRODUCT",
    outcome: str = "OK",
    reason: str | None = None,
    summary: str = "ok",
    at: str = "2026-08-04T09:00:01Z",
) -> dict[str, Any]:
    return {"step": step, "outcome": outcome, "reason_code": reason, "summary": summary, "occurred_at": at}


def events_body(c: Claim, events: list[dict[str, Any]] | None = None, **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "batch_key": new_id(),
        "attempt_id": c.attempt_id,
        "claim_generation": c.generation,
        "claim_token": c.token,
        "events": events or [event()],
    }
    body.update(over)
    return body


def fail_body(c: Claim, **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "fail_key": new_id(),
        "claim_generation": c.generation,
        "claim_token": c.token,
        "reason_code": "SKU_VALUE_MISSING",
        "summary": "option not found",
        "evidence_asset_id": None,
    }
    body.update(over)
    return body


def result_body(c: Claim, observation: str = "SUBMITTED", **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "result_key": new_id(),
        "attempt_id": c.attempt_id,
        "claim_token": c.token,
        "observation": observation,
        "evidence_asset_id": None,
    }
    body.update(over)
    return body


def png(mode: str = "RGB", size: tuple[int, int] = (24, 16), **save: Any) -> bytes:
    """A real PNG made by Pillow (``save`` passes e.g. ``interlace=1`` or ``bits=…``)."""
    if mode == "I;16":
        im = Image.new("I;16", size)
        for x in range(size[0]):
            im.putpixel((x, 0), x * 1000)
    else:
        im = Image.new(mode, size, color=None)
        if mode in ("RGB", "RGBA", "L", "P"):
            for x in range(size[0]):
                im.putpixel((x, x % size[1]), 7 if mode in ("L", "P") else (x * 9 % 256,) * len(mode))
    out = io.BytesIO()
    im.save(out, format="PNG", **save)
    return out.getvalue()


def evidence_fields(c: Claim, data: bytes, **over: str) -> dict[str, str]:
    import hashlib

    fields = {
        "upload_key": new_id(),
        "attempt_id": c.attempt_id,
        "kind": "SKU_PANEL_GATE_1",
        "privacy_tier": "INTERNAL_RAW",
        "sha256": hashlib.sha256(data).hexdigest(),
        "captured_at": "2026-08-04T09:01:00Z",
    }
    fields.update(over)
    return fields


def fence_job(
    c: Claim, body: dict[str, Any], now: datetime, payment_modes: tuple[str, ...] = DEFAULT_PAYMENT_MODES
) -> Callable[[sqlite3.Connection], fence_service.FenceAnswer]:
    """The fence use-case for claim ``c`` as a job for the server's writer (``db.write``) or a test's own
    transaction: what the fence route runs after it has read and checked ``body``."""

    def job(conn: sqlite3.Connection) -> fence_service.FenceAnswer:
        return fence_service.create_fence(
            conn,
            device_id=c.device.device_id,
            attempt_id=c.attempt_id,
            body=body,
            now=now,
            allowed_payment_modes=payment_modes,
        )

    return job


def direct_upload(c: Claim, data: bytes, kind: str = "FAILURE") -> evidence_upload.Upload:
    """The validated upload the evidence route hands to the service, for a 16×8 PNG (evidence.pngs.padded_to)."""
    return evidence_upload.Upload(
        task_id=c.task_id,
        upload_key=new_id(),
        attempt_id=c.attempt_id,
        kind=kind,
        privacy_tier="INTERNAL_RAW",
        sha256=hashlib.sha256(data).hexdigest(),
        captured_at="2026-08-04T09:01:00Z",
        byte_size=len(data),
        width=16,
        height=8,
    )


def multipart(
    fields: dict[str, str],
    file: bytes | None,
    *,
    boundary: str = "cmbuyer-test-boundary",
    file_headers: str = "Content-Type: image/png\r\n",
    file_name: str = "file",
    extra: bytes = b"",
    closing: bytes = b"--\r\n",
) -> tuple[bytes, str]:
    """A multipart/form-data body like the agent's (metadata parts, then the file part)."""
    parts: list[bytes] = []
    for name, value in fields.items():
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode() + value.encode() + b"\r\n"
        )
    parts.append(extra)
    if file is not None:
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{file_name}"; filename="s.png"\r\n'
            f"{file_headers}\r\n".encode()
            + file
            + b"\r\n"
        )
    parts.append(f"--{boundary}".encode() + closing)
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


async def upload(
    client: Any, creds: DeviceCreds | None, task_id: str, body: bytes, content_type: str, **headers: str
) -> tuple[int, bytes]:
    hdrs = {"Content-Type": content_type, **(creds.headers() if creds else {}), **headers}
    resp = await client.post(
        evidence_path(task_id), data=io.BytesIO(body) if len(body) > 1 << 20 else body, headers=hdrs
    )
    return resp.status, await resp.read()


# Every table a device request may write (besides ``devices.write_seq``).
DEVICE_WRITTEN_TABLES = (
    "device_requests",
    "attempts",
    "audit_log",
    "authorizations",
    "tasks",
    "events",
    "evidence_assets",
    "order_submissions",
)


def fingerprint(conn: sqlite3.Connection) -> dict[str, Any]:
    """Every table a device request may change (compare before/after a refused request)."""
    out: dict[str, Any] = {}
    for table in DEVICE_WRITTEN_TABLES:
        out[table] = [tuple(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY rowid")]
    # write_seq is bumped by every authenticated write's first statement (rolled back on refusal)
    out["devices"] = [tuple(r) for r in conn.execute("SELECT * FROM devices ORDER BY id")]
    return out


async def post_writing_nothing(
    client: Any, conn: sqlite3.Connection, path: str, creds: DeviceCreds | None, body: Any
) -> tuple[int, bytes]:
    """:func:`post_json`, asserting the request wrote nothing (:func:`fingerprint` of ``conn`` before == after);
    returns (status, raw body) for the caller to check the refusal."""
    before = fingerprint(conn)
    status, raw = await post_json(client, path, creds, body)
    assert fingerprint(conn) == before, (status, raw)
    return status, raw


async def assert_fence_refused_after_revocation(client: Any, c: Claim, conn: sqlite3.Connection, now: datetime) -> None:
    """Revoke the claim's device (the CLI's use-case); its fence is then the empty 401 and writes nothing."""
    run_in_transaction(conn, lambda tx: device_service.revoke_device(tx, c.device.device_id, TEST_ACTOR, now))
    assert await post_writing_nothing(client, conn, fence_path(c.attempt_id), c.device, fence_body(c)) == (401, b"")


def task_row(conn: sqlite3.Connection, task_id: str) -> sqlite3.Row:
    row: sqlite3.Row = conn.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone()
    return row


ATTEMPT_LIMIT = {"error": "attempt_limit_reached"}


@pytest.fixture(name="settings")
def small_budget_settings(data_dir: Any, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """A ``settings`` fixture with per-attempt budgets small enough for tests to reach: 20 events, 3 evidence
    files, 4,000 evidence bytes (files up to 2,000 bytes); the real environment's CMBUYER_* removed. A test
    module that imports it uses it instead of the conftest's ``settings``."""
    from cmbuyer.server.config import load_settings

    for key in list(os.environ):
        if key.startswith("CMBUYER_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("CMBUYER_EVENTS_PER_ATTEMPT", "20")
    monkeypatch.setenv("CMBUYER_EVIDENCE_PER_ATTEMPT", "3")
    monkeypatch.setenv("CMBUYER_EVIDENCE_MAX_BYTES", "2000")
    monkeypatch.setenv("CMBUYER_EVIDENCE_BYTES_PER_ATTEMPT", "4000")
    monkeypatch.setenv("CMBUYER_SUPERVISED_ORDERS", "0")
    return load_settings(data_dir)


async def upload_png(client: Any, claimed: Claim, data: bytes, **over: str) -> tuple[int, bytes]:
    """Upload ``data`` as evidence of ``claimed`` (a fresh upload key unless ``over`` sets one)."""
    body, ctype = multipart(evidence_fields(claimed, data, **over), data)
    return await upload(client, claimed.device, claimed.task_id, body, ctype)


def age_file(path: Path, seconds: float) -> None:
    """Set ``path``'s access and modification time ``seconds`` into the past (never through a symlink)."""
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)


def stored_files(settings: Settings) -> set[Path]:
    """Every file under the evidence directory (none when it does not exist yet)."""
    root = settings.evidence_dir
    return {p for p in root.rglob("*") if p.is_file()} if root.exists() else set()
