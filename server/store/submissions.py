"""SQL for order submissions — the one-time fence rows (unique per authorization and per attempt,
never deleted; see migration 0002). The state changes only through :func:`set_state`."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from cmbuyer.server.domain.states import SUBMISSION_TRANSITIONS, StateChanges, SubmissionState
from cmbuyer.server.store._sql import StateTable, compare_and_set


@dataclass(frozen=True)
class Submission:
    """An order_submissions row."""

    id: str
    task_id: str
    authorization_id: str
    attempt_id: str
    device_id: str
    fence_key: str
    state: str
    selected_options: str  # as read, canonical JSON named by the task's dimensions (migration 0011)
    gate1_unit_price: str
    gate2_unit_price: str
    quantity_read: int
    confirm_page_amount: str
    submit_control_match_count: int
    observation: str | None
    result_key: str | None
    evidence_asset_id: str | None
    reconciliation_reason: str | None
    reconciled_by: str | None
    reconciliation_note: str | None
    created_at: str
    result_at: str | None
    reconciled_at: str | None
    # migration 0006; None on rows fenced before it (gate3/payment) or when not reported (order_sn/reason)
    gate3_unit_price: str | None
    payment_mode: str | None
    order_sn: str | None
    observation_reason: str | None


_TABLE = StateTable("order_submissions", Submission, StateChanges("order submission", SUBMISSION_TRANSITIONS))
_row = _TABLE.row


def insert(conn: sqlite3.Connection, s: Submission) -> None:
    """Insert the fence row. The UNIQUE constraints on authorization_id and attempt_id make a second
    fence for the same authorization or attempt impossible whatever the caller checked before."""
    _TABLE.insert(conn, s)


get = _TABLE.get  # one submission by id, or None


def for_attempt_or_authorization(conn: sqlite3.Connection, attempt_id: str, authorization_id: str) -> Submission | None:
    """The submission of this attempt or of this authorization (at most one of each), or None."""
    return _TABLE.first(conn, "attempt_id = ? OR authorization_id = ? LIMIT 1", (attempt_id, authorization_id))


def for_attempt(conn: sqlite3.Connection, attempt_id: str) -> Submission | None:
    """The attempt's submission, or None."""
    return _TABLE.first(conn, "attempt_id = ?", (attempt_id,))


def set_state(
    conn: sqlite3.Connection,
    submission_id: str,
    *,
    expected_state: str,
    new_state: str,
    reconciliation_reason: str | None = None,
    reconciled_by: str | None = None,
    reconciliation_note: str | None = None,
    reconciled_at: str | None = None,
) -> bool:
    """CAS ``expected_state`` → ``new_state``; each stamp column is written when given and kept otherwise
    (the sweeper gives ``reconciliation_reason``; a person's reconciliation gives who, note and when).
    False when the submission was not in ``expected_state`` (nothing written).

    Raises :class:`~cmbuyer.server.domain.states.StateChangeNotAllowed` (nothing written) for a pair no
    use-case of ``SUBMISSION_TRANSITIONS`` produces.
    """
    return compare_and_set(
        conn,
        _TABLE,
        submission_id,
        expected_state=expected_state,
        new_state=new_state,
        given={
            "reconciliation_reason": reconciliation_reason,
            "reconciled_by": reconciled_by,
            "reconciliation_note": reconciliation_note,
            "reconciled_at": reconciled_at,
        },
    )


def record_result(
    conn: sqlite3.Connection,
    submission_id: str,
    *,
    expected_state: str,
    new_state: str,
    observation: str,
    result_key: str,
    evidence_asset_id: str | None,
    at: str,
    order_sn: str | None = None,
    observation_reason: str | None = None,
) -> bool:
    """CAS: store the one observation of a submission that has none yet, with the report's optional order
    number and observation reason, and move its state to ``new_state`` through :func:`set_state` (a late
    result gives ``new_state == expected_state``: recorded, no state change).

    False when the state changed or a result already exists (nothing written). Raises like
    :func:`set_state` for a pair the machine does not allow.
    """
    if new_state != expected_state:
        _TABLE.changes.check(expected_state, new_state)  # refuse before anything is written
    cur = conn.execute(
        "UPDATE order_submissions SET observation = ?, result_key = ?, evidence_asset_id = ?,"
        " result_at = ?, order_sn = ?, observation_reason = ? WHERE id = ? AND state = ? AND observation IS NULL",
        (
            observation,
            result_key,
            evidence_asset_id,
            at,
            order_sn,
            observation_reason,
            submission_id,
            expected_state,
        ),
    )
    if cur.rowcount != 1:
        return False
    return new_state == expected_state or set_state(
        conn, submission_id, expected_state=expected_state, new_state=new_state
    )


def mark_reconciliation_required(conn: sqlite3.Connection, submission_id: str, *, reason: str) -> bool:
    """FENCED → RECONCILIATION_REQUIRED with a reason (sweeper; through :func:`set_state`). False when not FENCED."""
    return set_state(
        conn,
        submission_id,
        expected_state=SubmissionState.FENCED,
        new_state=SubmissionState.RECONCILIATION_REQUIRED,
        reconciliation_reason=reason,
    )


def reconcile(
    conn: sqlite3.Connection,
    submission_id: str,
    *,
    expected_state: str,
    new_state: str,
    reconciled_by: str,
    note: str,
    at: str,
) -> bool:
    """A person's reconciliation: CAS ``expected_state`` → ``new_state`` (through :func:`set_state`) and stamp
    who, when and the note. False when the submission changed meanwhile (nothing written)."""
    return set_state(
        conn,
        submission_id,
        expected_state=expected_state,
        new_state=new_state,
        reconciled_by=reconciled_by,
        reconciliation_note=note,
        reconciled_at=at,
    )


def fenced_with_expired_lease(conn: sqlite3.Connection, now: str, limit: int = 200) -> list[Submission]:
    """FENCED submissions without a result whose attempt lease ended at or before ``now`` (equal =
    expired, no grace), oldest first."""
    return [
        _row(r)
        for r in conn.execute(
            "SELECT s.* FROM order_submissions s JOIN attempts a ON a.id = s.attempt_id"
            " WHERE s.state = 'FENCED' AND s.observation IS NULL AND a.lease_expires_at <= ?"
            " ORDER BY s.created_at, s.id LIMIT ?",
            (now, limit),
        )
    ]
