"""``POST /api/v1/tasks/{id}/events`` as one write-transaction job (docs/api.md).

Order: conditional "device still ACTIVE" UPDATE → idempotency lookup of ``batch_key`` (same batch →
the stored answer byte for byte, nothing appended twice) → the claim must be current: the OPEN attempt
of the URL's task held by this device with this generation and token, and a lease strictly later than
now — *except* once the attempt holds a submission (after the fence), when an OPEN attempt is enough
so the agent can still log ``SUBMIT_TAP``/``OBSERVE_RESULT`` before its result closes the attempt →
every summary passes :func:`~cmbuyer.server.domain.reports.check_summary` → the batch fits the
attempt's event budget (:class:`~cmbuyer.server.domain.limits.AttemptBudget`) → consecutive per-attempt
sequence numbers → the first accepted batch of a CLAIMED task moves it to ORDERING (version + 1) →
request record + audit row.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

from cmbuyer.server.clock import to_wire
from cmbuyer.server.domain import lease
from cmbuyer.server.domain.claims import claim_not_current, task_at_claim
from cmbuyer.server.domain.limits import AttemptBudget, attempt_limit_reached
from cmbuyer.server.domain.reports import check_summary
from cmbuyer.server.domain.states import TASK_TRANSITIONS, TaskState, transition
from cmbuyer.server.store import attempts as attempt_store
from cmbuyer.server.store import events as event_store
from cmbuyer.server.store import submissions as submission_store
from cmbuyer.server.store import tasks as task_store
from cmbuyer.server.tx import device_tx
from cmbuyer.server.tx.idempotency import Stored
from cmbuyer.server.tx.moves import move_task

ENDPOINT = "events"


def append_events(
    conn: sqlite3.Connection,
    *,
    device_id: str,
    task_id: str,
    body: dict[str, Any],
    now: datetime,
    budget: AttemptBudget,
) -> Stored:
    """Append one schema-valid batch; returns the 200 response to send.

    Raises DeviceNotActive (→ 401), ValidationFailed (→ 400), Conflict ``idempotency_conflict`` /
    ``claim_not_current`` / ``attempt_limit_reached`` (→ 409). A replay is answered before the budget is
    looked at, so a batch accepted just under the cap still replays.
    """
    req = device_tx.open_claim_write(conn, device_id, body, key=body["batch_key"], endpoint=ENDPOINT, task_id=task_id)
    stored = req.replay()
    if stored is not None:
        return stored
    attempt = req.claim(body, attempt_id=body["attempt_id"], now=now, task_id=task_id, require_lease=False)
    fenced = submission_store.for_attempt(conn, attempt.id) is not None
    if not fenced and not lease.is_live(attempt.lease_expires_at, now):
        raise claim_not_current()
    batch = [
        event_store.NewEvent(e["step"], e["outcome"], e["reason_code"], check_summary(e["summary"]), e["occurred_at"])
        for e in body["events"]
    ]
    if not budget.events_fit(attempt.next_event_seq - 1, len(batch)):  # sequence numbers start at 1
        raise attempt_limit_reached()
    task = task_store.get(conn, task_id)
    if task is None:
        raise claim_not_current()
    at = to_wire(now)
    version = task.version
    if task.state == TaskState.CLAIMED:
        if not task_at_claim(task, attempt.claimed_task_version):
            raise claim_not_current()
        version = move_task(conn, task, transition(TASK_TRANSITIONS, TaskState.CLAIMED, "first_event"), at=at)
        req.audit(
            attempt,
            "task.ordering",
            at=at,
            detail={"attempt_id": attempt.id, "task_version": version},
        )
    elif task.state not in (TaskState.ORDERING, TaskState.SUBMITTING):
        raise claim_not_current()
    first = attempt_store.take_event_seqs(conn, attempt.id, len(batch))
    event_store.append(
        conn, task_id=task.id, attempt_id=attempt.id, batch_key=req.key, first_seq=first, events=batch, received_at=at
    )
    result = {
        "task_id": task.id,
        "attempt_id": attempt.id,
        "accepted": len(batch),
        "first_seq": first,
        "last_seq": first + len(batch) - 1,
        "task_version": version,
    }
    req.audit(
        attempt,
        "events.append",
        at=at,
        subject="attempt",
        detail={"first_seq": first, "count": len(batch)},
    )
    return req.remember(result, at=at, attempt_id=attempt.id)
