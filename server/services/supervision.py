"""Supervised first orders, device side: the approval routes (rules in
:mod:`cmbuyer.server.domain.supervision`).

- ``POST /api/v1/purchase-attempts/{aid}/approval`` is :func:`request_approval` (one write job) and
  ``…/approval/status`` is :func:`approval_status` (a read).

The supervision steps of other use-cases — the pair of a claim, the heartbeat's hold flag, the fence's
approval condition and voiding a closed attempt's request — are in :mod:`cmbuyer.server.tx.supervision`.
docs/api.md "Supervised first orders" describes the wire side.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta
from typing import Any

from cmbuyer.schemas.canonical import canonical_json
from cmbuyer.server.clock import to_wire
from cmbuyer.server.domain import claim_token, lease
from cmbuyer.server.domain import supervision as rules
from cmbuyer.server.domain.claims import claim_not_current, in_progress_before_fence
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import DomainError, NotFound, refusal
from cmbuyer.server.domain.reports import check_screenshot
from cmbuyer.server.domain.supervision import ApprovalState
from cmbuyer.server.store import attempts as attempt_store
from cmbuyer.server.store import evidence as evidence_store
from cmbuyer.server.store import supervision as store
from cmbuyer.server.tx import device_tx
from cmbuyer.server.tx.claim_check import claim_rows, unfenced_claim
from cmbuyer.server.tx.common import new_id
from cmbuyer.server.tx.idempotency import Stored
from cmbuyer.server.tx.supervision import void

ENDPOINT = "approval"


def not_supervised() -> DomainError:
    """The fixed 409 for an approval request on an attempt that was not supervised at claim time."""
    return refusal(Code.NOT_SUPERVISED).because("attempt")


def _answer(approval: store.Approval, state: str, at: str) -> dict[str, Any]:
    return {"approval_id": approval.id, "state": state, "decided_at": approval.decided_at, "server_now": at}


def request_approval(
    conn: sqlite3.Connection, *, device_id: str, attempt_id: str, body: dict[str, Any], now: datetime
) -> Stored:
    """``POST /api/v1/purchase-attempts/{aid}/approval`` for a schema-valid body, as one write job.

    Order: device ACTIVE → ``approval_key`` replay (same request → the stored answer; reused key →
    ``409 idempotency_conflict``) → the current claim exactly as the fence checks it (this device's OPEN
    attempt of ``task_id``, generation, token, lease strictly later than now, ``authorization_id``;
    ``409 claim_not_current``) → no submission yet (``409 submission_fenced``) → task CLAIMED/ORDERING and
    authorization CLAIMED and unexpired (``409 claim_not_current``) → attempt supervised (``409
    not_supervised``) → readings (``400 invalid_request``) → screenshot (``422 approval_screenshot_invalid``)
    → then:

    - the attempt has a REJECTED request → answer it (a person's "no" stands for the whole attempt);
    - its live request has the same readings hash → answer it (an agent asking again after a restart);
    - else the live request (if any) becomes VOID and a new WAITING request is stored, audit ``approval.request``.

    The answer is stored under the key and replays byte for byte (the state *at that time*: poll the status
    route for news).
    """
    req = device_tx.open_claim_write(
        conn, device_id, body, key=body["approval_key"], endpoint=ENDPOINT, attempt_id=attempt_id
    )
    stored = req.replay()
    if stored is not None:
        return stored
    attempt = unfenced_claim(conn, device_id=device_id, attempt_id=attempt_id, body=body, now=now)
    task, authorization = claim_rows(conn, attempt)
    if not in_progress_before_fence(task, authorization) or not lease.is_live(authorization.expires_at, now):
        raise claim_not_current()
    if not attempt.supervised:
        raise not_supervised()
    readings_hash = rules.readings_hash(body["readings"])
    check_screenshot(evidence_store.get(conn, body["screenshot_asset_id"]), attempt.id)
    at = to_wire(now)
    answer = store.rejected_approval(conn, attempt.id)
    live = store.live_approval(conn, attempt.id)
    if answer is None and live is not None and live.readings_hash == readings_hash:
        answer = live
    if answer is None:
        if live is not None:
            void(conn, live, actor=req.actor, at=at, why="new_readings")
        answer = store.Approval(
            id=new_id(),
            attempt_id=attempt.id,
            task_id=attempt.task_id,
            device_id=device_id,
            approval_key=req.key,
            readings_json=canonical_json(body["readings"]),
            readings_hash=readings_hash,
            screenshot_asset_id=body["screenshot_asset_id"],
            state=ApprovalState.WAITING.value,
            decided_by=None,
            decided_at=None,
            created_at=at,
        )
        store.insert_approval(conn, answer)
        wait = body.get("timeout_seconds", rules.DEFAULT_APPROVAL_WAIT_SECONDS)
        store.set_wait_until(conn, answer.id, to_wire(now + timedelta(seconds=wait)))
        req.audit(
            attempt,
            "approval.request",
            at=at,
            detail={
                "approval_id": answer.id,
                "attempt_id": attempt.id,
                "screenshot_asset_id": answer.screenshot_asset_id,
                "replaced_approval_id": None if live is None else live.id,
            },
        )
    return req.remember(_answer(answer, answer.state, at), at=at, attempt_id=attempt.id)


def approval_status(
    conn: sqlite3.Connection, *, device_id: str, attempt_id: str, body: dict[str, Any], now: datetime
) -> dict[str, Any]:
    """``POST /api/v1/purchase-attempts/{aid}/approval/status`` (read-only): the request's current state.

    The request must be one of attempt ``attempt_id`` (the URL's), an attempt of this device whose generation
    and token match (token compared in constant time, always). An unknown request, another attempt's and
    another device's look the same: ``404 not_found``; a wrong token or generation → ``409
    claim_not_current``. The attempt need not be open or leased: a closed attempt's request answers VOID
    (or REJECTED), which is what the waiting agent must learn.
    """
    approval = store.get_approval(conn, body["approval_id"])
    attempt = None if approval is None else attempt_store.get(conn, approval.attempt_id)
    if approval is None or attempt is None or attempt.id != attempt_id or attempt.device_id != device_id:
        raise NotFound().because("device_approval")
    token_ok = claim_token.matches(attempt.token_hash, body["claim_token"])
    if not token_ok or attempt.claim_generation != body["claim_generation"]:
        raise claim_not_current()
    return _answer(approval, approval.state, to_wire(now))
