"""Migration 0011 (SKU options by dimension name): an upgrade from 0010 turns every task's and
authorization's colour/size into the options list, and every submission's read colour/size into its read
options, with the same canonical text the code writes; every other row, index and trigger stays; claims
replay; a migrated authorization is still claimable, and an agent that knows only colour/size still fences it."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.schemas.sku import legacy_options, options_text
from cmbuyer.server import migrate
from cmbuyer.server.clock import ManualClock
from cmbuyer.server.config import Settings
from cmbuyer.server.db import run_in_transaction
from cmbuyer.server.domain.claims import ClaimPolicy
from cmbuyer.server.services import devices as device_service
from cmbuyer.server.store.queries import admin as admin_queries
from cmbuyer.server.tx.common import new_id
from tests.server.store.test_migration_lean import AT, _claim, _migrate_to, _seed, db_at
from tests.server.store.test_migration_order_sheet import _fence_raw

SKU_OPTIONS = "0011_sku_options.sql"
KEPT = ("attempts", "device_requests", "audit_log", "evidence_assets", "task_search")


@pytest.fixture
def db_0009(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[sqlite3.Connection]:
    with closing(db_at(tmp_path / "old.sqlite3", "0010_not_tapped_reasons.sql", monkeypatch)) as conn:
        yield conn


def _objects(conn: sqlite3.Connection) -> set[tuple[str, str]]:
    return {(r[0], r[1]) for r in conn.execute("SELECT type, name FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'")}


def test_upgrade_folds_colour_and_size_into_options(
    db_0009: sqlite3.Connection,
    settings: Settings,
    clock: ManualClock,
    policy: ClaimPolicy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    claims = _seed(db_0009, settings, clock, policy, tasks=4, claims=2)
    sid = _fence_raw(db_0009, claims[0])  # read 黑色 / M
    # one task of one-dimension goods (no size), as 0006 allows
    one = db_0009.execute("SELECT id FROM tasks WHERE id NOT IN (SELECT task_id FROM attempts) LIMIT 1").fetchone()[0]
    db_0009.execute("UPDATE tasks SET sku_size = NULL WHERE id = ?", (one,))
    db_0009.execute("UPDATE authorizations SET sku_size = NULL WHERE task_id = ?", (one,))
    old = {
        t: {r["id"]: dict(r) for r in db_0009.execute(f"SELECT * FROM {t}")}
        for t in ("tasks", "authorizations", "order_submissions")
    }
    kept = {t: sorted(tuple(r) for r in db_0009.execute(f"SELECT * FROM {t}")) for t in KEPT}
    objects = _objects(db_0009)

    assert _migrate_to(db_0009, 11, monkeypatch) == [SKU_OPTIONS]
    assert db_0009.execute("PRAGMA foreign_key_check").fetchall() == []
    assert db_0009.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert _objects(db_0009) == objects  # every index and trigger is back, under its name
    assert {t: sorted(tuple(r) for r in db_0009.execute(f"SELECT * FROM {t}")) for t in KEPT} == kept
    for table, (options, color, size) in {
        "tasks": ("sku_options", "sku_color", "sku_size"),
        "authorizations": ("sku_options", "sku_color", "sku_size"),
        "order_submissions": ("selected_options", "selected_color", "selected_size"),
    }.items():
        new = {r["id"]: dict(r) for r in db_0009.execute(f"SELECT * FROM {table}")}
        assert new.keys() == old[table].keys()
        for row_id, before in old[table].items():
            after = new[row_id]
            # the same text the code writes (options_text), so a snapshot equals its task, byte for byte
            assert after.pop(options) == options_text(legacy_options(before.pop(color), before.pop(size)))
            assert after == before, (table, row_id)
    read = db_0009.execute("SELECT selected_options FROM order_submissions WHERE id = ?", (sid,)).fetchone()[0]
    assert read == '[["颜色","黑色"],["尺码","M"]]'
    assert json.loads(db_0009.execute("SELECT sku_options FROM tasks WHERE id = ?", (one,)).fetchone()[0]) == [
        ["颜色", "黑色"]
    ]
    # the new search trigger indexes option values; keyword search still finds migrated tasks
    found = admin_queries.task_page(db_0009, admin_queries.TaskFilter(keyword="黑色", keyword_kind="short"), 10)
    assert len(found) == 4
    # the later migrations (0012: device pause/pacing columns, read by claims) before the claims
    migrate.migrate(db_0009, AT)
    migrate.check_current(db_0009)
    # claims replay byte for byte; a migrated authorization is still claimable and carries both forms
    for claim in claims:
        assert _claim(db_0009, claim, clock, policy).body == claims[claims.index(claim)].body
    from tests.server.store.test_migration_lean import ACTOR, Claim, _heartbeat

    issued = run_in_transaction(db_0009, lambda c: device_service.add_device(c, "after", ACTOR, clock.now()))
    _heartbeat(db_0009, issued.device_id, clock, policy)
    stored = _claim(db_0009, Claim(issued.device_id, new_id(), new_id(), None), clock, policy)
    assert stored.status == 200
    task: dict[str, Any] = json.loads(stored.body)["task"]
    assert task["sku_options"] in ([["颜色", "黑色"], ["尺码", "M"]], [["颜色", "黑色"]])
    assert (task["sku_color"], task["sku_size"]) == tuple(dict(task["sku_options"]).get(d) for d in ("颜色", "尺码"))
