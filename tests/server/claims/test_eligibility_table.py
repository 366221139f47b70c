"""The eligibility rule stated twice agrees with itself.

claim-next finds its authorization with SQL (``store.authorizations.next_candidate``: the ``WHERE`` stays in SQL so
the partial index ``authorizations_active`` finds the oldest claimable row without a sort); the rule's home
is the domain predicate :func:`cmbuyer.server.domain.claims.claimable`. This table builds a real SQLite
database (the migrated file of ``cmbuyer-server init``) with every combination of

- authorization state (all six) × expiry just before / exactly at / just after now,
- task state (all twelve) × task version equal / above / below the snapshot's,
- snapshot drift in each frozen field (the SKU options: a value, a dimension name, one dropped or added, order),
- an attempt on the authorization (none, OPEN by an active device, OPEN by a revoked device, CLOSED),

and asserts that the SQL picks a row exactly when the domain predicate accepts it, and — with every row in
the database at once — that claim-next's walk yields exactly the rows the predicate accepts, oldest first.
"""

from __future__ import annotations

import itertools
import random
import sqlite3
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from cmbuyer.schemas.sku import options_text
from cmbuyer.server.clock import ManualClock, to_wire
from cmbuyer.server.db import run_in_transaction
from cmbuyer.server.domain.claims import claimable
from cmbuyer.server.domain.states import AuthorizationState, TaskState
from cmbuyer.server.services import devices as device_service
from cmbuyer.server.store import attempts as attempt_store
from cmbuyer.server.store import authorizations as auth_store
from cmbuyer.server.store import tasks as task_store
from cmbuyer.server.store.attempts import Attempt
from cmbuyer.server.store.authorizations import Authorization
from cmbuyer.server.store.tasks import Task
from cmbuyer.server.tx.common import new_id
from tests.server.conftest import GOODS_URL, TEST_ACTOR

LIVE = {AuthorizationState.ACTIVE, AuthorizationState.CLAIMED, AuthorizationState.FENCED}
ONE_MICROSECOND = timedelta(microseconds=1)
EXPIRY_OFFSETS = (-ONE_MICROSECOND, timedelta(0), ONE_MICROSECOND)
VERSIONS = ((3, 3), (4, 3), (3, 4))  # (task.version, authorization.task_version)
SNAPSHOT: dict[str, Any] = {
    "title": "纯棉短袖",
    "product_url": GOODS_URL.format(goods_id="937122477375"),
    "goods_id": "937122477375",
    "sku_options": options_text((("颜色", "黑色CHA(纯棉)"), ("尺码", "M(建议100-115)"))),
    "quantity": 2,
    "max_total_price": "30.00",
}
# (name, task fields changed, authorization fields changed): one drifted field at a time, the SKU options
# drifting in a value, a dimension's name, a dimension dropped or their order
DRIFTS: tuple[tuple[str, dict[str, Any], dict[str, Any]], ...] = (
    ("none", {}, {}),
    ("title", {"title": "纯棉短袖（新）"}, {}),
    ("product_url", {"product_url": GOODS_URL.format(goods_id="937122477376")}, {}),
    ("goods_id", {"goods_id": "937122477376"}, {}),
    ("sku_value", {"sku_options": options_text((("颜色", "白色"), ("尺码", "M(建议100-115)")))}, {}),
    ("sku_dimension", {"sku_options": options_text((("颜色分类", "黑色CHA(纯棉)"), ("尺码", "M(建议100-115)")))}, {}),
    ("dimension_dropped_on_task", {"sku_options": options_text((("颜色", "黑色CHA(纯棉)"),))}, {}),
    ("dimension_added_on_task", {}, {"sku_options": options_text((("颜色", "黑色CHA(纯棉)"),))}),
    ("one_dimension_on_either", *([{"sku_options": options_text((("规格", "3层100抽"),))}] * 2)),
    ("order_swapped", {"sku_options": options_text((("尺码", "M(建议100-115)"), ("颜色", "黑色CHA(纯棉)")))}, {}),
    ("quantity", {"quantity": 3}, {}),
    ("max_total_price", {"max_total_price": "31.00"}, {}),
    ("price_spelled_differently", {"max_total_price": "30.0"}, {}),
)
ATTEMPTS = ("none", "open_active_device", "open_revoked_device", "closed")
Row = tuple[Task, Authorization, str]  # (task, authorization, attempt kind of ATTEMPTS)


def _rows(now: datetime) -> list[Row]:
    """One (task, authorization, attempt kind) per combination; ``created_at`` shuffled so the walk order
    is not the insertion order, the attempt kind drawn from a seeded generator."""
    rng = random.Random(19)
    combos = list(itertools.product(AuthorizationState, EXPIRY_OFFSETS, TaskState, VERSIONS, DRIFTS))
    seconds = list(range(len(combos)))
    rng.shuffle(seconds)
    created_base = now - timedelta(days=1)
    out: list[Row] = []
    for (auth_state, offset, task_state, (task_version, snap_version), drift), second in zip(
        combos, seconds, strict=True
    ):
        _, task_over, auth_over = drift
        created = to_wire(created_base + timedelta(seconds=second))
        task = Task(
            id=new_id(),
            create_key=new_id(),
            create_hash="0" * 64,
            **{**SNAPSHOT, **task_over},
            state=task_state.value,
            version=task_version,
            state_reason=None,
            created_by="table",
            created_at=created,
            updated_at=created,
        )
        auth = Authorization(
            id=new_id(),
            task_id=task.id,
            task_version=snap_version,
            **{**SNAPSHOT, **auth_over},
            state=auth_state.value,
            start_key=new_id(),
            created_by="table",
            created_at=created,
            expires_at=to_wire(now + offset),
            closed_at=None if auth_state in LIVE else created,
            close_reason=None if auth_state in LIVE else "table",
        )
        out.append((task, auth, rng.choice(ATTEMPTS)))
    return out


