"""Hold every unsettled task of a restored database (run by ``cmbuyer-server restore``).

Litestream replicates asynchronously, so a restored database is behind reality: a task a phone ordered
after the last replicated write comes back PENDING or CLAIMED, and dispatching it again could buy it
twice. :func:`hold_unsettled` therefore moves every task in
:data:`~cmbuyer.server.domain.states.UNSETTLED_TASK_STATES` to ``HELD`` (use-case ``restore_hold``) in one
transaction, with an audit row per task naming the state it was held from. No device route accepts a
held task (claim-next offers only PENDING, renew/events/fence/fail/result refuse it); a person releases
each after checking the phones' journals (``admin_actions.release_held``).
"""

from __future__ import annotations

import sqlite3
from datetime import datetime

from cmbuyer.server.clock import to_wire
from cmbuyer.server.domain.states import TASK_TRANSITIONS, UNSETTLED_TASK_STATES, TaskState, transition
from cmbuyer.server.store import tasks as task_store
from cmbuyer.server.tx import audit as audit_tx
from cmbuyer.server.tx.common import Actor
from cmbuyer.server.tx.moves import set_task_state

# state_reason of a held task: the prefix, then the state it was held from (shown on the held-tasks page)
HOLD_REASON = "restored_from_replica:"


def hold_unsettled(conn: sqlite3.Connection, actor: Actor, now: datetime) -> list[str]:
    """Move every unsettled task to HELD; returns their ids (oldest first). A task already HELD stays so
    (a second restore of the same database holds nothing new). Runs inside the caller's transaction."""
    at = to_wire(now)
    held: list[str] = []
    for task in task_store.in_states(conn, [s.value for s in UNSETTLED_TASK_STATES]):
        new_state = transition(TASK_TRANSITIONS, TaskState(task.state), "restore_hold")
        if not set_task_state(conn, task, new_state.value, at=at, reason=HOLD_REASON + task.state):
            raise AssertionError("task changed inside the restore transaction")
        audit_tx.record(
            conn,
            actor,
            action="task.restore_hold",
            subject_kind="task",
            subject_id=task.id,
            at=at,
            detail={"from": task.state, "to": new_state.value, "task_version": task.version + 1},
        )
        held.append(task.id)
    return held
