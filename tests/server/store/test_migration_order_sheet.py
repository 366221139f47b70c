"""Migration 0006 (one-dimension goods, the order sheet): an upgrade from 0005 keeps every row,
index, trigger and claim replay; afterwards a task without a size is stored, searched, claimed and
fenced, ORDER_CONFIRMATION evidence is accepted, and the old constraints still hold."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.schemas import validate
from cmbuyer.server import migrate
from cmbuyer.server.clock import ManualClock
from cmbuyer.server.config import Settings
from cmbuyer.server.db import run_in_transaction
from cmbuyer.server.domain.claims import ClaimPolicy
from cmbuyer.server.services import devices as device_service
from cmbuyer.server.services import tasks as task_service
from cmbuyer.server.services.heartbeat import record_heartbeat
from cmbuyer.server.store.queries import admin as admin_queries
from cmbuyer.server.tx.common import new_id
from tests.server.claims.conftest import heartbeat_body
from tests.server.store.test_migration_lean import ACTOR, AT, Claim, _claim, _migrate_to, _seed, db_at

ORDER_SHEET = "0006_one_dimension_sku_and_order_sheet.sql"
TABLES = ("tasks", "authorizations", "evidence_assets", "order_submissions", "attempts", "task_search")
# the columns every rebuilt table had before 0006, in their old order
OLD_SUBMISSION_COLUMNS = (
    "id, task_id, authorization_id, attempt_id, device_id, fence_key, state, selected_color,"
    " selected_size, gate1_unit_price, gate2_unit_price, quantity_read, confirm_page_amount,"
    " submit_control_match_count, observation, result_key, evidence_asset_id,"
    " reconciliation_reason, reconciled_by, reconciliation_note, created_at, result_at,"
    " reconciled_at"
)


@pytest.fixture
def db_0005(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[sqlite3.Connection]:
    with closing(db_at(tmp_path / "old.sqlite3", "0005_lean_claim_indexes.sql", monkeypatch)) as conn:
        yield conn


def _rows(conn: sqlite3.Connection) -> dict[str, list[tuple[Any, ...]]]:
    out = {
        t: sorted(tuple(r) for r in conn.execute(f"SELECT * FROM {t}"))
        for t in ("tasks", "authorizations", "evidence_assets", "attempts", "task_search")
    }
    out["order_submissions"] = sorted(
        tuple(r) for r in conn.execute(f"SELECT {OLD_SUBMISSION_COLUMNS} FROM order_submissions")
    )
    return out


def _schema_objects(conn: sqlite3.Connection) -> set[tuple[str, str]]:
    return {(r[0], r[1]) for r in conn.execute("SELECT type, name FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'")}


def _fence_raw(conn: sqlite3.Connection, claim: Claim) -> str:
    """A FENCED submission with a FAILURE screenshot, written with the 0005 columns only."""
    att = conn.execute(
        "SELECT id, task_id, authorization_id FROM attempts WHERE device_id = ?", (claim.device_id,)
    ).fetchone()
    asset = new_id()
    conn.execute(
        "INSERT INTO evidence_assets (id, task_id, attempt_id, device_id, upload_key, kind, privacy_tier,"
        " sha256, byte_size, mime, width, height, captured_at, created_at) VALUES (?, ?, ?, ?, ?,"
        " 'CONFIRM_PAGE_GATE_3', 'INTERNAL_RAW', ?, 10, 'image/png', 4, 4, ?, ?)",
        (asset, att[1], att[0], claim.device_id, new_id(), "b" * 64, AT, AT),
    )
    sid = new_id()
    conn.execute(
        "INSERT INTO order_submissions (id, task_id, authorization_id, attempt_id, device_id, fence_key,"
        " state, selected_color, selected_size, gate1_unit_price, gate2_unit_price, quantity_read,"
        " confirm_page_amount, submit_control_match_count, evidence_asset_id, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, 'FENCED', '黑色', 'M', '12.88', '12.88', 1, '12.88', 1, ?, ?)",
        (sid, att[1], att[2], att[0], claim.device_id, new_id(), asset, AT),
    )
    return sid


def test_upgrade_keeps_rows_and_objects(
    db_0005: sqlite3.Connection,
    settings: Settings,
    clock: ManualClock,
    policy: ClaimPolicy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    claims = _seed(db_0005, settings, clock, policy, tasks=5, claims=2)
    sid = _fence_raw(db_0005, claims[0])
    rows, objects = _rows(db_0005), _schema_objects(db_0005)
    assert _migrate_to(db_0005, 6, monkeypatch) == [ORDER_SHEET]
    assert _rows(db_0005) == rows
    assert _schema_objects(db_0005) == objects  # every index and trigger is back, under its name
    assert db_0005.execute("PRAGMA foreign_key_check").fetchall() == []
    assert db_0005.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert db_0005.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    # the later migrations keep every row (0007: columns and tables; 0008: an index; 0009: tasks may be HELD;
    # 0010 *_not_tapped_reasons: order_submissions rebuilt with the same columns, tests/server/store/
    # test_migration_not_tapped.py; 0011 folds the colour/size into the SKU options, tested on its own in
    # test_migration_sku_options.py; 0012: device and approval columns, device_screens); the rest of this
    # test runs on the current schema
    assert migrate.migrate(db_0005, AT) == [m.name for m in migrate.available()][6:]
    migrate.check_current(db_0005)
    new_columns = db_0005.execute(
        "SELECT gate3_unit_price, payment_mode, order_sn, observation_reason FROM order_submissions WHERE id = ?",
        (sid,),
    ).fetchone()
    assert tuple(new_columns) == (None, None, None, None)
    with pytest.raises(sqlite3.IntegrityError, match="permanent"):
        db_0005.execute("DELETE FROM order_submissions")
    # claims replay byte for byte, the rest of the queue is still claimable (the IS comparison)
    for claim in claims:
        assert _claim(db_0005, claim, clock, policy).body == claim.body
    issued = run_in_transaction(db_0005, lambda c: device_service.add_device(c, "after", ACTOR, clock.now()))
    run_in_transaction(
        db_0005,
        lambda c: record_heartbeat(
            c, device_id=issued.device_id, body=heartbeat_body(issued.device_id), now=clock.now(), policy=policy
        ),
    )
    assert _claim(db_0005, Claim(issued.device_id, new_id(), new_id(), None), clock, policy).status == 200


def test_after_upgrade_a_task_without_size_is_stored_searched_and_claimed(
    db_0005: sqlite3.Connection, settings: Settings, clock: ManualClock, policy: ClaimPolicy
) -> None:
    migrate.migrate(db_0005, AT)
    raw = {
        "create_key": new_id(),
        "title": "单规格口红",
        "sku_color": "#01 正红色",
        "sku_size": None,
        "quantity": 1,
        "product_url": "https://mobile.yangkeduo.com/goods.html?goods_id=4242",
        "max_total_price": "30.00",
    }
    new = task_service.validate_new_task(raw, settings)
    task, _ = run_in_transaction(db_0005, lambda c: task_service.create_task(c, new, ACTOR, clock.now()))
    assert task.sku_options == '[["颜色","#01 正红色"]]'  # 0011: the colour alone, no size
    # the search trigger keeps the colour when there is no size (0003's trigger would have stored NULL)
    assert db_0005.execute("SELECT sku FROM task_search WHERE task_id = ?", (task.id,)).fetchone()[0] == "#01 正红色"
    found = admin_queries.task_page(db_0005, admin_queries.TaskFilter(keyword="正红色", keyword_kind="text"), 10)
    assert [t["id"] for t in found] == [task.id]
    run_in_transaction(
        db_0005,
        lambda c: task_service.start_purchases(c, new_id(), [(task.id, task.version)], ACTOR, clock.now(), settings),
    )
    snapshot = db_0005.execute("SELECT sku_options FROM authorizations WHERE task_id = ?", (task.id,)).fetchone()[0]
    assert snapshot == task.sku_options
    issued = run_in_transaction(db_0005, lambda c: device_service.add_device(c, "p", ACTOR, clock.now()))
    run_in_transaction(
        db_0005,
        lambda c: record_heartbeat(
            c, device_id=issued.device_id, body=heartbeat_body(issued.device_id), now=clock.now(), policy=policy
        ),
    )
    stored = _claim(db_0005, Claim(issued.device_id, new_id(), new_id(), None), clock, policy)
    assert stored.status == 200 and '"sku_size":null' in stored.body
    validate("claim_next.response", json.loads(stored.body))  # the wire allows the null


def test_after_upgrade_constraints(
    db_0005: sqlite3.Connection, settings: Settings, clock: ManualClock, policy: ClaimPolicy
) -> None:
    claims = _seed(db_0005, settings, clock, policy, tasks=1, claims=1)
    _fence_raw(db_0005, claims[0])
    migrate.migrate(db_0005, AT)
    att = db_0005.execute("SELECT id, task_id FROM attempts WHERE device_id = ?", (claims[0].device_id,)).fetchone()

    def evidence(kind: str) -> None:
        db_0005.execute(
            "INSERT INTO evidence_assets (id, task_id, attempt_id, device_id, upload_key, kind,"
            " privacy_tier, sha256, byte_size, mime, width, height, captured_at, created_at) VALUES"
            " (?, ?, ?, ?, ?, ?, 'INTERNAL_RAW', ?, 10, 'image/png', 4, 4, ?, ?)",
            (new_id(), att[1], att[0], claims[0].device_id, new_id(), kind, "c" * 64, AT, AT),
        )

    evidence("ORDER_CONFIRMATION")
    bad: list[tuple[str, tuple[Any, ...]]] = [
        # 0011 folded the colour/size into the options: 1–3 pairs of JSON
        ("UPDATE tasks SET sku_options = '[]'", ()),
        ("UPDATE tasks SET sku_options = 'not json'", ()),
        ("UPDATE tasks SET sku_options = ?", ('[["a","1"],["b","2"],["c","3"],["d","4"]]',)),
        ("UPDATE tasks SET sku_options = NULL", ()),
        ("UPDATE order_submissions SET selected_options = '{}'", ()),
        ("UPDATE order_submissions SET order_sn = '12345'", ()),
        ("UPDATE order_submissions SET observation_reason = 'PAID'", ()),
    ]
    for sql, args in bad:
        with pytest.raises(sqlite3.IntegrityError):
            db_0005.execute(sql, args)
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        evidence("PAYMENT_PAGE")
