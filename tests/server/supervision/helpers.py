"""Helpers for the supervision tests: approval bodies and paths, a real gate-3 screenshot upload, a person's
decision simulated through the domain and a direct store call (the admin routes are another helper's), and
supervision pairs set up through the store."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from cmbuyer.server.db import run_in_transaction
from cmbuyer.server.domain.supervision import READING_KEYS, ApprovalState, decide
from cmbuyer.server.store import supervision as store
from cmbuyer.server.tx.common import new_id
from tests.server.submissions import helpers as submission_helpers
from tests.server.submissions.helpers import Claim, png, post_json, upload_png

AT = "2026-08-04T09:00:30.000000Z"


def approval_path(attempt_id: str) -> str:
    return f"/api/v1/purchase-attempts/{attempt_id}/approval"


def status_path(attempt_id: str) -> str:
    return f"/api/v1/purchase-attempts/{attempt_id}/approval/status"


def readings_of(fence: dict[str, Any]) -> dict[str, Any]:
    """The 8 readings of a fence body (:data:`READING_KEYS`, what the agent sends for approval before that fence)."""
    return {k: fence[k] for k in READING_KEYS}


def approval_body(c: Claim, screenshot_asset_id: str, readings: dict[str, Any], **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "approval_key": new_id(),
        "task_id": c.task_id,
        "authorization_id": c.authorization_id,
        "claim_generation": c.generation,
        "claim_token": c.token,
        "screenshot_asset_id": screenshot_asset_id,
        "readings": readings,
    }
    body.update(over)
    return body


async def gate3_screenshot(client: Any, c: Claim, kind: str = "CONFIRM_PAGE_GATE_3") -> str:
    """Upload a real PNG as evidence of ``c`` through the real evidence route; returns the asset id."""
    status, raw = await upload_png(client, c, png(size=(30 + len(kind), 20)), kind=kind)
    assert status == 201, raw
    asset_id: str = json.loads(raw)["asset_id"]
    return asset_id


async def ask(client: Any, c: Claim, body: dict[str, Any]) -> tuple[int, Any, bytes]:
    """POST the approval request; returns (status, decoded body or None, raw bytes)."""
    status, raw = await post_json(client, approval_path(c.attempt_id), c.device, body)
    return status, (json.loads(raw) if raw else None), raw


async def status_of(client: Any, c: Claim, approval_id: str, **over: Any) -> tuple[int, Any]:
    body = {"approval_id": approval_id, "claim_generation": c.generation, "claim_token": c.token, **over}
    status, raw = await post_json(client, status_path(c.attempt_id), c.device, body)
    return status, (json.loads(raw) if raw else None)


def person_decides(conn: sqlite3.Connection, approval_id: str, action: str = "approve") -> None:
    """What the admin side does on 批准/驳回: the domain's transition, then the compare-and-set in the store."""

    def job(c: sqlite3.Connection) -> None:
        current = store.get_approval(c, approval_id)
        assert current is not None
        new = decide(ApprovalState(current.state), action)  # type: ignore[arg-type]
        assert store.set_state(
            c,
            approval_id,
            expected_state=current.state,
            new_state=new.value,
            decided_by="admin:reviewer",
            decided_at=AT,
        )

    run_in_transaction(conn, job)


def put_pair(conn: sqlite3.Connection, device_id: str, pack_key: str, confirmed: int, held: bool = False) -> None:
    run_in_transaction(
        conn,
        lambda c: store.put_pair(
            c, store.Pair(device_id, pack_key, confirmed, held, "marked wrong" if held else None, AT)
        ),
    )


def approval_row(conn: sqlite3.Connection, approval_id: str) -> store.Approval:
    row = store.get_approval(conn, approval_id)
    assert row is not None
    return row


def fingerprint(conn: sqlite3.Connection) -> dict[str, Any]:
    """Every table a device request may change, the supervision tables included (compare before/after)."""
    out = submission_helpers.fingerprint(conn)
    for table in ("approval_requests", "supervision_pairs"):
        out[table] = [tuple(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY rowid")]
    return out
