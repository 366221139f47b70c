"""Supervised first orders, device side (issue 17; rules in :mod:`cmbuyer.server.domain.supervision`).

- claim-next asks :func:`for_claim` which pair the device claims for, whether that pair is held (→ no task)
  and whether the new attempt is supervised (→ ``attempts.supervised = 1``);
- the heartbeat answer gains ``supervision_hold: true`` through :func:`heartbeat_fields`;
- ``POST /api/v1/purchase-attempts/{aid}/approval`` is :func:`request_approval` (one write job) and
  ``…/approval/status`` is :func:`approval_status` (a read);
- the fence calls :func:`require_approval` for a supervised attempt;
- every path that closes an attempt calls :func:`void_for_attempt` in its own transaction, so a closed
  attempt never keeps a WAITING or APPROVED request (a stale approval can never be reused).

docs/api.md "Supervised first orders" describes the wire side.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cmbuyer.schemas.canonical import canonical_json
from cmbuyer.server.clock import to_wire
from cmbuyer.server.db import StorageError
from cmbuyer.server.domain import claim_token, lease
from cmbuyer.server.domain import supervision as rules
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import Conflict, DomainError, NotFound
from cmbuyer.server.domain.states import AuthorizationState, TaskState
from cmbuyer.server.domain.supervision import ApprovalState, SupervisionPolicy
from cmbuyer.server.services import device_tx, fail_attempt, idempotency
from cmbuyer.server.services.claim_check import claim_not_current, current_claim
from cmbuyer.server.services.common import Actor, new_id
from cmbuyer.server.services.idempotency import Stored
from cmbuyer.server.store import attempts as attempt_store
from cmbuyer.server.store import audit
from cmbuyer.server.store import authorizations as auth_store
from cmbuyer.server.store import evidence as evidence_store
from cmbuyer.server.store import submissions as submission_store
from cmbuyer.server.store import supervision as store
from cmbuyer.server.store import tasks as task_store
from cmbuyer.server.store.attempts import Attempt
from cmbuyer.server.store.claims import DeviceGate

ENDPOINT = "approval"
SCREENSHOT_KIND = "CONFIRM_PAGE_GATE_3"


class ScreenshotRefused(DomainError):
    """``422 approval_screenshot_invalid``: ``screenshot_asset_id`` is not a ``CONFIRM_PAGE_GATE_3`` evidence
    asset of this attempt (unknown, another attempt's, or another kind)."""

    code = Code.APPROVAL_SCREENSHOT_INVALID
    status = 422


def not_supervised() -> Conflict:
    """The fixed 409 for an approval request on an attempt that was not supervised at claim time."""
    return Conflict("the attempt is not supervised", code="not_supervised")


def approval_required() -> Conflict:
    """The fixed 409 of the fence for a supervised attempt without a matching APPROVED request."""
    return Conflict("a person's approval of these readings is required", code="approval_required")


@dataclass(frozen=True)
class ClaimSupervision:
    """What claim-next needs: the pair (``pack_key``), whether it is held (no task) and whether a new attempt
    of it is supervised."""

    pack_key: str
    held: bool
    supervised: bool


def for_claim(
    conn: sqlite3.Connection, *, device_id: str, gate: DeviceGate, claim_pack_id: str | None, policy: SupervisionPolicy
) -> ClaimSupervision:
    """Decide the pair of a new claim (:func:`rules.pack_key_for`: claim-next ``pack_id`` → the last heartbeat's
    pack id → its app version, all from ``gate``) and read its row (absent = 0 confirmed, not held): one
    primary-key read. A device an admin exempted (``gate.supervision_off``) is never supervised; a held pair
    still claims nothing.

    Raises ``ValueError`` when no pack key can be built (no pack id and no app version): the caller refuses
    the claim, it never invents a pair.
    """
    key = rules.pack_key_for(claim_pack_id, gate.pack_id, gate.pdd_version, gate.pdd_version_code)
    pair = store.get_pair(conn, device_id, key)
    confirmed, held = (0, False) if pair is None else (pair.confirmed_orders, pair.held)
    return ClaimSupervision(
        key, rules.blocks_claims(held), rules.is_supervised(policy, confirmed, held, device_off=gate.supervision_off)
    )


def record_claim(conn: sqlite3.Connection, device_id: str, decision: ClaimSupervision, at: str) -> None:
    """A supervised claim makes sure its pair has a row (0 confirmed), so the admin pages can show it and the
    verdicts have a row to count on."""
    if decision.supervised:
        store.ensure_pair(conn, device_id, decision.pack_key, at)


def heartbeat_fields(conn: sqlite3.Connection, *, device_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """Extra heartbeat answer fields: ``{"supervision_hold": True}`` when the pair of this heartbeat is held;
    else ``{}``. The pair is the one a claim right after it would use: the heartbeat's ``pack_id`` (which
    the heartbeat stores, absent = NULL), else ``app:<pdd_version>:<pdd_version_code>``. A heartbeat without
    a pack id and an app version names no pair and gets ``{}`` (it cannot claim anyway)."""
    try:
        key = rules.pack_key_for(None, body.get("pack_id"), body.get("pdd_version"), body.get("pdd_version_code"))
    except ValueError:
        return {}
    pair = store.get_pair(conn, device_id, key)
    return {"supervision_hold": True} if pair is not None and rules.blocks_claims(pair.held) else {}


def _answer(approval: store.Approval, state: str, at: str) -> dict[str, Any]:
    return {"approval_id": approval.id, "state": state, "decided_at": approval.decided_at, "server_now": at}


def _check_screenshot(conn: sqlite3.Connection, asset_id: str, attempt: Attempt) -> None:
    asset = evidence_store.get(conn, asset_id)
    if asset is None or asset.attempt_id != attempt.id or asset.kind != SCREENSHOT_KIND:
        raise ScreenshotRefused("screenshot_asset_id is not a gate-3 screenshot of this attempt")


def _void(conn: sqlite3.Connection, approval: store.Approval, *, actor: Actor, at: str, why: str) -> None:
    new = rules.void(ApprovalState(approval.state))
    if not store.set_approval_state(conn, approval.id, expected_state=approval.state, new_state=new.value):
        raise StorageError("approval request changed under the write lock")
    audit.append(
        conn,
        at=at,
        actor_kind=actor.kind,
        actor_id=actor.id,
        action="approval.void",
        subject_kind="task",
        subject_id=approval.task_id,
        detail={"approval_id": approval.id, "attempt_id": approval.attempt_id, "from": approval.state, "why": why},
    )


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
    device_tx.begin(conn, device_id)
    key: str = body["approval_key"]
    payload = fail_attempt.request_payload(attempt_id, body)  # the same comparison form as fail and the fence
    stored = device_tx.replay_scoped(conn, device_id, key, ENDPOINT, payload)
    if stored is not None:
        return stored
    attempt = current_claim(
        conn,
        device_id=device_id,
        attempt_id=attempt_id,
        token=body["claim_token"],
        now=now,
        generation=body["claim_generation"],
        task_id=body["task_id"],
        require_lease=True,
    )
    if body["authorization_id"] != attempt.authorization_id:
        raise claim_not_current()
    if submission_store.for_attempt_or_authorization(conn, attempt.id, attempt.authorization_id) is not None:
        # fail_attempt is imported as a module: it imports this one (void on close), so names resolve at call time
        raise fail_attempt.submission_fenced()
    task = task_store.get(conn, attempt.task_id)
    authorization = auth_store.get(conn, attempt.authorization_id)
    if (
        task is None
        or authorization is None
        or task.state not in (TaskState.CLAIMED, TaskState.ORDERING)
        or authorization.state != AuthorizationState.CLAIMED
        or not lease.is_live(authorization.expires_at, now)
    ):
        raise claim_not_current()
    if not attempt.supervised:
        raise not_supervised()
    readings_hash = rules.readings_hash(body["readings"])
    _check_screenshot(conn, body["screenshot_asset_id"], attempt)
    at = to_wire(now)
    actor = Actor("device", device_id)
    answer = store.rejected_approval(conn, attempt.id)
    live = store.live_approval(conn, attempt.id)
    if answer is None and live is not None and live.readings_hash == readings_hash:
        answer = live
    if answer is None:
        if live is not None:
            _void(conn, live, actor=actor, at=at, why="new_readings")
        answer = store.Approval(
            id=new_id(),
            attempt_id=attempt.id,
            task_id=attempt.task_id,
            device_id=device_id,
            approval_key=key,
            readings_json=canonical_json(body["readings"]),
            readings_hash=readings_hash,
            screenshot_asset_id=body["screenshot_asset_id"],
            state=ApprovalState.WAITING.value,
            decided_by=None,
            decided_at=None,
            created_at=at,
        )
        store.insert_approval(conn, answer)
        audit.append(
            conn,
            at=at,
            actor_kind=actor.kind,
            actor_id=actor.id,
            action="approval.request",
            subject_kind="task",
            subject_id=attempt.task_id,
            request_id=key,
            generation=attempt.claim_generation,
            detail={
                "approval_id": answer.id,
                "attempt_id": attempt.id,
                "screenshot_asset_id": answer.screenshot_asset_id,
                "replaced_approval_id": None if live is None else live.id,
            },
        )
    return idempotency.remember(
        conn,
        device_id,
        key,
        ENDPOINT,
        payload,
        status=200,
        body=_answer(answer, answer.state, at),
        at=at,
        attempt_id=attempt.id,
    )


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
        raise NotFound("approval request not found")
    token_ok = claim_token.matches(attempt.token_hash, body["claim_token"])
    if not token_ok or attempt.claim_generation != body["claim_generation"]:
        raise claim_not_current()
    return _answer(approval, approval.state, to_wire(now))


def require_approval(conn: sqlite3.Connection, attempt: Attempt, fence_body: dict[str, Any]) -> None:
    """The fence's supervision condition (issue 17 §5): a supervised attempt needs its live request APPROVED
    with the readings hash of ``fence_body``. Only this attempt's requests are read, so an approval of another
    attempt can never count; stale readings give another hash. Raises ``409 approval_required``."""
    if not attempt.supervised:
        return
    live = store.live_approval(conn, attempt.id)
    if not rules.approval_counts(
        None if live is None else live.state,
        None if live is None else live.readings_hash,
        rules.readings_hash(fence_body),
    ):
        raise approval_required()


def void_for_attempt(conn: sqlite3.Connection, attempt_id: str, *, actor: Actor, at: str, why: str) -> None:
    """The attempt has just closed (fail, reset, cancel, result, reconcile, sweeper): its WAITING or APPROVED
    request, if any, becomes VOID in the same transaction (audit ``approval.void``). One indexed read when
    there is none."""
    live = store.live_approval(conn, attempt_id)
    if live is not None:
        _void(conn, live, actor=actor, at=at, why=why)
