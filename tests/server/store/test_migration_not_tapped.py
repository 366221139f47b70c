"""Migration NNNN_not_tapped_reasons (the agent's last look refused the submit tap):
order_submissions is rebuilt so ``observation_reason`` also accepts NOT_TAPPED_SCREEN_CHANGED and
NOT_TAPPED_OBSCURED. An upgrade from the migration before keeps every row (all columns, in order), index,
trigger and reference, and every other constraint still holds."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.server import migrate
from cmbuyer.server.clock import ManualClock
from cmbuyer.server.config import Settings
from cmbuyer.server.domain.claims import ClaimPolicy
from tests.server.store.test_migration_lean import _migrate_to, _seed, db_at
from tests.server.store.test_migration_order_sheet import _fence_raw

# found by name: the number is whatever place the migration got when the branches were merged
(MIGRATION,) = [m for m in migrate.available() if m.name.endswith("_not_tapped_reasons.sql")]
NOT_TAPPED = MIGRATION.name


@pytest.fixture
def db_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[sqlite3.Connection]:
    """A database at the migration before this one."""
    before = migrate.available()[MIGRATION.number - 2].name
    with closing(db_at(tmp_path / "old.sqlite3", before, monkeypatch)) as conn:
        yield conn


def _everything(conn: sqlite3.Connection) -> dict[str, Any]:
    tables = [
        r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
    ]
    return {
        "rows": {
            t: sorted(tuple(r) for r in conn.execute(f"SELECT * FROM {t}")) for t in tables if t != "schema_migrations"
        },
        "columns": {t: [r[1:] for r in conn.execute(f"PRAGMA table_info('{t}')")] for t in tables},
        "objects": sorted((r[0], r[1], r[2]) for r in conn.execute("SELECT type, name, tbl_name FROM sqlite_schema")),
        "references": sorted((t, *r[2:5]) for t in tables for r in conn.execute(f"PRAGMA foreign_key_list('{t}')")),
    }


def test_upgrade_keeps_everything_and_accepts_the_new_reasons(
    db_before: sqlite3.Connection,
    settings: Settings,
    clock: ManualClock,
    policy: ClaimPolicy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    claims = _seed(db_before, settings, clock, policy, tasks=3, claims=2)
    first, second = (_fence_raw(db_before, c) for c in claims)
    db_before.execute(
        "UPDATE order_submissions SET observation = 'UNKNOWN', observation_reason = 'PAYMENT_SUSPECTED',"
        " order_sn = 'ABC123456', payment_mode = '微信支付', gate3_unit_price = '12.88' WHERE id = ?",
        (first,),
    )
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):  # what 0008 is for
        db_before.execute(
            "UPDATE order_submissions SET observation_reason = 'NOT_TAPPED_OBSCURED' WHERE id = ?", (second,)
        )
    before = _everything(db_before)
    assert _migrate_to(db_before, MIGRATION.number, monkeypatch) == [NOT_TAPPED]
    assert _everything(db_before) == before
    assert db_before.execute("PRAGMA foreign_key_check").fetchall() == []
    assert db_before.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    for reason in ("NOT_TAPPED_SCREEN_CHANGED", "NOT_TAPPED_OBSCURED", None):
        db_before.execute("UPDATE order_submissions SET observation_reason = ? WHERE id = ?", (reason, second))
    for column, bad in (
        ("observation_reason", "NOT_TAPPED"),
        ("observation", "NOT_TAPPED"),
        ("state", "DONE"),
        ("submit_control_match_count", 2),
        ("order_sn", "123"),
    ):
        with pytest.raises(sqlite3.IntegrityError):
            db_before.execute(f"UPDATE order_submissions SET {column} = ? WHERE id = ?", (bad, second))
    with pytest.raises(sqlite3.IntegrityError, match="permanent"):
        db_before.execute("DELETE FROM order_submissions WHERE id = ?", (second,))
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        db_before.execute(
            "INSERT INTO order_submissions SELECT 'x', task_id, authorization_id, attempt_id, device_id, fence_key,"
            " state, selected_color, selected_size, gate1_unit_price, gate2_unit_price, quantity_read,"
            " confirm_page_amount, submit_control_match_count, observation, result_key, evidence_asset_id,"
            " reconciliation_reason, reconciled_by, reconciliation_note, created_at, result_at, reconciled_at,"
            " gate3_unit_price, payment_mode, order_sn, observation_reason FROM order_submissions WHERE id = ?",
            (second,),
        )
