"""Migration 0005 (lean claim indexes): an upgrade from 0004 keeps every row and every claim replay, the
constraints it replaces still hold on the new schema, and rows that break the new ones — or a dangling
reference — refuse the upgrade and leave the database as it was (the claim migrations' acceptance: upgrade/reopen,
FK / unique / partial index, refusal over existing facts)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.server import migrate
from cmbuyer.server.clock import ManualClock
from cmbuyer.server.config import Settings
from cmbuyer.server.db import connect_sync, run_in_transaction
from cmbuyer.server.domain.claims import ClaimPolicy
from cmbuyer.server.services import claim_next as claim_service
from cmbuyer.server.services import devices as device_service
from cmbuyer.server.services import tasks as task_service
from cmbuyer.server.services.heartbeat import record_heartbeat
from cmbuyer.server.tx.common import Actor, new_id
from tests.server.claims.conftest import heartbeat_body

ACTOR = Actor("cli", "test")
LEAN = "0005_lean_claim_indexes.sql"
AT = "2026-08-04T09:00:00.000000Z"


@dataclass
class Claim:
    device_id: str
    session_id: str
    key: str
    body: str | None


# Columns later migrations add that today's services write (0007: the heartbeat stores devices.pack_id).
# These tests drive today's services on an older schema: the columns exist only while they do, so each
# migration under test still runs on exactly its old schema.
LATER_COLUMNS = (
    ("devices", "pack_id", "TEXT"),
    # 0012: pause and pacing, read with every device row
    ("devices", "paused_at", "TEXT"),
    ("devices", "paused_by", "TEXT"),
    ("devices", "min_claim_interval_seconds", "INTEGER"),
    ("devices", "max_claims_per_day", "INTEGER"),
    ("devices", "last_claim_at", "TEXT"),
    ("devices", "claims_day", "TEXT"),
    ("devices", "claims_on_day", "INTEGER NOT NULL DEFAULT 0"),
    # 0012: the reported hold, its release and the screen request, read by every heartbeat
    *(("devices", c, "TEXT") for c in ("hold_code", "hold_reason", "hold_attempt_id", "hold_seen_at")),
    *(("devices", c, "TEXT") for c in ("hold_release_at", "hold_release_by", "hold_release_note")),
    ("devices", "screen_request_id", "TEXT"),
    ("devices", "screen_requested_at", "TEXT"),
)


def add_later_columns(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """Add the :data:`LATER_COLUMNS` the schema lacks; returns the ``(table, column)`` pairs added."""
    added = [
        (table, column, decl)
        for table, column, decl in LATER_COLUMNS
        if column not in {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
    ]
    for table, column, decl in added:
        conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
    return [(table, column) for table, column, _ in added]


@contextmanager
def later_columns(conn: sqlite3.Connection) -> Iterator[None]:
    """:func:`add_later_columns`, dropped again on the way out."""
    added = add_later_columns(conn)
    try:
        yield
    finally:
        for table, column in reversed(added):
            conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")


def _migrate_to(conn: sqlite3.Connection, last: int, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    code = migrate.available()
    with monkeypatch.context() as m:
        m.setattr(migrate, "available", lambda: [mig for mig in code if mig.number <= last])
        return migrate.migrate(conn, AT)


def db_at(path: Path, last: str, monkeypatch: pytest.MonkeyPatch) -> sqlite3.Connection:
    """A new database at ``path`` migrated up to the migration named ``last`` (an older schema)."""
    conn = connect_sync(path)
    assert _migrate_to(conn, int(last[:4]), monkeypatch)[-1] == last
    return conn


@pytest.fixture
def old_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[sqlite3.Connection]:
    """A database at migration 0004, the schema before this one."""
    with closing(db_at(tmp_path / "old.sqlite3", "0004_evidence_sha256.sql", monkeypatch)) as conn:
        yield conn


def _claim(conn: sqlite3.Connection, claim: Claim, clock: ManualClock, policy: ClaimPolicy) -> Any:
    with later_columns(conn):
        return run_in_transaction(
            conn,
            lambda c: claim_service.claim_next(
                c,
                device_id=claim.device_id,
                session_id=claim.session_id,
                claim_request_id=claim.key,
                now=clock.now(),
                policy=policy,
            ),
        )


def _heartbeat(conn: sqlite3.Connection, device_id: str, clock: ManualClock, policy: ClaimPolicy) -> None:
    """A READY heartbeat with an allowed version (the claim-next gate), through today's service."""
    with later_columns(conn):
        run_in_transaction(
            conn,
            lambda c: record_heartbeat(
                c, device_id=device_id, body=heartbeat_body(device_id), now=clock.now(), policy=policy
            ),
        )


