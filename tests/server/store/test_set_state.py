"""The compare-and-set ``set_state`` of every stateful store module (docs/state-machines.md):

- a pair of the machine's table, from the row's current state → True and the row moved (with its stamps);
- a pair that no use-case of the table produces → ``StateChangeNotAllowed`` (409 ``invalid_state``) before
  any SQL runs: the row is unchanged and no UPDATE was sent;
- an allowed pair whose expected state is not the row's (a stale read, another writer first) → False and
  nothing written.

Rows are made through the real services (device add, start-purchases, claim-next, fence) on the test's
own connection; each ``set_state`` call runs in its own write transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from cmbuyer.server.clock import ManualClock, to_wire
from cmbuyer.server.config import Settings
from cmbuyer.server.db import run_in_transaction
from cmbuyer.server.domain.errors import InvalidTransition
from cmbuyer.server.domain.states import StateChangeNotAllowed
from cmbuyer.server.store import _sql, attempts, authorizations, devices, evidence, submissions, supervision, tasks
from cmbuyer.server.tx.common import new_id
from tests.server.submissions.helpers import claim_direct, fence_body, fence_job

AT = "2026-08-04T09:30:00.000Z"


@dataclass
class World:
    """Makes one row of each stateful table in its first state; returns the row id."""

    conn: sqlite3.Connection
    settings: Settings
    clock: ManualClock
    make_device: Callable[..., Any]
    make_task: Callable[..., Any]

    def tx(self, job: Callable[[sqlite3.Connection], Any]) -> Any:
        return run_in_transaction(self.conn, job)

    def row(self, table: str, row_id: str) -> dict[str, Any]:
        r = self.conn.execute(f"SELECT * FROM {table} WHERE id = ?", (row_id,)).fetchone()
        assert r is not None
        return dict(r)

    def task(self) -> str:
        return str(self.make_task(start=True).id)  # PENDING

    def authorization(self) -> str:
        task_id = self.task()
        live = self.tx(lambda c: authorizations.live_for_task(c, task_id))
        return str(live.id)  # ACTIVE

    def device(self) -> str:
        return str(self.make_device().device_id)  # ACTIVE

    def claim(self) -> Any:
        self.make_task(start=True)
        return claim_direct(self.conn, self.settings, self.clock.now(), self.make_device())

    def attempt(self) -> str:
        return str(self.claim().attempt_id)  # OPEN

    def submission(self) -> str:
        c = self.claim()
        answer = self.tx(fence_job(c, fence_body(c), self.clock.now(), self.settings.allowed_payment_modes))
        assert answer.permit
        sub = self.tx(lambda conn: submissions.for_attempt(conn, c.attempt_id))
        return str(sub.id)  # FENCED

    def approval(self) -> str:
        c = self.claim()
        device_id = c.device.device_id
        asset = evidence.Asset(
            id=new_id(),
            task_id=c.task_id,
            attempt_id=c.attempt_id,
            device_id=device_id,
            upload_key=new_id(),
            kind="CONFIRM_PAGE_GATE_3",
            privacy_tier="INTERNAL_RAW",
            sha256="a" * 64,
            byte_size=10,
            mime="image/png",
            width=1,
            height=1,
            captured_at=AT,
            created_at=AT,
        )
        approval = supervision.Approval(
            id=new_id(),
            attempt_id=c.attempt_id,
            task_id=c.task_id,
            device_id=device_id,
            approval_key=new_id(),
            readings_json="{}",
            readings_hash="b" * 64,
            screenshot_asset_id=asset.id,
            state="WAITING",
            decided_by=None,
            decided_at=None,
            created_at=AT,
        )

        def job(conn: sqlite3.Connection) -> None:
            evidence.insert(conn, asset)
            supervision.insert_approval(conn, approval)

        self.tx(job)
        return approval.id  # WAITING


@pytest.fixture
def world(
    sync_conn: sqlite3.Connection,
    settings: Settings,
    clock: ManualClock,
    make_device: Callable[..., Any],
    make_task: Callable[..., Any],
) -> World:
    return World(sync_conn, settings, clock, make_device, make_task)


def _task_set_state(conn: sqlite3.Connection, task_id: str, expected: str, new: str) -> bool:
    version = conn.execute("SELECT version FROM tasks WHERE id = ?", (task_id,)).fetchone()[0]
    return tasks.set_state(conn, task_id, expected_version=version, expected_state=expected, new_state=new, at=AT)


@dataclass(frozen=True)
class Machine:
    """One stateful table: how to make a row in ``start``, how to call its ``set_state``, and three pairs:
    ``allowed`` (from ``start``, in the table), ``disallowed`` (from ``start``, not in the table) and
    ``stale`` (in the table, but not from ``start``; None for a machine with one transition: its stale case
    repeats the allowed change after the row moved on). ``stamps``: columns the allowed move fills in."""

    table: str
    make: Callable[[World], str]
    set_state: Callable[[sqlite3.Connection, str, str, str], bool]
    start: str
    allowed: str
    disallowed: str
    stale: tuple[str, str] | None
    stamps: dict[str, Any]


MACHINES = {
    "task": Machine(
        "tasks",
        World.task,
        _task_set_state,
        "PENDING",
        "CLAIMED",
        "PAID",
        ("CLAIMED", "ORDERING"),
        {"updated_at": AT},
    ),
    "authorization": Machine(
        "authorizations",
        World.authorization,
        lambda c, i, e, n: authorizations.set_state(c, i, expected_state=e, new_state=n, at=AT, reason="why"),
        "ACTIVE",
        "EXPIRED",
        "CONSUMED",
        ("CLAIMED", "FENCED"),
        {"closed_at": AT, "close_reason": "why"},
    ),
    "attempt": Machine(
        "attempts",
        World.attempt,
        lambda c, i, e, n: attempts.set_state(c, i, expected_state=e, new_state=n, reason="RESET", at=AT),
        "OPEN",
        "CLOSED",
        "OPEN",
        None,
        {"close_reason": "RESET", "closed_at": AT},
    ),
    "submission": Machine(
        "order_submissions",
        World.submission,
        lambda c, i, e, n: submissions.set_state(c, i, expected_state=e, new_state=n, reconciliation_reason="why"),
        "FENCED",
        "RECONCILIATION_REQUIRED",
        "CREATED",
        ("RECONCILIATION_REQUIRED", "NOT_CREATED"),
        {"reconciliation_reason": "why"},
    ),
    "device": Machine(
        "devices",
        World.device,
        lambda c, i, e, n: devices.set_state(c, i, expected_state=e, new_state=n, at=AT),
        "ACTIVE",
        "REVOKED",
        "ACTIVE",
        None,
        {"revoked_at": AT},
    ),
    "approval request": Machine(
        "approval_requests",
        World.approval,
        lambda c, i, e, n: supervision.set_state(
            c, i, expected_state=e, new_state=n, decided_by="admin:ops", decided_at=AT
        ),
        "WAITING",
        "APPROVED",
        "WAITING",
        ("APPROVED", "VOID"),
        {"decided_by": "admin:ops", "decided_at": AT},
    ),
}


@pytest.mark.parametrize("name", list(MACHINES))
def test_allowed_pair_changes_the_row(world: World, name: str) -> None:
    m = MACHINES[name]
    row_id = m.make(world)
    before = world.row(m.table, row_id)
    assert before["state"] == m.start
    assert world.tx(lambda c: m.set_state(c, row_id, m.start, m.allowed)) is True
    after = world.row(m.table, row_id)
    assert after["state"] == m.allowed
    for column, value in m.stamps.items():
        assert after[column] == value, column
    changed = {k for k in after if after[k] != before[k]}
    assert changed <= {"state", "version", "state_reason", *m.stamps}, changed
    if m.table == "tasks":
        assert after["version"] == before["version"] + 1


@pytest.mark.parametrize("name", list(MACHINES))
def test_disallowed_pair_raises_and_changes_nothing(world: World, name: str) -> None:
    m = MACHINES[name]
    row_id = m.make(world)
    before = world.row(m.table, row_id)
    sent: list[str] = []
    world.conn.set_trace_callback(sent.append)
    try:
        with pytest.raises(StateChangeNotAllowed) as caught:
            world.tx(lambda c: m.set_state(c, row_id, m.start, m.disallowed))
    finally:
        world.conn.set_trace_callback(None)
    assert isinstance(caught.value, InvalidTransition) and caught.value.code == "invalid_state"
    assert f"{m.start} -> {m.disallowed}" in str(caught.value)
    assert not [s for s in sent if s.lstrip().upper().startswith("UPDATE")], sent
    assert world.row(m.table, row_id) == before


@pytest.mark.parametrize("name", list(MACHINES))
def test_stale_expected_state_reports_no_change(world: World, name: str) -> None:
    m = MACHINES[name]
    row_id = m.make(world)
    before = world.row(m.table, row_id)
    if m.stale is None:
        # move the row on first, then repeat the same allowed change from the state read before
        assert world.tx(lambda c: m.set_state(c, row_id, m.start, m.allowed)) is True
        before = world.row(m.table, row_id)
    expected, new = m.stale or (m.start, m.allowed)
    assert expected != before["state"]
    assert world.tx(lambda c: m.set_state(c, row_id, expected, new)) is False
    assert world.row(m.table, row_id) == before


def test_task_stale_version_reports_no_change(world: World) -> None:
    task_id = world.task()
    before = world.row("tasks", task_id)
    changed = world.tx(
        lambda c: tasks.set_state(
            c,
            task_id,
            expected_version=before["version"] - 1,
            expected_state="PENDING",
            new_state="CLAIMED",
            at=AT,
        )
    )
    assert changed is False
    assert world.row("tasks", task_id) == before


NOT_STAMPABLE = ["state", "id", "no_such_column", "state_reason = 'x', state", "STATE"]
# (stamps=, given=) → the refusal: compare_and_set puts stamp names into the SQL text, so only the table's
# own columns, never id or state (written once, from its bound parameter), and no column twice (SQLite keeps
# the last of two assignments, so one would be dropped without a word)
BAD_STAMPS = {
    **{f"stamps-{c}": ({c: "X"}, None, "is not a column a state change may stamp") for c in NOT_STAMPABLE},
    **{f"given-{c}": (None, {c: "X"}, "is not a column a state change may stamp") for c in NOT_STAMPABLE},
    "stamped-and-given": ({"state_reason": "A"}, {"state_reason": None}, "given both as stamps and as given"),
}


@pytest.mark.parametrize("case", list(BAD_STAMPS))
def test_a_bad_stamp_is_refused_before_any_sql(world: World, case: str) -> None:
    stamps, given, refusal = BAD_STAMPS[case]
    task_id = world.task()
    before = world.row("tasks", task_id)
    sent: list[str] = []
    world.conn.set_trace_callback(sent.append)
    try:
        with pytest.raises(ValueError, match=refusal):
            world.tx(
                lambda c: _sql.compare_and_set(
                    c,
                    tasks._TABLE,
                    task_id,
                    expected_state="PENDING",
                    new_state="CLAIMED",
                    stamps=stamps,
                    given=given,
                )
            )
    finally:
        world.conn.set_trace_callback(None)
    assert not [s for s in sent if s.lstrip().upper().startswith("UPDATE")], sent
    assert world.row("tasks", task_id) == before


def test_approval_while_attempt_open_needs_the_attempt_open(world: World) -> None:
    approval_id = world.approval()
    attempt_id = world.row("approval_requests", approval_id)["attempt_id"]
    assert world.tx(lambda c: attempts.close(c, attempt_id, "RESET", AT)) is True
    before = world.row("approval_requests", approval_id)
    decided = world.tx(
        lambda c: supervision.set_state(
            c,
            approval_id,
            expected_state="WAITING",
            new_state="APPROVED",
            decided_by="admin:ops",
            decided_at=AT,
            while_attempt_open=True,
        )
    )
    assert decided is False
    assert world.row("approval_requests", approval_id) == before


def test_named_changes_go_through_set_state(world: World) -> None:
    """``close``, ``close_open_for_task``, ``revoke``, ``mark_reconciliation_required``, ``reconcile`` and
    ``record_result``: the same compare-and-set (a second call reports False and writes nothing)."""
    device_id = world.device()
    assert world.tx(lambda c: devices.revoke(c, device_id, AT)) is True
    assert world.tx(lambda c: devices.revoke(c, device_id, AT)) is False
    assert world.row("devices", device_id)["revoked_at"] == AT

    c = world.claim()
    assert world.tx(lambda conn: attempts.close_open_for_task(conn, c.task_id, "CANCELLED", AT)) == c.attempt_id
    assert world.tx(lambda conn: attempts.close_open_for_task(conn, c.task_id, "CANCELLED", AT)) is None
    assert world.tx(lambda conn: attempts.close(conn, c.attempt_id, "RESET", AT)) is False
    assert world.row("attempts", c.attempt_id)["close_reason"] == "CANCELLED"

    sub_id = world.submission()
    assert world.tx(lambda conn: submissions.mark_reconciliation_required(conn, sub_id, reason="LATE")) is True
    assert world.tx(lambda conn: submissions.mark_reconciliation_required(conn, sub_id, reason="AGAIN")) is False
    assert world.row("order_submissions", sub_id)["reconciliation_reason"] == "LATE"
    with pytest.raises(StateChangeNotAllowed):
        world.tx(
            lambda conn: submissions.record_result(
                conn,
                sub_id,
                expected_state="RECONCILIATION_REQUIRED",
                new_state="SUBMITTED",
                observation="SUBMITTED",
                result_key=new_id(),
                evidence_asset_id=None,
                at=AT,
            )
        )
    assert world.row("order_submissions", sub_id)["observation"] is None
    late = {"observation": "SUBMITTED", "result_key": new_id(), "evidence_asset_id": None, "at": AT}
    record = lambda conn: submissions.record_result(  # noqa: E731
        conn, sub_id, expected_state="RECONCILIATION_REQUIRED", new_state="RECONCILIATION_REQUIRED", **late
    )
    assert world.tx(record) is True
    assert world.tx(record) is False  # one observation per submission
    row = world.row("order_submissions", sub_id)
    assert (row["state"], row["observation"], row["result_at"]) == ("RECONCILIATION_REQUIRED", "SUBMITTED", AT)
    reconcile = lambda conn: submissions.reconcile(  # noqa: E731
        conn,
        sub_id,
        expected_state="RECONCILIATION_REQUIRED",
        new_state="CREATED",
        reconciled_by="admin:ops",
        note="seen in the app",
        at=to_wire(world.clock.now()),
    )
    assert world.tx(reconcile) is True
    assert world.tx(reconcile) is False
    row = world.row("order_submissions", sub_id)
    assert (row["state"], row["reconciled_by"], row["reconciliation_note"]) == (
        "CREATED",
        "admin:ops",
        "seen in the app",
    )
    assert row["reconciliation_reason"] == "LATE"  # kept: only the given stamps are written
