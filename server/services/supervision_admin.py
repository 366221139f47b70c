"""The admin side of supervised first orders (docs/admin.md "Supervised first orders").

Use-cases, each one synchronous job inside one write transaction with its audit row:

- :func:`decide_approval` — a person approves or rejects what the phone read before the fence
  (``POST /approvals/{id}/approve|reject``). Only a WAITING request of a still OPEN attempt changes
  (WAITING → APPROVED/REJECTED through :func:`cmbuyer.server.domain.supervision.decide`); the same
  decision clicked twice is answered "already done" and changes nothing; anything else is a 409 with a
  Chinese message and changes nothing. Approving voids nothing else: the agent then asks the fence,
  which re-checks the readings hash.
- :func:`record_verdict` — after a supervised order, a person marks it right (the device–pack pair's
  ``confirmed_orders`` + 1) or wrong (the pair is held: the phone claims nothing for that pack). One
  verdict per submission.
- :func:`resupervise` — every pair of a device back to 0 confirmed, not held.

Each refusal is raised as a code and a reason (``DomainError.because``); the admin pages and the CLI word
it through the one table of sentences (``display/labels.py`` ``REFUSAL_TEXTS``). The pages' read models are
``store/queries/supervision.py``, the drawer's comparison table ``web/admin/supervision_view.py``.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cmbuyer.schemas import is_uuid4
from cmbuyer.server.clock import to_wire
from cmbuyer.server.domain import supervision as rules
from cmbuyer.server.domain import values
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import DomainError, NotFound, ValidationFailed, refusal
from cmbuyer.server.domain.states import SubmissionState
from cmbuyer.server.domain.supervision import RIGHT_STATES, WRONG_STATES
from cmbuyer.server.store import supervision as supervision_store
from cmbuyer.server.store.queries import supervision as store
from cmbuyer.server.tx import audit as audit_tx
from cmbuyer.server.tx.common import Actor, load

NOTE_MAX = 500
DECISIONS = ("approve", "reject")
VERDICTS = {"right": "RIGHT", "wrong": "WRONG"}


# -- approve / reject ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """What an approve/reject did: the request, its task, its state now, and whether this call changed it
    (False: the same decision had already been recorded — a double click or a replayed form)."""

    approval_id: str
    task_id: str
    state: str
    changed: bool


def _not_waiting(row: dict[str, Any]) -> rules.ApprovalNotWaiting:
    if row["state"] == rules.ApprovalState.VOID:
        return rules.ApprovalNotWaiting().because("void")
    return rules.ApprovalNotWaiting().because("decided", who=row["decided_by"] or "-", approval_state=row["state"])


def decide_approval(
    conn: sqlite3.Connection, approval_id: str, action: str, actor: Actor, now: datetime, request_id: str | None = None
) -> Decision:
    """``POST /approvals/{id}/approve|reject``. Order of checks (nothing is written on any refusal):
    unknown/malformed id → NotFound; the same decision already recorded → ``Decision(changed=False)``;
    not WAITING → 409 ``approval_not_waiting``; its attempt no longer OPEN → 409 ``attempt_closed``;
    approve with readings that are not the 8 well-formed values → 409 ``readings_unreadable`` (fail
    closed; rejecting stays possible). Then WAITING → APPROVED/REJECTED (``rules.decide``), audit row
    ``approval.approve`` / ``approval.reject`` on the task with the approval, attempt, device and pack."""
    if action not in DECISIONS:
        raise ValidationFailed("action", "").because("unknown_action")
    row = load(conn, store.approval, approval_id, NotFound().because("approval"))
    target = rules.ApprovalState.APPROVED if action == "approve" else rules.ApprovalState.REJECTED
    if row["state"] == target:
        return Decision(row["id"], row["task_id"], row["state"], changed=False)
    if row["state"] != rules.ApprovalState.WAITING:
        raise _not_waiting(row)
    if row["attempt_state"] != "OPEN":
        raise refusal(Code.ATTEMPT_CLOSED).because("approval")
    if action == "approve":
        try:
            rules.canonical_readings(rules.parse_readings(row["readings_json"]))
        except DomainError:
            raise refusal(Code.READINGS_UNREADABLE).because("approve") from None
    new_state = rules.decide(rules.ApprovalState(row["state"]), "approve" if action == "approve" else "reject")
    at = to_wire(now)
    who = f"{actor.kind}:{actor.id}"
    if not supervision_store.set_state(
        conn,
        row["id"],
        expected_state=row["state"],
        new_state=new_state.value,
        decided_by=who,
        decided_at=at,
        while_attempt_open=True,
    ):
        raise refusal(Code.APPROVAL_NOT_WAITING).because("changed")
    detail = {
        "approval_id": row["id"],
        "attempt_id": row["attempt_id"],
        "device_id": row["device_id"],
        "pack_key": row["pack_key"],
        "from": row["state"],
        "to": new_state.value,
        "readings_hash": row["readings_hash"],
    }
    audit_tx.record(
        conn, actor, AUDIT_DECISION[action], "task", row["task_id"], at=at, request_id=request_id, detail=detail
    )
    return Decision(row["id"], row["task_id"], new_state.value, changed=True)


AUDIT_DECISION = {"approve": "approval.approve", "reject": "approval.reject"}
AUDIT_VERDICT = "supervision.verdict"
AUDIT_RESUPERVISE = "supervision.resupervise"


# -- the verdict on a supervised order --------------------------------------------------------------------


@dataclass(frozen=True)
class VerdictResult:
    """The recorded verdict and the pair it counted on (``confirmed_orders`` / ``held`` after it)."""

    submission_id: str
    task_id: str
    verdict: str
    device_id: str
    pack_key: str
    confirmed_orders: int
    held: bool


def parse_verdict(raw: dict[str, Any]) -> tuple[str, str | None]:
    """``{"verdict": "right"|"wrong", "note": optional str ≤ 500}`` → ``("RIGHT"|"WRONG", note or None)``.
    Raises ValidationFailed naming the field."""
    verdict = raw.get("verdict")
    if verdict not in VERDICTS:
        raise ValidationFailed("verdict", "").because("verdict_word")
    note = raw.get("note")
    if note is not None and not isinstance(note, str):
        raise ValidationFailed("note", "").because("note_format")
    note = (note or "").strip() or None
    if note is not None:
        if len(note) > NOTE_MAX:
            raise ValidationFailed("note", "").because("note_length", max=str(NOTE_MAX))
        values.check_text("note", "说明", note, multiline=True)
    return VERDICTS[str(verdict)], note


def record_verdict(
    conn: sqlite3.Connection,
    submission_id: str,
    verdict: str,
    note: str | None,
    actor: Actor,
    now: datetime,
    request_id: str | None = None,
) -> VerdictResult:
    """``POST /order-submissions/{sid}/supervision-verdict``. Refusals (nothing written): unknown →
    NotFound; the attempt was not supervised → 409 ``not_supervised``; a verdict exists → 409
    ``verdict_exists``; the submission's state does not allow it (:data:`RIGHT_STATES` for RIGHT — the
    order must exist —, :data:`WRONG_STATES` for WRONG) → 409 ``invalid_state``. Then the verdict row and
    the pair of the attempt's ``(device_id, pack_key)``: RIGHT → ``confirmed_orders`` + 1, WRONG → held
    with a reason naming the submission and the note; audit ``supervision.verdict`` on the task.
    A ``verdict`` other than ``"RIGHT"``/``"WRONG"`` → ValidationFailed("verdict"), nothing read or
    written (callers other than the admin route — CLI, scripts — must not turn a typo into a hold).
    """
    if verdict not in VERDICTS.values():
        raise ValidationFailed("verdict", "").because("verdict_word")
    sub = load(conn, store.submission_for_verdict, submission_id, NotFound().because("submission"))
    if not sub["supervised"] or not sub["pack_key"]:
        raise refusal(Code.NOT_SUPERVISED).because("verdict")
    existing = store.verdict(conn, sub["id"])
    if existing is not None:
        raise refusal(Code.VERDICT_EXISTS).because(
            "recorded", admin_id=existing["admin_id"], verdict=existing["verdict"]
        )
    allowed = RIGHT_STATES if verdict == "RIGHT" else WRONG_STATES
    if SubmissionState(sub["state"]) not in allowed:
        raise refusal(Code.INVALID_STATE).because("verdict", submission_state=sub["state"])
    at = to_wire(now)
    if not supervision_store.insert_verdict(
        conn,
        submission_id=sub["id"],
        device_id=sub["device_id"],
        pack_key=sub["pack_key"],
        verdict=verdict,
        admin_id=actor.id,
        note=note,
        at=at,
    ):
        raise refusal(Code.VERDICT_EXISTS).because("raced")
    if verdict == "RIGHT":
        supervision_store.count_confirmed(conn, sub["device_id"], sub["pack_key"], at)
    else:
        reason = f"订单有误（提交 {sub['id'][:8]}，{actor.id}）" + (f"：{note}" if note else "")
        supervision_store.hold(conn, sub["device_id"], sub["pack_key"], reason, at)
    pair = store.pair(conn, sub["device_id"], sub["pack_key"]) or {}
    result = VerdictResult(
        sub["id"],
        sub["task_id"],
        verdict,
        sub["device_id"],
        sub["pack_key"],
        int(pair.get("confirmed_orders", 0)),
        bool(pair.get("held", 0)),
    )
    detail = {
        "submission_id": sub["id"],
        "verdict": verdict,
        "device_id": sub["device_id"],
        "pack_key": sub["pack_key"],
        "confirmed_orders": result.confirmed_orders,
        "held": result.held,
        "note": note,
    }
    audit_tx.record(conn, actor, AUDIT_VERDICT, "task", sub["task_id"], at=at, request_id=request_id, detail=detail)
    return result


# -- resupervise ------------------------------------------------------------------------------------------


def resupervise(
    conn: sqlite3.Connection, device_id: str, actor: Actor, now: datetime, request_id: str | None = None
) -> int:
    """``POST /devices/{id}/resupervise``: every pair of the device → 0 confirmed, not held, so its next
    orders are supervised again (e.g. after the phone was set up anew). Returns the number of pairs
    reset; audit ``supervision.resupervise`` on the device with the pairs as they were. NotFound for an
    unknown device."""
    if not is_uuid4(device_id) or not store.device_exists(conn, device_id):
        raise NotFound().because("device")
    at = to_wire(now)
    before = supervision_store.reset_pairs(conn, device_id, at)
    audit_tx.record(
        conn,
        actor,
        AUDIT_RESUPERVISE,
        "device",
        device_id,
        at=at,
        request_id=request_id,
        detail={
            "pairs": len(before),
            "before": ", ".join(
                f"{p['pack_key']}={p['confirmed_orders']}{'/held' if p['held'] else ''}" for p in before
            ),
        },
    )
    return len(before)
