"""``POST /api/v1/tasks/claim-next`` as one write-transaction job (docs/api.md).

Order inside the transaction (each step only after the previous one):

1. conditional "device still ACTIVE" UPDATE — takes the write position (:func:`device_tx.begin`);
2. idempotency lookup of ``claim_request_id`` — same request → the stored result byte for byte
   (200 with the same token rebuilt by HMAC, or the persisted EMPTY 204); reused key → 409;
3. defense in depth: the device's latest heartbeat must be fresh, READY and report an allowed
   Pinduoduo version (:func:`~cmbuyer.server.domain.claims.may_claim`), else 409 ``app_version_not_allowed``;
4. the device's open claim, if any: same session + live lease + consistent task/authorization →
   the same attempt again (recorded under the new key); anything else → 409
   ``claim_requires_manual``. Never a second attempt, never a transfer;
5. an administrator paused the device, or its pacing does not allow a claim yet
   (:func:`~cmbuyer.server.domain.pacing.no_new_work`) → EMPTY, persisted (after step 4: an open claim still
   resumes and runs to its end);
6. the supervision pair (:func:`supervision_tx.for_claim`): held → EMPTY, persisted; otherwise it
   decides whether the new attempt is supervised;
7. the oldest claimable authorization (:func:`auth_store.next_candidate`); none → EMPTY, persisted;
8. attempt + claim (random nonce, token hash, lease) + request record + audit row, authorization
   ACTIVE→CLAIMED, task PENDING→CLAIMED with version + 1; the device's pacing counters
   (:func:`device_store.count_claim`).

The job raises on any rule break, so the group commit rolls back its savepoint: all or nothing. The
claim token is never stored: the stored bodies omit it and it is re-derived for every answer.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from datetime import datetime
from typing import Any

from cmbuyer.server.clock import to_wire
from cmbuyer.server.domain import claim_token, lease, pacing
from cmbuyer.server.domain.claims import (
    ClaimPolicy,
    app_version_not_allowed,
    claim_requires_manual,
    may_claim,
    may_resume,
    wire_snapshot,
)
from cmbuyer.server.domain.errors import BrokenInvariant
from cmbuyer.server.domain.states import (
    AUTHORIZATION_TRANSITIONS,
    TASK_TRANSITIONS,
    AttemptState,
    AuthorizationState,
    TaskState,
    transition,
)
from cmbuyer.server.store import attempts as attempt_store
from cmbuyer.server.store import authorizations as auth_store
from cmbuyer.server.store import devices as device_store
from cmbuyer.server.store import tasks as task_store
from cmbuyer.server.store.attempts import Attempt
from cmbuyer.server.tx import device_tx
from cmbuyer.server.tx import supervision as supervision_tx
from cmbuyer.server.tx.common import canonical_json, new_id
from cmbuyer.server.tx.idempotency import Stored
from cmbuyer.server.tx.moves import TaskRead, move_authorization, move_task

ENDPOINT = "claim-next"
FIRST_GENERATION = 1


def derive_token(attempt: Attempt, secret: bytes) -> str:
    """Rebuild the attempt's claim token and prove it against the stored hash (fail closed: a secret that
    does not reproduce it raises Unavailable → 503, never a substitute token)."""
    token = claim_token.rebuilt(secret, attempt)
    if token is None:
        raise BrokenInvariant("claim token secret does not reproduce a stored claim")
    return token


def _with_token(body_without_token: str, token: str) -> str:
    """Insert the claim token into a stored (token-free) canonical body; the result is canonical too, so a
    replay is byte-identical to the first answer."""
    body: dict[str, Any] = json.loads(body_without_token)
    body["attempt"]["claim_token"] = token
    return canonical_json(body)


def _replay(conn: sqlite3.Connection, stored: Stored, secret: bytes) -> Stored:
    if stored.body is None:
        return stored  # the persisted EMPTY
    attempt = attempt_store.get(conn, stored.attempt_id) if stored.attempt_id else None
    if attempt is None:
        raise BrokenInvariant("stored claim response without its attempt")
    return Stored(stored.status, _with_token(stored.body, derive_token(attempt, secret)), attempt.id)


def _resume(
    req: device_tx.DeviceWrite, attempt: Attempt, *, session_id: str, now: datetime, policy: ClaimPolicy
) -> Stored:
    """Same session, live lease, consistent rows (:func:`~cmbuyer.server.domain.claims.may_resume`) → the
    same attempt under the new key; else 409."""
    if attempt.session_id != session_id or not lease.is_live(attempt.lease_expires_at, now):
        raise claim_requires_manual()  # the cheap half of may_resume first: no reads for a new session
    task = task_store.get(req.conn, attempt.task_id)
    authorization = auth_store.get(req.conn, attempt.authorization_id)
    if (
        task is None
        or authorization is None
        or not may_resume(attempt, task, authorization, session_id=session_id, now=now)
    ):
        raise claim_requires_manual()
    token = derive_token(attempt, policy.secret)
    at = to_wire(now)
    # The stored snapshot (task/authorization fields never drift) with the *current* lease, so the
    # agent's renew CAS on expected_lease_expires_at works, and the current server time.
    body: dict[str, Any] = json.loads(attempt.response_json)
    body["attempt"]["lease_expires_at"] = attempt.lease_expires_at
    body["server_now"] = at
    req.remember(body, at=at, attempt_id=attempt.id)
    req.audit(
        attempt,
        "claim.resume",
        at=at,
        detail={"attempt_id": attempt.id, "session_id": session_id, "lease_expires_at": attempt.lease_expires_at},
    )
    return Stored(200, _with_token(canonical_json(body), token), attempt.id)


def claim_next(
    conn: sqlite3.Connection,
    *,
    device_id: str,
    session_id: str,
    claim_request_id: str,
    now: datetime,
    policy: ClaimPolicy,
    pack_id: str | None = None,
) -> Stored:
    """Run claim-next for an authenticated device inside the caller's write transaction.

    ``pack_id`` is the optional pack id the agent names: with the device it keys the supervision
    pair. A held pair gets EMPTY (the not-claimable path); a new attempt of a pair under supervision is
    stored ``supervised`` and its answer says ``"supervised": true``. A paused or paced device
    gets EMPTY unless it resumes its open claim.

    Returns the response to send (200 body with token, or 204 EMPTY). Raises
    :class:`device_tx.DeviceNotActive` (→ 401), Conflict ``idempotency_conflict`` /
    ``app_version_not_allowed`` / ``claim_requires_manual`` (→ 409), Unavailable (→ 503).
    """
    payload = {"claim_request_id": claim_request_id, "session_id": session_id}
    if pack_id is not None:  # absent → the same comparison form (and stored hashes) as before supervision existed
        payload["pack_id"] = pack_id
    req = device_tx.open_write(conn, device_id, key=claim_request_id, endpoint=ENDPOINT, payload=payload)
    stored = req.replay()
    if stored is not None:
        return _replay(conn, stored, policy.secret)
    if not may_claim(req.gate, now, policy):
        raise app_version_not_allowed()
    held = attempt_store.open_for_device(conn, device_id)
    if held is not None:
        return _resume(req, held, session_id=session_id, now=now, policy=policy)
    at = to_wire(now)
    if pacing.no_new_work(req.gate, now):
        return req.remember(None, at=at, status=204)
    try:
        pair = supervision_tx.for_claim(
            conn, device_id=device_id, gate=req.gate, claim_pack_id=pack_id, policy=policy.supervision
        )
    except ValueError:  # no pack id and no app version: no pair to claim for (may_claim makes this unreachable)
        raise app_version_not_allowed() from None
    candidate = None if pair.held else auth_store.next_candidate(conn, at)
    if candidate is None:
        return req.remember(None, at=at, status=204)
    return _claim(req, candidate, session_id=session_id, now=now, policy=policy, pair=pair)


def _claim(
    req: device_tx.DeviceWrite,
    candidate: auth_store.Candidate,
    *,
    session_id: str,
    now: datetime,
    policy: ClaimPolicy,
    pair: supervision_tx.ClaimSupervision,
) -> Stored:
    conn, device_id = req.conn, req.device_id
    authorization = candidate.authorization
    at = to_wire(now)
    new_auth_state = transition(AUTHORIZATION_TRANSITIONS, AuthorizationState(authorization.state), "claim")
    new_task_state = transition(TASK_TRANSITIONS, TaskState.PENDING, "claim")
    claimed_version = candidate.task_version + 1
    lease_end = to_wire(lease.new_expiry(now, policy.lease_ttl, authorization.expires_at))
    attempt_id = new_id()
    nonce = secrets.token_bytes(claim_token.NONCE_BYTES)
    token = claim_token.derive(
        policy.secret,
        device_id=device_id,
        task_id=authorization.task_id,
        authorization_id=authorization.id,
        attempt_id=attempt_id,
        generation=FIRST_GENERATION,
        nonce=nonce,
    )
    body: dict[str, Any] = {
        "task": {
            "id": authorization.task_id,
            "version": claimed_version,
            **wire_snapshot(authorization),
        },
        "authorization": {
            "id": authorization.id,
            "task_version": authorization.task_version,
            "expires_at": authorization.expires_at,
        },
        "attempt": {
            "id": attempt_id,
            "claim_generation": FIRST_GENERATION,
            "lease_expires_at": lease_end,
            "supervised": pair.supervised,
        },
        "server_now": at,
    }
    body_text = canonical_json(body)  # stored (attempt row and request record): never the token
    body["attempt"]["claim_token"] = token
    answer = canonical_json(body)  # what _with_token(body_text, token) gives on every replay
    # Row counts are proven for every step; a miss means the invariants broke → roll back, 503.
    move_authorization(conn, authorization, new_auth_state, at=at)
    move_task(conn, TaskRead(authorization.task_id, candidate.task_version, TaskState.PENDING), new_task_state, at=at)
    attempt = Attempt(
        id=attempt_id,
        task_id=authorization.task_id,
        authorization_id=authorization.id,
        device_id=device_id,
        session_id=session_id,
        claim_generation=FIRST_GENERATION,
        nonce=nonce,
        token_hash=claim_token.token_hash(token),
        claimed_task_version=claimed_version,
        lease_expires_at=lease_end,
        state=AttemptState.OPEN,
        close_reason=None,
        response_json=body_text,
        next_event_seq=1,
        created_at=at,
        closed_at=None,
        pack_key=pair.pack_key,
        supervised=int(pair.supervised),
    )
    attempt_store.insert(conn, attempt)
    device_store.count_claim(conn, device_id, at=at, day=pacing.day_of(now))
    supervision_tx.record_claim(conn, device_id, pair, at)
    req.remember_text(body_text, at=at, attempt_id=attempt.id)
    req.audit(
        attempt,
        "task.claim",
        at=at,
        detail={
            "attempt_id": attempt_id,
            "authorization_id": authorization.id,
            "session_id": session_id,
            "task_version": claimed_version,
            "lease_expires_at": lease_end,
            "pack_key": pair.pack_key,
            "supervised": pair.supervised,
        },
    )
    return Stored(200, answer, attempt_id)