def _copy(row: Row, created_at: str) -> Row:
    """The same combination under new ids and another ``created_at`` (no attempt)."""
    task, auth, _ = row
    new_task = replace(task, id=new_id(), create_key=new_id())
    return new_task, replace(auth, id=new_id(), task_id=new_task.id, created_at=created_at), "none"


def _insert(conn: sqlite3.Connection, row: Row, devices: dict[str, str], now: datetime) -> None:
    """Insert the row; its attempt (if any) is held by ``devices["active"]`` or ``devices["revoked"]``."""
    task, auth, kind = row
    task_store.insert(conn, task)
    auth_store.insert(conn, auth)
    if kind == "none":
        return
    is_open = kind != "closed"
    attempt_store.insert(
        conn,
        Attempt(
            id=new_id(),
            task_id=task.id,
            authorization_id=auth.id,
            device_id=devices["revoked" if kind == "open_revoked_device" else "active"],
            session_id=new_id(),
            claim_generation=1,
            nonce=bytes(32),
            token_hash=bytes(32),
            claimed_task_version=auth.task_version + 1,
            lease_expires_at=to_wire(now + timedelta(minutes=2)),
            state="OPEN" if is_open else "CLOSED",
            close_reason=None if is_open else "FAILED",
            response_json="{}",
            next_event_seq=1,
            created_at=auth.created_at,
            closed_at=None if is_open else auth.created_at,
        ),
    )


def _devices(conn: sqlite3.Connection, now: datetime) -> dict[str, str]:
    """An ACTIVE and a REVOKED device (a device holds at most one OPEN attempt: call once per OPEN row)."""
    active = device_service.add_device(conn, "active", TEST_ACTOR, now).device_id
    revoked = device_service.add_device(conn, "revoked", TEST_ACTOR, now).device_id
    assert device_service.revoke_device(conn, revoked, TEST_ACTOR, now)
    return {"active": active, "revoked": revoked}


@pytest.fixture
def table(clock: ManualClock) -> list[Row]:
    return _rows(clock.now())


def test_the_table_covers_both_answers(table: list[Row], clock: ManualClock) -> None:
    now = clock.now()
    accepted = [auth for task, auth, _ in table if claimable(auth, task, now)]
    # live expiry (1 of 3) × ACTIVE × PENDING × equal versions × matching snapshot (2 of 13): 2 rows
    assert len(table) == 6 * 3 * len(TaskState) * 3 * 13 and len(accepted) == 2
    assert {a.sku_options for a in accepted} == {SNAPSHOT["sku_options"], options_text((("规格", "3层100抽"),))}
    assert {kind for _, _, kind in table} == set(ATTEMPTS)


def test_sql_and_domain_agree_on_every_row(sync_conn: sqlite3.Connection, clock: ManualClock, table: list[Row]) -> None:
    """Each combination alone in the database: the SQL finds it exactly when the predicate accepts it."""
    now = clock.now()
    devices = run_in_transaction(sync_conn, lambda c: _devices(c, now))
    disagreements = []
    for row in table:
        task, auth, _ = row
        sync_conn.execute("SAVEPOINT one_row")
        try:
            _insert(sync_conn, row, devices, now)
            found = auth_store.next_candidate(sync_conn, to_wire(now))
        finally:
            sync_conn.execute("ROLLBACK TO one_row")
            sync_conn.execute("RELEASE one_row")
        by_sql = found is not None and found.authorization == auth and found.task_version == task.version
        assert found is None or by_sql, (row, found)
        if by_sql != claimable(auth, task, now):
            disagreements.append(row)
    assert not disagreements


def test_the_walk_yields_exactly_the_accepted_rows_oldest_first(
    sync_conn: sqlite3.Connection, clock: ManualClock, table: list[Row]
) -> None:
    """Every combination in the database at once: claim-next's query returns the predicate's rows in
    ``(created_at, id)`` order; taking each one out (as a claim would: ACTIVE → CLAIMED) reveals the next,
    then none."""
    now = clock.now()
    accepted = [row for row in table if claimable(row[1], row[0], now)]
    # two more copies of each accepted row, one older than every row and one younger, so the order is
    # tested on more than two rows
    rows = table + [
        _copy(row, to_wire(now - timedelta(days=days, minutes=i))) for i, row in enumerate(accepted) for days in (3, 0)
    ]

    shared = run_in_transaction(sync_conn, lambda c: _devices(c, now))
    run_in_transaction(
        sync_conn,
        lambda c: [_insert(c, row, _devices(c, now) if row[2].startswith("open") else shared, now) for row in rows],
    )
    expected = sorted((a.created_at, a.id) for t, a, _ in rows if claimable(a, t, now))
    assert len(expected) == 6
    walked = []
    while (found := auth_store.next_candidate(sync_conn, to_wire(now))) is not None:
        walked.append((found.authorization.created_at, found.authorization.id))
        claimed = found.authorization.id
        run_in_transaction(
            sync_conn,
            lambda c, aid=claimed: c.execute("UPDATE authorizations SET state = 'CLAIMED' WHERE id = ?", (aid,)),
        )
        assert len(walked) <= len(expected)
    assert walked == expected
