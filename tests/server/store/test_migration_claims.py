"""Migrations 0002 and 0005 as the claim layer uses them (the claim migrations' acceptance: upgrade/reopen, FK, unique,
partial index, refusal of an upgrade over unattributable facts and of a "downgrade" of a database with claim facts)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.server import migrate
from cmbuyer.server.clock import ManualClock
from cmbuyer.server.config import Settings
from cmbuyer.server.db import connect_sync, run_in_transaction
from cmbuyer.server.domain.claims import ClaimPolicy
from cmbuyer.server.domain.errors import StartupRefused
from cmbuyer.server.lifecycle import check_schema
from cmbuyer.server.services import claim_next as claim_service
from cmbuyer.server.tx.common import new_id
from tests.server.conftest import Maker


def _claim(conn: sqlite3.Connection, device_id: str, clock: ManualClock, policy: ClaimPolicy) -> Any:
    return run_in_transaction(
        conn,
        lambda c: claim_service.claim_next(
            c, device_id=device_id, session_id=new_id(), claim_request_id=new_id(), now=clock.now(), policy=policy
        ),
    )


def test_reopen_keeps_claims_and_constraints_hold(
    ready_device: Maker,
    make_task: Maker,
    settings: Settings,
    sync_conn: sqlite3.Connection,
    clock: ManualClock,
    policy: ClaimPolicy,
) -> None:
    make_task(start=True)
    make_task(start=True, goods_id="2")
    dev = ready_device()
    assert _claim(sync_conn, dev.device_id, clock, policy).status == 200
    sync_conn.close()
    check_schema(settings)  # reopen: current, nothing pending
    conn = connect_sync(settings.db_path)
    try:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        row = dict(conn.execute("SELECT * FROM attempts").fetchone())
        # the authorization (and task) that was *not* claimed: both were started at the same instant, so
        # which one came first depends on the id tie-break
        auth2, t2_id = conn.execute(
            "SELECT id, task_id FROM authorizations WHERE id <> ?", (row["authorization_id"],)
        ).fetchone()

        def insert(**over: Any) -> None:
            values = {**row, "id": new_id(), "token_hash": bytes(32 - 1) + b"\x07", **over}
            cols = ", ".join(values)
            conn.execute(
                f"INSERT INTO attempts ({cols}) VALUES ({', '.join('?' * len(values))})", tuple(values.values())
            )

        cases: list[dict[str, Any]] = [
            {},  # second attempt for the same authorization (UNIQUE authorization_id)
            {"authorization_id": auth2},  # another OPEN claim of the same device (partial unique index)
            {
                "authorization_id": auth2,
                "state": "CLOSED",
                "close_reason": "FAILED",
                "closed_at": row["created_at"],
                "task_id": row["task_id"],
            },  # auth of another task (composite FK)
            {"authorization_id": new_id()},  # unknown authorization (FK)
            {"device_id": new_id(), "authorization_id": auth2, "task_id": t2_id},  # unknown device (FK)
            {
                "authorization_id": auth2,
                "task_id": t2_id,
                "device_id": row["device_id"],
                "nonce": b"\x00" * 31,
                "state": "CLOSED",
                "close_reason": "FAILED",
                "closed_at": row["created_at"],
            },  # 31-byte nonce
            {"authorization_id": auth2, "task_id": t2_id, "state": "CLOSED"},  # CLOSED without reason/time
        ]
        for over in cases:
            conn.execute("BEGIN")
            with pytest.raises(sqlite3.IntegrityError):
                insert(**over)
            conn.execute("ROLLBACK")
        # a CLOSED attempt of the same device for another authorization is fine (the index is partial)
        conn.execute("BEGIN")
        insert(
            authorization_id=auth2, task_id=t2_id, state="CLOSED", close_reason="FAILED", closed_at=row["created_at"]
        )
        conn.execute("ROLLBACK")
        with pytest.raises(sqlite3.IntegrityError):  # request records point at real attempts
            conn.execute(
                "INSERT INTO device_requests VALUES (?, ?, 'claim-next', 'h', 200, ?, '{}', 'x')",
                (row["device_id"], new_id(), new_id()),
            )
    finally:
        conn.close()


def test_database_with_claim_facts_refuses_older_code(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    only_first = [m for m in migrate.available() if m.number == 1]
    monkeypatch.setattr(migrate, "available", lambda: only_first)
    with pytest.raises(StartupRefused, match="newer database"):
        check_schema(settings)


def test_upgrade_over_unattributable_attempt_facts_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "old.sqlite3"
    conn = connect_sync(db)
    code = migrate.available()
    monkeypatch.setattr(migrate, "available", lambda: [m for m in code if m.number == 1])
    migrate.migrate(conn, "2026-01-01T00:00:00.000000Z")
    conn.execute("CREATE TABLE attempts (id TEXT PRIMARY KEY, task_id TEXT)")  # facts without owner/claim
    conn.execute("INSERT INTO attempts VALUES ('a', 't')")
    monkeypatch.setattr(migrate, "available", lambda: code)
    with pytest.raises(migrate.MigrationError, match="0002"):
        migrate.migrate(conn, "2026-01-01T00:00:00.000000Z")
    applied = [r[0] for r in conn.execute("SELECT name FROM schema_migrations")]
    assert applied == ["0001_foundation.sql"]
    assert conn.execute("SELECT count(*) FROM attempts").fetchone()[0] == 1  # nothing lost
    conn.close()