# Columns of older schemas that a later migration folded into another (0011: the SKU options): the old
# column's value read from today's. The seeds are colour/size tasks, so both readings are exact.
FOLDED_COLUMNS = {
    "sku_color": ("sku_options", "json_extract(sku_options, '$[0][1]')"),
    "sku_size": ("sku_options", "json_extract(sku_options, '$[1][1]')"),
    "selected_color": ("selected_options", "json_extract(selected_options, '$[0][1]')"),
    "selected_size": ("selected_options", "json_extract(selected_options, '$[1][1]')"),
}


def _copy_rows(src: sqlite3.Connection, dst: sqlite3.Connection) -> None:
    """Copy every row of ``src`` (current schema) into ``dst`` (an older one), keeping the columns ``dst`` has.

    The search index is not copied (``dst``'s own trigger fills it from the task rows) nor is the migrations
    ledger; integer row ids (the audit trail's) are given anew. Foreign keys are checked at COMMIT, so the
    table order does not matter."""
    tables = [
        r[0]
        for r in dst.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            " AND name NOT LIKE 'task_search%' AND name <> 'schema_migrations' ORDER BY rowid"
        )
    ]
    dst.execute("BEGIN IMMEDIATE")
    dst.execute("PRAGMA defer_foreign_keys = ON")
    for table in tables:
        have = {r[1] for r in src.execute(f"PRAGMA table_info('{table}')")}
        columns = [
            r[1]
            for r in dst.execute(f"PRAGMA table_info('{table}')")
            if (r[1] in have or FOLDED_COLUMNS.get(r[1], ("",))[0] in have) and not (r[5] and r[2].upper() == "INTEGER")
        ]
        names = ", ".join(columns)
        reads = ", ".join(c if c in have else FOLDED_COLUMNS[c][1] for c in columns)
        rows = src.execute(f"SELECT {reads} FROM {table} ORDER BY rowid").fetchall()
        dst.executemany(
            f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(columns))})", [tuple(r) for r in rows]
        )
    dst.execute("COMMIT")


def _seed(
    conn: sqlite3.Connection, settings: Settings, clock: ManualClock, policy: ClaimPolicy, tasks: int, claims: int
) -> list[Claim]:
    """``tasks`` started tasks and ``claims`` devices that each claimed one (through the real services).

    Today's services write today's columns, so the rows are made on a scratch database at the current schema
    and copied into ``conn`` (which may be older) with the columns its schema has (:func:`_copy_rows`)."""
    path = Path(conn.execute("PRAGMA database_list").fetchone()[2])
    scratch = connect_sync(path.with_name(f"{path.stem}-seed-{new_id()}.sqlite3"))
    try:
        migrate.migrate(scratch, AT)
        out = _seed_current(scratch, settings, clock, policy, tasks, claims)
        _copy_rows(scratch, conn)
    finally:
        scratch.close()
    return out


def _seed_current(
    conn: sqlite3.Connection, settings: Settings, clock: ManualClock, policy: ClaimPolicy, tasks: int, claims: int
) -> list[Claim]:
    ids = []
    for i in range(tasks):
        raw = {
            "create_key": new_id(),
            "title": f"t{i}",
            "sku_color": "黑色",
            "sku_size": "M",
            "quantity": 1,
            "product_url": f"https://mobile.yangkeduo.com/goods.html?goods_id={1000 + i}",
            "max_total_price": "30.00",
        }
        new = task_service.validate_new_task(raw, settings)
        task, _ = run_in_transaction(conn, lambda c, n=new: task_service.create_task(c, n, ACTOR, clock.now()))
        ids.append((task.id, task.version))
    run_in_transaction(conn, lambda c: task_service.start_purchases(c, new_id(), ids, ACTOR, clock.now(), settings))
    out = []
    for i in range(claims):
        issued = run_in_transaction(conn, lambda c, i=i: device_service.add_device(c, f"p{i}", ACTOR, clock.now()))
        _heartbeat(conn, issued.device_id, clock, policy)
        claim = Claim(issued.device_id, new_id(), new_id(), None)
        stored = _claim(conn, claim, clock, policy)
        assert stored.status == 200
        claim.body = stored.body
        out.append(claim)
    return out


