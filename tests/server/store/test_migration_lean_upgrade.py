"""Review attacks on migration 0005 (lean claim indexes) and the foreign-keys-off migration runner.

What is attacked here:

- an upgrade from 0004 of a database filled through the real device API and admin use-cases (claim,
  resume, renew, events, evidence, fence, result, late result, fail, reset + restart, cancel,
  reconcile, both sweeps, an EMPTY claim): every row kept, ``foreign_key_check`` clean, and every
  stored device answer replayed byte for byte by the new code over HTTP;
- ``device_requests`` keyed by ``request_key`` alone: every stored key, reused by another device on
  every one of the seven keyed endpoints, is still ``409 idempotency_conflict`` and writes nothing
  (never an IntegrityError/503), and new work on the upgraded database is accepted;
- the composite ``(attempt_id, task_id)`` foreign keys now served by ``UNIQUE(task_id, id)``;
- the runner: SIGKILL at two points inside the 0005 transaction, a migration that cannot get the write
  lock, and two migrators racing;
- query plans of the store statements that look attempts up by task, authorizations by task and
  requests by key.

The race test failed on the first version of the runner (it decided what was pending before taking the
write lock); the runner now decides again inside the migration's transaction.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.server import migrate
from cmbuyer.server.app import create_app
from cmbuyer.server.cli import main as cli_main
from cmbuyer.server.clock import ManualClock
from cmbuyer.server.config import Settings
from cmbuyer.server.db import connect_sync, run_in_transaction
from cmbuyer.server.services import admin_actions, recovery
from cmbuyer.server.services import tasks as task_service
from cmbuyer.server.store import attempts as attempt_store
from cmbuyer.server.store import authorizations as auth_store
from cmbuyer.server.store import device_requests as device_request_store
from cmbuyer.server.store.queries import admin as admin_queries
from cmbuyer.server.store.queries import task_view as views
from cmbuyer.server.tx.common import new_id
from tests.server.conftest import TEST_ACTOR, DeviceCreds, DeviceMaker, Maker
from tests.server.store.sku_bridge import bridge_0010, unbridge_0010
from tests.server.store.test_migration_lean import add_later_columns
from tests.server.submissions import helpers

LEAN = "0005_lean_claim_indexes.sql"
AT = "2026-08-04T09:00:00.000000Z"
IDEM = {"error": "idempotency_conflict"}
TABLES = (
    "tasks",
    "authorizations",
    "attempts",
    "device_requests",
    "events",
    "evidence_assets",
    "order_submissions",
    "audit_log",
    "devices",
    "start_requests",
)


def _upto(last: int) -> Callable[[], list[migrate.Migration]]:
    code = migrate.available()
    return lambda: [m for m in code if m.number <= last]


@contextmanager
def _schema_at(last: int) -> Iterator[None]:
    """While active, the code knows only migrations 1..last (so the app serves a database at ``last``)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(migrate, "available", _upto(last))
        yield


@pytest.fixture(autouse=True)
def _code_at_0005() -> Iterator[None]:
    """This module attacks 0005 and the runner: the code knows migrations 1..5 only. Later ones (0006
    rebuilds other tables) have their own tests (tests/server/store/test_migration_order_sheet.py)."""
    with _schema_at(5):
        yield


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """Overrides the shared fixture: a data dir made by the real ``init``, its database left at 0004."""
    d = tmp_path / "data"
    with _schema_at(4):
        assert cli_main(["--data-dir", str(d), "init", "--json"]) == 0
    # today's services write columns of later migrations (devices.pack_id, 0007); 0005 leaves them alone
    conn = connect_sync(d / "cmbuyer.sqlite3")
    add_later_columns(conn)
    bridge_0010(conn)  # today's services write SKU options (0011); taken off with _unbridge_0007
    conn.close()
    return d


def _rows(conn: sqlite3.Connection) -> dict[str, list[tuple[Any, ...]]]:
    return {t: sorted(tuple(r) for r in conn.execute(f"SELECT * FROM {t}")) for t in TABLES}


