"""恢复后待核对: ``GET /held`` lists the tasks a restore held, ``POST /held/release`` releases the
ones a person checked — in bulk, CSRF and an explicit confirmation required, a stale selection reported and
left held. Real app and SQLite file; the hold itself is the restore's use-case (services/restore_hold.py)."""

from __future__ import annotations

import sqlite3
from typing import Any

from cmbuyer.server.clock import ManualClock
from cmbuyer.server.db import run_in_transaction
from cmbuyer.server.services import restore_hold
from tests.server.conftest import TEST_ACTOR, Maker

from .conftest import AdminClient, FencedTask


def _hold(conn: sqlite3.Connection, clock: ManualClock) -> list[str]:
    return run_in_transaction(conn, lambda c: restore_hold.hold_unsettled(c, TEST_ACTOR, clock.now()))


def _row(conn: sqlite3.Connection, task_id: str) -> tuple[str, int]:
    state, version = conn.execute("SELECT state, version FROM tasks WHERE id = ?", (task_id,)).fetchone()
    return str(state), int(version)


async def test_hold_list_and_bulk_release(
    admin_client: AdminClient,
    make_task: Maker,
    fenced_task: FencedTask,
    sync_conn: sqlite3.Connection,
    clock: ManualClock,
) -> None:
    draft = make_task()
    pending = make_task(start=True)
    fenced, _ = fenced_task()
    held = _hold(sync_conn, clock)
    assert sorted(held) == sorted([pending.id, fenced.id])  # the draft is settled enough: untouched
    assert _row(sync_conn, draft.id)[0] == "DRAFT"
    assert _hold(sync_conn, clock) == []  # a second hold changes nothing

    page = await admin_client.client.get("/held")
    html = await page.text()
    assert page.status == 200 and pending.id in html and fenced.id in html and draft.id not in html
    assert "已取得（放行后进入人工核对）" in html and "待领取" in html

    listing = await (await admin_client.client.get("/held", headers={"Accept": "application/json"})).json()
    assert {t["id"]: (t["held_from"], t["fenced"]) for t in listing["tasks"]} == {
        pending.id: ("PENDING", False),
        fenced.id: ("SUBMITTING", True),
    }
    picks = [
        ("task", f"{pending.id}:{_row(sync_conn, pending.id)[1]}"),
        ("task", f"{fenced.id}:{_row(sync_conn, fenced.id)[1]}"),
    ]

    # without the confirmation: refused, nothing released
    resp = await admin_client.post_form("/held/release", picks)
    assert resp.status == 400
    assert _row(sync_conn, pending.id)[0] == _row(sync_conn, fenced.id)[0] == "HELD"
    # without CSRF: refused
    resp = await admin_client.client.post("/held/release", data=[*picks, ("confirm", "checked")], allow_redirects=False)
    assert resp.status == 403

    resp = await admin_client.post_form("/held/release", [*picks, ("confirm", "checked")])
    assert resp.status == 303 and resp.headers["Location"] == "/held?released=2&stale=0"
    assert _row(sync_conn, pending.id)[0] == "DRAFT"
    assert _row(sync_conn, fenced.id)[0] == "SUBMITTING"
    auth = sync_conn.execute("SELECT state FROM authorizations WHERE task_id = ?", (pending.id,)).fetchone()[0]
    assert auth == "CLOSED"
    actions = [r[0] for r in sync_conn.execute("SELECT action FROM audit_log WHERE action LIKE 'task.re%' ORDER BY id")]
    assert actions.count("task.restore_hold") == 2 and "task.release" in actions and "task.release_fenced" in actions
    page = await admin_client.client.get("/held?released=2&stale=0")
    assert "已放行 2 个任务" in await page.text()


async def test_a_stale_selection_is_reported_and_stays_held(
    admin_client: AdminClient, make_task: Maker, sync_conn: sqlite3.Connection, clock: ManualClock
) -> None:
    one, two = make_task(start=True), make_task(start=True)
    _hold(sync_conn, clock)
    body = {
        "confirm": "checked",
        "tasks": [
            {"task_id": one.id, "version": _row(sync_conn, one.id)[1]},
            {"task_id": two.id, "version": _row(sync_conn, two.id)[1] - 1},  # what the page showed before
        ],
    }
    answer: Any = await (await admin_client.post_json("/held/release", body)).json()
    assert [r["task_id"] for r in answer["released"]] == [one.id]
    assert answer["refused"] == [{"task_id": two.id, "error": "version_conflict"}]
    assert _row(sync_conn, two.id)[0] == "HELD"
    # a task that is not held is not "released"
    again: Any = await (await admin_client.post_json("/held/release", {**body, "tasks": body["tasks"][:1]})).json()
    assert again["released"] == [] and again["refused"][0]["error"] in ("version_conflict", "invalid_state")


async def test_bad_selections_are_refused(admin_client: AdminClient) -> None:
    for tasks in (
        [],
        [{"task_id": "x", "version": 1}],
        [{"task_id": "6f1c2b8e-4a1d-4c7e-9b2a-1d3e5f7a9c0b", "version": True}],
        "all",
    ):
        resp = await admin_client.post_json("/held/release", {"confirm": "checked", "tasks": tasks})
        assert resp.status == 400, tasks