def _rows(conn: sqlite3.Connection) -> dict[str, list[tuple[Any, ...]]]:
    return {
        t: sorted(tuple(r) for r in conn.execute(f"SELECT * FROM {t}"))
        for t in ("authorizations", "attempts", "device_requests", "tasks", "audit_log")
    }


def _indexes(conn: sqlite3.Connection, table: str) -> dict[str, tuple[str, ...]]:
    return {
        r[1]: tuple(c[2] for c in conn.execute(f"PRAGMA index_info('{r[1]}')"))
        for r in conn.execute(f"PRAGMA index_list('{table}')")
    }


def test_upgrade_keeps_rows_replays_and_drops_only_the_redundant_indexes(
    old_db: sqlite3.Connection,
    settings: Settings,
    clock: ManualClock,
    policy: ClaimPolicy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    claims = _seed(old_db, settings, clock, policy, tasks=6, claims=4)
    before = _rows(old_db)
    assert _migrate_to(old_db, 5, monkeypatch) == [LEAN]
    assert _rows(old_db) == before
    assert old_db.execute("PRAGMA foreign_key_check").fetchall() == []
    assert old_db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert old_db.execute("PRAGMA foreign_keys").fetchone()[0] == 1  # the runner turned them back on
    code = migrate.available()
    with monkeypatch.context() as m:  # current as of 0005 (later migrations have their own tests)
        m.setattr(migrate, "available", lambda: [mig for mig in code if mig.number <= 5])
        migrate.check_current(old_db)
    live = old_db.execute("SELECT sql FROM sqlite_schema WHERE name = 'authorizations_one_live'").fetchone()[0]
    assert live.endswith("WHERE closed_at IS NULL")
    assert _indexes(old_db, "attempts") == {
        "attempts_one_open_per_device": ("device_id",),
        "sqlite_autoindex_attempts_1": ("id",),
        "sqlite_autoindex_attempts_2": ("authorization_id",),
        "sqlite_autoindex_attempts_3": ("task_id", "id"),
    }
    assert _indexes(old_db, "device_requests") == {"sqlite_autoindex_device_requests_1": ("request_key",)}
    migrate.migrate(old_db, AT)  # today's services need today's schema for the rest
    # every claim replays byte for byte (same token rebuilt), and the rest of the queue is still claimable
    for claim in claims:
        assert _claim(old_db, claim, clock, policy).body == claim.body
    for i in range(2):
        issued = run_in_transaction(old_db, lambda c, i=i: device_service.add_device(c, f"n{i}", ACTOR, clock.now()))
        _heartbeat(old_db, issued.device_id, clock, policy)
        assert _claim(old_db, Claim(issued.device_id, new_id(), new_id(), None), clock, policy).status == 200
    assert old_db.execute("SELECT count(*) FROM authorizations WHERE state = 'ACTIVE'").fetchone()[0] == 0


def _one_claim(conn: sqlite3.Connection, settings: Settings, clock: ManualClock, policy: ClaimPolicy) -> dict[str, Any]:
    _seed(conn, settings, clock, policy, tasks=2, claims=1)
    return dict(conn.execute("SELECT * FROM attempts").fetchone())


def test_new_constraints_hold(
    settings: Settings, sync_conn: sqlite3.Connection, clock: ManualClock, policy: ClaimPolicy
) -> None:
    attempt = _one_claim(sync_conn, settings, clock, policy)
    second = run_in_transaction(sync_conn, lambda c: device_service.add_device(c, "second", ACTOR, clock.now()))
    claimed = dict(
        sync_conn.execute("SELECT * FROM authorizations WHERE id = ?", (attempt["authorization_id"],)).fetchone()
    )
    other = dict(
        sync_conn.execute("SELECT * FROM authorizations WHERE id <> ?", (attempt["authorization_id"],)).fetchone()
    )
    bad_statements: list[tuple[str, tuple[Any, ...], str]] = [
        # a terminal state without closed_at, and a live one with it (the CHECK behind authorizations_one_live)
        ("UPDATE authorizations SET state = 'EXPIRED' WHERE id = ?", (other["id"],), "CHECK"),
        ("UPDATE authorizations SET state = 'CONSUMED', close_reason = 'x' WHERE id = ?", (other["id"],), "CHECK"),
        ("UPDATE authorizations SET closed_at = ? WHERE id = ?", (AT, other["id"]), "CHECK"),
        # a second live authorization for a task
        (
            "INSERT INTO authorizations SELECT ?, task_id, task_version, title, product_url, goods_id, sku_options,"
            " quantity, max_total_price, 'ACTIVE', start_key, created_by, created_at, expires_at, NULL, NULL"
            " FROM authorizations WHERE id = ?",
            (new_id(), claimed["id"]),
            "UNIQUE.*authorizations.task_id",
        ),
        # a request key already stored by another device
        (
            "INSERT INTO device_requests SELECT ?, request_key, endpoint, request_hash, status, NULL, NULL, created_at"
            " FROM device_requests",
            (second.device_id,),
            "UNIQUE.*device_requests.request_key",
        ),
        # an event for the attempt under another task (the (attempt_id, task_id) key now UNIQUE(task_id, id))
        (
            "INSERT INTO events (task_id, attempt_id, seq, batch_key, step, outcome, summary, occurred_at, received_at)"
            " VALUES (?, ?, 1, ?, 'open_app', 'ok', '', ?, ?)",
            (other["task_id"], attempt["id"], new_id(), AT, AT),
            "FOREIGN KEY",
        ),
    ]
    for sql, args, why in bad_statements:
        sync_conn.execute("BEGIN")
        with pytest.raises(sqlite3.IntegrityError, match=why):
            sync_conn.execute(sql, args)
        sync_conn.execute("ROLLBACK")
    # closing the live one frees the task for a new live authorization (the index is partial)
    sync_conn.execute("BEGIN")
    sync_conn.execute(
        "UPDATE authorizations SET state = 'CLOSED', closed_at = ?, close_reason = 'x' WHERE id = ?", (AT, other["id"])
    )
    sync_conn.execute(
        "INSERT INTO authorizations SELECT ?, task_id, task_version, title, product_url, goods_id,"
        " sku_options, quantity, max_total_price, 'ACTIVE', start_key, created_by, created_at,"
        " expires_at, NULL, NULL FROM authorizations WHERE id = ?",
        (new_id(), other["id"]),
    )
    sync_conn.execute("ROLLBACK")


def _refused(conn: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch, match: str) -> None:
    schema = sorted(tuple(r) for r in conn.execute("SELECT type, name, sql FROM sqlite_schema"))
    rows = _rows(conn)
    with pytest.raises(migrate.MigrationError, match=match):
        _migrate_to(conn, 5, monkeypatch)
    assert LEAN not in {r[0] for r in conn.execute("SELECT name FROM schema_migrations")}
    assert sorted(tuple(r) for r in conn.execute("SELECT type, name, sql FROM sqlite_schema")) == schema
    assert _rows(conn) == rows
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def _terminal_authorization_without_closed_at(conn: sqlite3.Connection, claims: list[Claim]) -> None:
    conn.execute("UPDATE authorizations SET state = 'EXPIRED' WHERE rowid = (SELECT min(rowid) FROM authorizations)")


def _request_key_stored_for_two_devices(conn: sqlite3.Connection, claims: list[Claim]) -> None:
    conn.execute("UPDATE device_requests SET request_key = ? WHERE device_id = ?", (claims[0].key, claims[1].device_id))


def _dangling_reference(conn: sqlite3.Connection, claims: list[Claim]) -> None:
    conn.execute("PRAGMA foreign_keys = OFF")  # how such a row could only have got there
    conn.execute("UPDATE device_requests SET attempt_id = ?", (new_id(),))
    conn.execute("PRAGMA foreign_keys = ON")


@pytest.mark.parametrize(
    ("tasks", "claims", "corrupt", "match"),
    [
        pytest.param(
            2,
            0,
            _terminal_authorization_without_closed_at,
            "0005.*CHECK constraint failed",
            id="terminal_authorization_without_closed_at",
        ),
        pytest.param(
            3,
            2,
            _request_key_stored_for_two_devices,
            "0005.*UNIQUE constraint failed",
            id="request_key_stored_for_two_devices",
        ),
        pytest.param(
            2,
            1,
            _dangling_reference,
            "0005.*dangling foreign key.*1 in device_requests → attempts",
            id="dangling_reference",
        ),
    ],
)
def test_upgrade_refuses(
    old_db: sqlite3.Connection,
    settings: Settings,
    clock: ManualClock,
    policy: ClaimPolicy,
    monkeypatch: pytest.MonkeyPatch,
    tasks: int,
    claims: int,
    corrupt: Callable[[sqlite3.Connection, list[Claim]], None],
    match: str,
) -> None:
    corrupt(old_db, _seed(old_db, settings, clock, policy, tasks=tasks, claims=claims))
    _refused(old_db, monkeypatch, match)