def _schema(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_schema"))


def _applied(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM schema_migrations")}


# Today's claim-next and fence also read and write what 0007 adds for supervision (attempts.pack_key/supervised,
# devices.supervision_off, the supervision tables). To serve the older schemas of this module with today's
# code, 0007's statements (only ADD COLUMN and new tables; a column the data dir already has — devices.pack_id,
# added by the data_dir fixture — is skipped) are applied as a test-only bridge, and taken off again before an
# upgrade is compared: 0005 rebuilds attempts with its own column list.
SUPERVISION = "0007_pack_id_and_supervision.sql"
BRIDGE_COLUMNS = (("attempts", "supervised"), ("attempts", "pack_key"), ("devices", "supervision_off"))
# read at import, before the autouse fixture narrows migrate.available() to 1..5
SUPERVISION_SQL = next(m.sql for m in migrate.available() if m.name == SUPERVISION)


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info('{table}')")}


def _bridge_0007(conn: sqlite3.Connection) -> None:
    bridge_0010(conn)  # and the SKU options of 0011 (tests/server/store/sku_bridge.py)
    for statement in migrate.split_statements(SUPERVISION_SQL):
        words = " ".join(line for line in statement.splitlines() if not line.lstrip().startswith("--")).split()
        if words[:2] == ["ALTER", "TABLE"] and words[5] in _columns(conn, words[2]):
            continue  # "ALTER TABLE <t> ADD COLUMN <c> …" for a column that is already there
        conn.execute(statement)


def _unbridge_0007(conn: sqlite3.Connection) -> None:
    unbridge_0010(conn)
    for table in ("supervision_verdicts", "approval_requests", "supervision_pairs"):
        conn.execute(f"DROP TABLE {table}")
    for table, column in BRIDGE_COLUMNS:
        conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")


# --- a realistic database at 0004, driven through the real API ------------------------------------------


@dataclasses.dataclass
class Sent:
    """One accepted device request: what was sent, its first answer and the answer to an identical retry."""

    endpoint: str
    key: str
    path: str
    creds: DeviceCreds
    data: bytes
    ctype: str
    status: int
    raw: bytes
    replay: tuple[int, bytes]


class Device:
    """Drives the real HTTP API for one device and records every accepted keyed request."""

    def __init__(self, client: Any, creds: DeviceCreds, log: list[Sent]) -> None:
        self.client, self.creds, self.log = client, creds, log
        self.claim: helpers.Claim | None = None

    async def _post(self, path: str, data: bytes, ctype: str) -> tuple[int, bytes]:
        resp = await self.client.post(path, data=data, headers={"Content-Type": ctype, **self.creds.headers()})
        return resp.status, await resp.read()

    async def send(self, endpoint: str, key: str, path: str, body: Any, expect: int) -> bytes:
        if isinstance(body, tuple):
            data, ctype = body
        else:
            data, ctype = json.dumps(body, ensure_ascii=False).encode(), "application/json"
        status, raw = await self._post(path, data, ctype)
        assert status == expect, (endpoint, status, raw)
        replay = await self._post(path, data, ctype)
        assert replay[0] in (200, 204), (endpoint, replay)
        self.log.append(Sent(endpoint, key, path, self.creds, data, ctype, status, raw, replay))
        return raw

    async def heartbeat(self) -> None:
        status, raw = await self._post(
            helpers.HEARTBEAT, json.dumps(helpers.heartbeat_body(self.creds.device_id)).encode(), "application/json"
        )
        assert status == 200, raw

    async def claim_next(self, expect: int = 200, session: str | None = None) -> helpers.Claim | None:
        await self.heartbeat()
        session = session or new_id()
        key = new_id()
        raw = await self.send(
            "claim-next", key, helpers.CLAIM_NEXT, {"session_id": session, "claim_request_id": key}, expect
        )
        if expect == 204:
            return None
        self.claim = helpers.Claim.from_body(self.creds, session, json.loads(raw))
        return self.claim

    async def renew(self) -> None:
        c = self.claim
        assert c is not None
        key = new_id()
        raw = await self.send(
            "renew",
            key,
            f"/api/v1/tasks/{c.task_id}/lease/renew",
            {
                "renew_request_id": key,
                "session_id": c.session_id,
                "attempt_id": c.attempt_id,
                "claim_generation": c.generation,
                "claim_token": c.token,
                "expected_lease_expires_at": c.lease_expires_at,
            },
            200,
        )
        self.claim = dataclasses.replace(c, lease_expires_at=json.loads(raw)["lease_expires_at"])

    async def events(self) -> None:
        assert self.claim is not None
        body = helpers.events_body(self.claim)
        await self.send("events", body["batch_key"], helpers.events_path(self.claim.task_id), body, 200)

    async def evidence(self, size: tuple[int, int] = (24, 16)) -> str:
        assert self.claim is not None
        data = helpers.png(size=size)
        fields = helpers.evidence_fields(self.claim, data)
        raw = await self.send(
            "evidence",
            fields["upload_key"],
            helpers.evidence_path(self.claim.task_id),
            helpers.multipart(fields, data),
            201,
        )
        return str(json.loads(raw)["asset_id"])

    async def fence(self) -> str:
        assert self.claim is not None
        c = self.claim
        version = c.task_version + (1 if any(s.endpoint == "events" and s.creds == self.creds for s in self.log) else 0)
        body = helpers.fence_body(c, expected_task_version=version)
        raw = await self.send("fence", body["fence_key"], helpers.fence_path(c.attempt_id), body, 200)
        answer = json.loads(raw)
        assert answer["click_permitted"] is True
        return str(answer["submission_id"])

    async def result(self, submission_id: str, asset_id: str | None = None) -> None:
        assert self.claim is not None
        body = helpers.result_body(self.claim, evidence_asset_id=asset_id)
        await self.send("result", body["result_key"], helpers.result_path(submission_id), body, 200)

    async def fail(self, asset_id: str | None = None) -> None:
        assert self.claim is not None
        body = helpers.fail_body(self.claim, evidence_asset_id=asset_id)
        await self.send("fail", body["fail_key"], helpers.fail_path(self.claim.attempt_id), body, 200)


def _start(conn: sqlite3.Connection, settings: Settings, clock: ManualClock, task_id: str) -> None:
    task = task_service.get_task(conn, task_id)
    run_in_transaction(
        conn,
        lambda c: task_service.start_purchases(
            c, new_id(), [(task.id, task.version)], TEST_ACTOR, clock.now(), settings
        ),
    )


async def _fill_0004(
    aiohttp_client: Any,
    settings: Settings,
    clock: ManualClock,
    conn: sqlite3.Connection,
    make_device: DeviceMaker,
    make_task: Maker,
) -> list[Sent]:
    """Every device use-case and every admin/sweeper move of an authorization, on a 0004 database."""
    log: list[Sent] = []
    # Today's fence and result write four submission columns that 0006 adds. To serve this
    # older schema with today's code they are added here as plain nullable columns — a test-only bridge;
    # 0005 does not rebuild order_submissions, so they pass through its upgrade untouched.
    for column in ("gate3_unit_price", "payment_mode", "order_sn", "observation_reason"):
        conn.execute(f"ALTER TABLE order_submissions ADD COLUMN {column} TEXT")
    _bridge_0007(conn)
    tasks = [make_task(start=True, goods_id=str(7000 + i)) for i in range(6)]
    with _schema_at(4):
        client = await aiohttp_client(create_app(settings, clock))
    try:

        def dev(name: str) -> Device:
            return Device(client, make_device(name), log)

        a, b, c, d, e, f, g, h = (dev(n) for n in "abcdefgh")
        # A: claim, renew, events, evidence, fence, result (authorization → CONSUMED)
        await a.claim_next()
        await a.renew()
        await a.events()
        asset = await a.evidence()
        sub_a = await a.fence()
        await a.result(sub_a, asset)
        # B: claim, events, evidence, fail with the asset (authorization → CLOSED)
        await b.claim_next()
        await b.events()
        await b.fail(await b.evidence())
        # C: claim, events, fence; its lease runs out after the fence (sweeper → CONSUMED), late result,
        # then a person reconciles
        await c.claim_next()
        await c.events()
        sub_c = await c.fence()
        # D: claim, then reset to draft (CLAIMED → CLOSED) and started again (a second authorization of
        # the task, claimed by E: two attempts on one task)
        await d.claim_next()
        assert d.claim is not None
        task_d = task_service.get_task(conn, d.claim.task_id)
        run_in_transaction(
            conn, lambda x: admin_actions.reset_to_draft(x, task_d.id, task_d.version, None, TEST_ACTOR, clock.now())
        )
        # F: claim, cancelled by a person
        await f.claim_next()
        assert f.claim is not None
        task_f = task_service.get_task(conn, f.claim.task_id)
        run_in_transaction(
            conn, lambda x: admin_actions.cancel(x, task_f.id, task_f.version, None, TEST_ACTOR, clock.now())
        )
        # G: claim, resume in the same session under a new key, then fail
        await g.claim_next()
        assert g.claim is not None
        await g.claim_next(session=g.claim.session_id)
        await g.fail()
        _start(conn, settings, clock, task_d.id)
        await e.claim_next()
        assert e.claim is not None and e.claim.task_id == task_d.id
        await e.events()
        # H: nothing left to claim → the stored EMPTY
        await h.claim_next(expect=204)
        expiring = make_task(start=True, goods_id="7999")
        # leases of C and E end; the sweeper moves C's fence to reconciliation
        clock.advance(200)
        run_in_transaction(conn, lambda x: recovery.sweep(x, clock.now()))
        await c.result(sub_c)  # late observation, recorded without a state change
        sub = conn.execute("SELECT task_id FROM order_submissions WHERE id = ?", (sub_c,)).fetchone()
        task_c = task_service.get_task(conn, sub[0])
        run_in_transaction(
            conn,
            lambda x: admin_actions.reconcile(
                x, sub_c, "created", "seen in the app", task_c.version, TEST_ACTOR, clock.now()
            ),
        )
        # the never-claimed authorization expires (ACTIVE → EXPIRED)
        clock.advance(3700)
        run_in_transaction(conn, lambda x: recovery.sweep(x, clock.now()))
    finally:
        await client.close()
    states = {r[0] for r in conn.execute("SELECT state FROM authorizations")}
    assert states == {"CONSUMED", "CLOSED", "EXPIRED", "CLAIMED"}, states
    assert task_service.get_task(conn, expiring.id).state == "EXPIRED"
    assert len(tasks) == 6 and conn.execute("SELECT count(*) FROM attempts").fetchone()[0] == 7
    return log


async def test_realistic_0004_database_upgrades_replays_and_refuses_foreign_keys(
    aiohttp_client: Any,
    settings: Settings,
    clock: ManualClock,
    sync_conn: sqlite3.Connection,
    make_device: DeviceMaker,
    make_task: Maker,
) -> None:
    """Data made by every use-case upgrades cleanly; every stored answer replays byte for
    byte on the new schema; each stored key reused by another device is 409 on all seven endpoints."""
    settings = dataclasses.replace(settings, sweep_interval=3600)
    assert LEAN not in _applied(sync_conn)
    log = await _fill_0004(aiohttp_client, settings, clock, sync_conn, make_device, make_task)
    _unbridge_0007(sync_conn)
    before = _rows(sync_conn)

    assert migrate.migrate(sync_conn, AT) == [LEAN]
    assert sync_conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert sync_conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert sync_conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert _rows(sync_conn) == before
    _bridge_0007(sync_conn)

    client = await aiohttp_client(create_app(settings, clock))
    # every stored answer, byte for byte, from the new code on the new schema
    for sent in log:
        resp = await client.post(
            sent.path, data=sent.data, headers={"Content-Type": sent.ctype, **sent.creds.headers()}
        )
        assert (resp.status, await resp.read()) == sent.replay, sent.endpoint

    # a new device with its own claim and fence
    make_task(start=True, goods_id="8000")
    z = Device(client, make_device("z"), [])
    zc = await z.claim_next()
    assert zc is not None
    z_sub = await z.fence()
    data = helpers.png(size=(30, 30))

    def bodies(key: str) -> list[tuple[str, Any]]:
        return [
            (helpers.CLAIM_NEXT, {"session_id": zc.session_id, "claim_request_id": key}),
            (
                f"/api/v1/tasks/{zc.task_id}/lease/renew",
                {
                    "renew_request_id": key,
                    "session_id": zc.session_id,
                    "attempt_id": zc.attempt_id,
                    "claim_generation": zc.generation,
                    "claim_token": zc.token,
                    "expected_lease_expires_at": zc.lease_expires_at,
                },
            ),
            (helpers.events_path(zc.task_id), helpers.events_body(zc, batch_key=key)),
            (
                helpers.evidence_path(zc.task_id),
                helpers.multipart(helpers.evidence_fields(zc, data, upload_key=key), data),
            ),
            (helpers.fence_path(zc.attempt_id), helpers.fence_body(zc, fence_key=key)),
            (helpers.result_path(z_sub), helpers.result_body(zc, result_key=key)),
            (helpers.fail_path(zc.attempt_id), helpers.fail_body(zc, fail_key=key)),
        ]

    keys = {(s.endpoint, s.key) for s in log}
    assert {ep for ep, _ in keys} == {"claim-next", "renew", "events", "evidence", "fence", "result", "fail"}
    frozen = helpers.fingerprint(sync_conn)
    for endpoint, key in sorted(keys):
        for path, body in bodies(key):
            data_, ctype = body if isinstance(body, tuple) else (json.dumps(body).encode(), "application/json")
            resp = await client.post(path, data=data_, headers={"Content-Type": ctype, **z.creds.headers()})
            raw = await resp.read()
            assert (resp.status, json.loads(raw)) == (409, IDEM), (endpoint, path, resp.status, raw)
    assert helpers.fingerprint(sync_conn) == frozen

    # and the new schema takes new work: events after the fence, evidence, the result
    await z.events()
    asset = await z.evidence(size=(31, 31))
    await z.result(z_sub, asset)
    assert sync_conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert (
        sync_conn.execute(
            "SELECT count(*) FROM authorizations WHERE (closed_at IS NULL) <> (state IN ('ACTIVE','CLAIMED','FENCED'))"
        ).fetchone()[0]
        == 0
    )


# --- composite foreign keys after the rebuild -------------------------------------------------------------


def _claimed_db(
    settings: Settings, clock: ManualClock, conn: sqlite3.Connection, make_device: DeviceMaker, make_task: Maker
) -> dict[str, Any]:
    """Upgrade to 0005, then one claimed task and one started, unclaimed task (t2) through the real services."""
    from cmbuyer.server.domain.claims import ClaimPolicy
    from cmbuyer.server.services.claim_next import claim_next
    from cmbuyer.server.services.heartbeat import record_heartbeat

    assert migrate.migrate(conn, AT) == [LEAN]
    _bridge_0007(conn)
    started = [make_task(start=True, goods_id="7100").id, make_task(start=True, goods_id="7101").id]
    creds = make_device("p")
    policy = ClaimPolicy.from_settings(settings)
    run_in_transaction(
        conn,
        lambda c: record_heartbeat(
            c, device_id=creds.device_id, body=helpers.heartbeat_body(creds.device_id), now=clock.now(), policy=policy
        ),
    )
    stored = run_in_transaction(
        conn,
        lambda c: claim_next(
            c, device_id=creds.device_id, session_id=new_id(), claim_request_id=new_id(), now=clock.now(), policy=policy
        ),
    )
    attempt = dict(conn.execute("SELECT * FROM attempts WHERE id = ?", (stored.attempt_id,)).fetchone())
    t2 = next(t for t in started if t != attempt["task_id"])  # the task that was not claimed
    auth2 = conn.execute("SELECT id FROM authorizations WHERE task_id = ?", (t2,)).fetchone()[0]
    return {"attempt": attempt, "t2": t2, "auth2": auth2, "device": creds.device_id}


def test_composite_foreign_keys_hold_after_the_rebuild(
    settings: Settings, clock: ManualClock, sync_conn: sqlite3.Connection, make_device: DeviceMaker, make_task: Maker
) -> None:
    """Events, evidence assets and order submissions whose task is not their attempt's
    task are refused by ``UNIQUE(task_id, id)`` as the parent key, and ``foreign_key_check`` (what the
    runner relies on) finds such a row when foreign keys were off."""
    ctx = _claimed_db(settings, clock, sync_conn, make_device, make_task)
    att, t2 = ctx["attempt"], ctx["t2"]
    sha = "a" * 64
    bad = [
        (
            "INSERT INTO events (task_id, attempt_id, seq, batch_key, step, outcome, summary, occurred_at,"
            " received_at) VALUES (?, ?, 1, 'b', 'OPEN_PRODUCT', 'OK', 'ok', ?, ?)",
            (t2, att["id"], AT, AT),
        ),
        (
            "INSERT INTO evidence_assets (id, task_id, attempt_id, device_id, upload_key, kind, privacy_tier, sha256,"
            " byte_size, mime, width, height, captured_at, created_at) VALUES (?, ?, ?, ?, ?, 'FAILURE',"
            " 'INTERNAL_RAW', ?, 1, 'image/png', 1, 1, ?, ?)",
            (new_id(), t2, att["id"], ctx["device"], new_id(), sha, AT, AT),
        ),
        (
            "INSERT INTO order_submissions (id, task_id, authorization_id, attempt_id, device_id, fence_key, state,"
            " selected_color, selected_size, gate1_unit_price, gate2_unit_price, quantity_read, confirm_page_amount,"
            " submit_control_match_count, created_at) VALUES (?, ?, ?, ?, ?, ?, 'FENCED', 'c', 's', '1.00', '1.00',"
            " 1, '1.00', 1, ?)",
            (new_id(), t2, ctx["auth2"], att["id"], ctx["device"], new_id(), AT),
        ),
        (
            "INSERT INTO device_requests VALUES (?, ?, 'events', 'h', 200, ?, '{}', ?)",
            (ctx["device"], new_id(), new_id(), AT),
        ),
    ]
    for sql, args in bad:
        sync_conn.execute("BEGIN")
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            sync_conn.execute(sql, args)
        sync_conn.execute("ROLLBACK")
    sync_conn.execute("PRAGMA foreign_keys = OFF")
    try:
        sync_conn.execute(bad[0][0], bad[0][1])
        problems = sync_conn.execute("PRAGMA foreign_key_check").fetchall()
        assert [(p[0], p[2]) for p in problems] == [("events", "attempts")]
    finally:
        sync_conn.execute("PRAGMA foreign_keys = ON")


# --- the runner: SIGKILL inside the transaction, lock refusal, racing migrators ----------------------------

_CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from cmbuyer.server import migrate
    from cmbuyer.server.db import connect_sync

    db, marker, at = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    real_split = migrate.split_statements

    def split(sql):
        parts = real_split(sql)
        parts.insert(at if at >= 0 else len(parts), "SELECT cmbuyer_pause()")
        return parts

    def pause():
        marker.write_text("paused")
        time.sleep(120)
        return 0

    migrate.split_statements = split
    conn = connect_sync(db)
    conn.create_function("cmbuyer_pause", 0, pause)
    migrate.migrate(conn, "2026-08-04T09:00:00.000000Z")
""")


@pytest.mark.parametrize("pause_before", [3, 10, -1], ids=["authorizations-dropped", "attempts-dropped", "all-done"])
def test_sigkill_inside_the_0005_transaction_leaves_0004_intact(
    pause_before: int,
    settings: Settings,
    clock: ManualClock,
    sync_conn: sqlite3.Connection,
    make_device: DeviceMaker,
    make_task: Maker,
    tmp_path: Path,
) -> None:
    """The runner killed with the old tables dropped (and, for "all-done", every statement
    run, just before the foreign key check and COMMIT) leaves the database at 0004, rows and schema as they
    were; a later ``migrate`` applies 0005."""
    from cmbuyer.server.domain.claims import ClaimPolicy
    from cmbuyer.server.services.claim_next import claim_next
    from cmbuyer.server.services.heartbeat import record_heartbeat

    for i in range(3):
        make_task(start=True, goods_id=str(7200 + i))
    policy = ClaimPolicy.from_settings(settings)
    _bridge_0007(sync_conn)
    for i in range(2):
        creds = make_device(f"k{i}")
        run_in_transaction(
            sync_conn,
            lambda c, d=creds.device_id: record_heartbeat(
                c, device_id=d, body=helpers.heartbeat_body(d), now=clock.now(), policy=policy
            ),
        )
        run_in_transaction(
            sync_conn,
            lambda c, d=creds.device_id: claim_next(
                c, device_id=d, session_id=new_id(), claim_request_id=new_id(), now=clock.now(), policy=policy
            ),
        )
    _unbridge_0007(sync_conn)
    rows, schema = _rows(sync_conn), _schema(sync_conn)
    marker = tmp_path / "paused"
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(settings.db_path), str(marker), str(pause_before)])
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert child.poll() is None, "migrator exited before the pause"
            assert time.monotonic() < deadline, "migrator never reached the pause"
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(30)
    conn = connect_sync(settings.db_path)
    try:
        assert LEAN not in _applied(conn)
        assert _schema(conn) == schema and _rows(conn) == rows
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert migrate.migrate(conn, AT) == [LEAN]
        assert _rows(conn) == rows
    finally:
        conn.close()


def test_migration_that_cannot_get_the_write_lock_changes_nothing(
    settings: Settings, sync_conn: sqlite3.Connection, make_task: Maker
) -> None:
    """A server (here: another connection) holding the write lock makes the upgrade fail
    with MigrationError after the busy timeout; nothing changed, foreign keys back on, and it applies once
    the lock is free."""
    make_task(start=True)
    rows, schema = _rows(sync_conn), _schema(sync_conn)
    holder = connect_sync(settings.db_path)
    conn = connect_sync(settings.db_path)
    try:
        conn.execute("PRAGMA busy_timeout = 50")
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(migrate.MigrationError, match=f"{LEAN} failed"):
            migrate.migrate(conn, AT)
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert not conn.in_transaction
        holder.execute("ROLLBACK")
        assert LEAN not in _applied(conn) and _schema(conn) == schema and _rows(conn) == rows
        assert migrate.migrate(conn, AT) == [LEAN]
    finally:
        holder.close()
        conn.close()


def test_second_migrator_that_lost_the_race_is_a_no_op(
    settings: Settings, sync_conn: sqlite3.Connection, make_task: Maker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two ``cmbuyer-server migrate`` runs started together (a deploy script and a person …): both read 0005
    as pending before either holds the write lock. The loser must find it recorded once it gets the lock
    and do nothing — not rebuild the three tables a second time and then fail on ``schema_migrations``'
    primary key (exit 4 on a fully migrated database), as the first version of the runner did."""
    make_task(start=True)
    winner = connect_sync(settings.db_path)
    loser = connect_sync(settings.db_path)
    real_status = migrate.status
    raced: list[bool] = []

    def racing_status(conn: sqlite3.Connection) -> tuple[list[migrate.Migration], list[str]]:
        result = real_status(conn)
        if conn is loser and not raced:
            raced.append(True)
            assert migrate.migrate(winner, AT) == [LEAN]  # the other process commits first
        return result

    monkeypatch.setattr(migrate, "status", racing_status)
    try:
        done = migrate.migrate(loser, AT)
        assert done == []
    finally:
        winner.close()
        loser.close()


# --- query plans ------------------------------------------------------------------------------------------

_SCAN = re.compile(r"^SCAN (attempts|authorizations|device_requests|a)\b(?! USING)")


def test_lookups_by_task_and_key_stay_indexed(settings: Settings, sync_conn: sqlite3.Connection) -> None:
    """The store statements that look attempts up by task, authorizations by task and
    requests by key SEARCH an index on the upgraded schema (traced from the real store calls)."""
    assert migrate.migrate(sync_conn, AT) == [LEAN]
    traced: list[str] = []
    sync_conn.set_trace_callback(traced.append)
    tid = new_id()
    device_request_store.for_key(sync_conn, new_id())
    attempt_store.open_for_task(sync_conn, tid)
    attempt_store.get(sync_conn, tid)
    attempt_store.close_open_for_task(sync_conn, tid, "RESET", AT)
    views.attempts_for_task(sync_conn, tid)
    admin_queries.open_attempts(sync_conn, [tid, new_id()])
    auth_store.live_for_task(sync_conn, tid)
    auth_store.latest_for_task(sync_conn, tid)
    auth_store.for_task(sync_conn, tid)
    auth_store.get(sync_conn, tid)
    sync_conn.set_trace_callback(None)
    assert len(traced) == 10
    for sql in traced:
        plan = [r[3] for r in sync_conn.execute("EXPLAIN QUERY PLAN " + sql)]
        assert not any(_SCAN.match(step) for step in plan), (sql, plan)
        assert any(step.startswith("SEARCH") for step in plan), (sql, plan)
