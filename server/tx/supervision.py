"""The supervision steps other use-cases take inside their own transaction (rules in
:mod:`cmbuyer.server.domain.supervision`, the approval routes in ``services/supervision.py``):

- claim-next asks :func:`for_claim` which pair the device claims for, whether that pair is held (→ no task)
  and whether the new attempt is supervised (→ ``attempts.supervised = 1``), then :func:`record_claim`;
- the heartbeat answer gains ``supervision_hold: true`` through :func:`heartbeat_fields`;
- the fence calls :func:`require_approval` for a supervised attempt;
- every path that closes an attempt (fail, reset, cancel, result, reconcile, sweeper) calls
  :func:`void_for_attempt`, so a closed attempt never keeps a WAITING or APPROVED request (a stale
  approval can never be reused).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from cmbuyer.server.domain import supervision as rules
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import BrokenInvariant, DomainError, refusal
from cmbuyer.server.domain.supervision import ApprovalState, SupervisionPolicy
from cmbuyer.server.store import supervision as store
from cmbuyer.server.store.attempts import Attempt
from cmbuyer.server.store.devices import DeviceGate
from cmbuyer.server.tx import audit as audit_tx
from cmbuyer.server.tx.common import Actor


def approval_required() -> DomainError:
    """The fixed 409 of the fence for a supervised attempt without a matching APPROVED request."""
    return refusal(Code.APPROVAL_REQUIRED).because("fence")


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


def require_approval(conn: sqlite3.Connection, attempt: Attempt, fence_body: dict[str, Any]) -> None:
    """The fence's supervision condition: a supervised attempt needs its live request APPROVED
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


def void(conn: sqlite3.Connection, approval: store.Approval, *, actor: Actor, at: str, why: str) -> None:
    """Make ``approval`` (WAITING or APPROVED) VOID and write its ``approval.void`` audit row; raises
    Unavailable (→ 503) when the row changed under the write lock."""
    new = rules.void(ApprovalState(approval.state))
    if not store.set_state(conn, approval.id, expected_state=approval.state, new_state=new.value):
        raise BrokenInvariant("approval request changed under the write lock")
    audit_tx.record(
        conn,
        actor,
        "approval.void",
        "task",
        approval.task_id,
        at=at,
        detail={"approval_id": approval.id, "attempt_id": approval.attempt_id, "from": approval.state, "why": why},
    )


def void_for_attempt(conn: sqlite3.Connection, attempt_id: str, *, actor: Actor, at: str, why: str) -> None:
    """The attempt has just closed (fail, reset, cancel, result, reconcile, sweeper): its WAITING or APPROVED
    request, if any, becomes VOID in the same transaction (audit ``approval.void``). One indexed read when
    there is none."""
    live = store.live_approval(conn, attempt_id)
    if live is not None:
        void(conn, live, actor=actor, at=at, why=why)
