"""reset-to-draft, cancel, reconcile, mark-paid: every success and every 409 path (docs/state-machines.md)."""

from __future__ import annotations

from typing import Any

import pytest

from cmbuyer.schemas import validate
from cmbuyer.server.tx.common import new_id

from .conftest import AdminClient, FencedTask


def state(conn: Any, task_id: str) -> tuple[str, int]:
    return tuple(conn.execute("SELECT state, version FROM tasks WHERE id = ?", (task_id,)).fetchone())  # type: ignore


def auth_states(conn: Any, task_id: str) -> list[tuple[str, str | None]]:
    return [
        tuple(r)
        for r in conn.execute(
            "SELECT state, close_reason FROM authorizations WHERE task_id = ? ORDER BY created_at, id", (task_id,)
        )
    ]


async def conflict_code(resp: Any) -> str:
    assert resp.status == 409, resp.status
    body = await resp.json()
    validate("admin_error.response", body)
    return str(body["error"]["code"])


@pytest.mark.parametrize("where", ["PENDING", "CLAIMED", "ORDERING", "FAILED", "EXPIRED"])
async def test_reset_to_draft_closes_authorization_and_attempt(
    admin_client: AdminClient, make_task: Any, make_device: Any, seed: Any, sync_conn: Any, where: str
) -> None:
    task = make_task(start=True)
    auth_id = sync_conn.execute("SELECT id FROM authorizations WHERE task_id = ?", (task.id,)).fetchone()[0]
    attempt = None
    if where in ("CLAIMED", "ORDERING", "FAILED"):
        attempt = seed.claim(task.id, make_device().device_id, ordering=where == "ORDERING")
    if where == "FAILED":
        assert attempt is not None
        seed.fail(task.id, attempt)
    if where == "EXPIRED":
        sync_conn.execute("BEGIN IMMEDIATE")
        sync_conn.execute(
            "UPDATE authorizations SET state = 'EXPIRED', closed_at = ?, close_reason = 'EXPIRED' WHERE task_id = ?",
            ("2026-01-01T00:00:00.000000Z", task.id),
        )
        sync_conn.execute("UPDATE tasks SET state = 'EXPIRED', version = version + 1 WHERE id = ?", (task.id,))
        sync_conn.execute("COMMIT")
    current_state, version = state(sync_conn, task.id)
    assert current_state == where
    resp = await admin_client.post_json(
        f"/tasks/{task.id}/reset-to-draft", {"expected_task_version": version, "authorization_id": auth_id}
    )
    assert resp.status == 200, await resp.text()
    out = await resp.json()
    assert out["state"] == "DRAFT" and out["task_version"] == version + 1
    assert state(sync_conn, task.id) == ("DRAFT", version + 1)
    auth_state = auth_states(sync_conn, task.id)[0]
    assert auth_state[0] in ("CLOSED", "EXPIRED")
    if where in ("PENDING", "CLAIMED", "ORDERING"):
        assert auth_state == ("CLOSED", "RESET")
    if attempt is not None:
        row = sync_conn.execute("SELECT state, close_reason FROM attempts WHERE id = ?", (attempt,)).fetchone()
        assert row[0] == "CLOSED" and row[1] == ("FAILED" if where == "FAILED" else "RESET")
    audit = sync_conn.execute(
        "SELECT actor_kind, actor_id, action FROM audit_log WHERE action = 'task.reset_to_draft'"
    ).fetchone()
    assert tuple(audit) == ("admin", "ops", "task.reset_to_draft")
    # restarting produces a new authorization and version
    restart = await admin_client.post_json(
        "/tasks/start-purchases",
        {"start_key": new_id(), "tasks": [{"task_id": task.id, "expected_task_version": version + 1}]},
    )
    assert restart.status == 200
    assert len(auth_states(sync_conn, task.id)) == 2


async def test_cancel_from_draft_and_pending(admin_client: AdminClient, make_task: Any, sync_conn: Any) -> None:
    draft, pending = make_task(), make_task(start=True)
    resp = await admin_client.post_form(
        f"/tasks/{draft.id}/cancel", {"expected_task_version": "1", "return_to": "list"}
    )
    assert resp.status == 303 and resp.headers["Location"] == "/tasks?notice=cancelled"
    assert state(sync_conn, draft.id) == ("CANCELLED", 2)
    resp = await admin_client.post_form(f"/tasks/{pending.id}/cancel", {"expected_task_version": "2"})
    assert resp.status == 303 and resp.headers["Location"] == f"/tasks/{pending.id}?notice=cancelled"
    assert state(sync_conn, pending.id) == ("CANCELLED", 3)
    assert auth_states(sync_conn, pending.id) == [("CLOSED", "CANCELLED")]
    html = await (await admin_client.client.get(resp.headers["Location"])).text()
    assert "任务已取消" in html


@pytest.mark.parametrize("path", ["reset-to-draft", "cancel"])
@pytest.mark.parametrize("observation", [None, "SUBMITTED", "UNKNOWN"])
async def test_reset_and_cancel_after_fence_are_submission_fenced(
    admin_client: AdminClient,
    fenced_task: FencedTask,
    sync_conn: Any,
    path: str,
    observation: str | None,
) -> None:
    task, _ = fenced_task(observation=observation)
    before = state(sync_conn, task.id)
    resp = await admin_client.post_json(f"/tasks/{task.id}/{path}", {"expected_task_version": before[1]})
    assert await conflict_code(resp) == "submission_fenced"
    assert state(sync_conn, task.id) == before
    # also with a stale version: the fence is the reason given
    resp = await admin_client.post_json(f"/tasks/{task.id}/{path}", {"expected_task_version": 1})
    assert await conflict_code(resp) == "submission_fenced"
    # the form shows a clear message on the detail page
    resp = await admin_client.post_form(f"/tasks/{task.id}/{path}", {"expected_task_version": str(before[1])})
    assert resp.status == 409 and "提交围栏" in await resp.text()


async def test_version_and_authorization_conflicts(admin_client: AdminClient, make_task: Any, sync_conn: Any) -> None:
    task = make_task(start=True)
    for path in ("reset-to-draft", "cancel", "mark-paid"):
        resp = await admin_client.post_json(f"/tasks/{task.id}/{path}", {"expected_task_version": 1})
        assert await conflict_code(resp) == "version_conflict"
    resp = await admin_client.post_json(
        f"/tasks/{task.id}/reset-to-draft", {"expected_task_version": 2, "authorization_id": new_id()}
    )
    assert await conflict_code(resp) == "version_conflict"
    resp = await admin_client.post_form(f"/tasks/{task.id}/reset-to-draft", {"expected_task_version": "1"})
    assert resp.status == 409
    html = await resp.text()
    assert "任务已变化，请刷新后重试" in html and 'role="alert"' in html
    assert state(sync_conn, task.id) == ("PENDING", 2)


async def test_invalid_state_conflicts(admin_client: AdminClient, make_task: Any, sync_conn: Any) -> None:
    draft = make_task()
    resp = await admin_client.post_json(f"/tasks/{draft.id}/reset-to-draft", {"expected_task_version": 1})
    assert await conflict_code(resp) == "invalid_state"
    resp = await admin_client.post_json(f"/tasks/{draft.id}/mark-paid", {"expected_task_version": 1})
    assert await conflict_code(resp) == "invalid_state"
    await admin_client.post_json(f"/tasks/{draft.id}/cancel", {"expected_task_version": 1})
    resp = await admin_client.post_json(f"/tasks/{draft.id}/cancel", {"expected_task_version": 2})
    assert await conflict_code(resp) == "invalid_state"
    assert state(sync_conn, draft.id) == ("CANCELLED", 2)


async def test_action_input_errors(admin_client: AdminClient, make_task: Any) -> None:
    task = make_task()
    assert (await admin_client.post_json(f"/tasks/{new_id()}/cancel", {"expected_task_version": 1})).status == 404
    assert (await admin_client.post_json("/tasks/nope/cancel", {"expected_task_version": 1})).status == 404
    for bad in ({}, {"expected_task_version": "1"}, {"expected_task_version": 0}, {"expected_task_version": True}):
        assert (await admin_client.post_json(f"/tasks/{task.id}/cancel", bad)).status == 400
    resp = await admin_client.post_json(
        f"/tasks/{task.id}/cancel", {"expected_task_version": 1, "authorization_id": "x"}
    )
    assert resp.status == 400


@pytest.mark.parametrize(
    ("outcome", "task_state", "sub_state"),
    [("created", "WAITING_PAYMENT", "CREATED"), ("not_created", "CLOSED_NOT_CREATED", "NOT_CREATED")],
)
async def test_reconcile(
    admin_client: AdminClient,
    fenced_task: FencedTask,
    sync_conn: Any,
    outcome: str,
    task_state: str,
    sub_state: str,
) -> None:
    task, sid = fenced_task(observation="EXTERNAL_PAYMENT_HANDOFF")
    _, version = state(sync_conn, task.id)
    resp = await admin_client.post_form(
        f"/order-submissions/{sid}/reconcile",
        {"outcome": outcome, "note": "在待付款列表核对", "expected_task_version": str(version)},
    )
    assert resp.status == 303 and resp.headers["Location"] == f"/tasks/{task.id}?notice=reconciled"
    assert state(sync_conn, task.id) == (task_state, version + 1)
    row = sync_conn.execute("SELECT state, reconciled_by, reconciliation_note FROM order_submissions").fetchone()
    assert tuple(row) == (sub_state, "admin:ops", "在待付款列表核对")
    assert auth_states(sync_conn, task.id)[0][0] == "CONSUMED"
    # it never re-opens anything: no new authorization, no open attempt, fence row still there
    assert sync_conn.execute("SELECT count(*) FROM authorizations").fetchone()[0] == 1
    assert sync_conn.execute("SELECT count(*) FROM attempts WHERE state = 'OPEN'").fetchone()[0] == 0
    again = await admin_client.post_json(
        f"/order-submissions/{sid}/reconcile",
        {"outcome": outcome, "note": "again", "expected_task_version": version + 1},
    )
    assert await conflict_code(again) == "invalid_state"
    # and a reconciled task cannot be reset or restarted
    resp = await admin_client.post_json(f"/tasks/{task.id}/reset-to-draft", {"expected_task_version": version + 1})
    assert await conflict_code(resp) == "submission_fenced"


async def test_reconcile_while_fenced_closes_open_attempt(
    admin_client: AdminClient, fenced_task: FencedTask, sync_conn: Any
) -> None:
    """A submission that recovery moved to RECONCILIATION_REQUIRED while the attempt was still open."""
    task, sid = fenced_task()
    resp = await admin_client.post_json(
        f"/order-submissions/{sid}/reconcile",
        {"outcome": "created", "note": "n", "expected_task_version": state(sync_conn, task.id)[1]},
    )
    assert await conflict_code(resp) == "invalid_state"  # still FENCED: the device may report yet
    sync_conn.execute("BEGIN IMMEDIATE")
    sync_conn.execute("UPDATE order_submissions SET state = 'RECONCILIATION_REQUIRED' WHERE id = ?", (sid,))
    sync_conn.execute(
        "UPDATE tasks SET state = 'RECONCILIATION_REQUIRED', version = version + 1 WHERE id = ?", (task.id,)
    )
    sync_conn.execute("COMMIT")
    _, version = state(sync_conn, task.id)
    resp = await admin_client.post_json(
        f"/order-submissions/{sid}/reconcile", {"outcome": "not_created", "note": "n", "expected_task_version": version}
    )
    assert resp.status == 200
    assert auth_states(sync_conn, task.id) == [("CONSUMED", "RECONCILED")]
    assert tuple(sync_conn.execute("SELECT state, close_reason FROM attempts").fetchone()) == ("CLOSED", "RECONCILED")


async def test_reconcile_conflicts_and_errors(
    admin_client: AdminClient, fenced_task: FencedTask, sync_conn: Any
) -> None:
    task, sid = fenced_task(observation="UNKNOWN")
    _, version = state(sync_conn, task.id)
    stale = await admin_client.post_json(
        f"/order-submissions/{sid}/reconcile", {"outcome": "created", "note": "n", "expected_task_version": version - 1}
    )
    assert await conflict_code(stale) == "version_conflict"
    resp = await admin_client.post_form(
        f"/order-submissions/{sid}/reconcile",
        {"outcome": "created", "note": "n", "expected_task_version": str(version - 1)},
    )
    assert resp.status == 409 and "任务已变化" in await resp.text()
    for bad in (
        {"outcome": "retry", "note": "n", "expected_task_version": version},
        {"outcome": "created", "note": "", "expected_task_version": version},
        {"outcome": "created", "note": "x" * 501, "expected_task_version": version},
        {"outcome": "created", "note": "n"},
    ):
        assert (await admin_client.post_json(f"/order-submissions/{sid}/reconcile", bad)).status == 400
    missing = await admin_client.post_json(
        f"/order-submissions/{new_id()}/reconcile", {"outcome": "created", "note": "n", "expected_task_version": 1}
    )
    assert missing.status == 404
    assert state(sync_conn, task.id) == ("RECONCILIATION_REQUIRED", version)


async def test_mark_paid(admin_client: AdminClient, fenced_task: FencedTask, sync_conn: Any) -> None:
    task, _ = fenced_task(observation="SUBMITTED")
    _, version = state(sync_conn, task.id)
    html = await (await admin_client.client.get(f"/tasks/{task.id}")).text()
    assert "标记已付款" in html
    resp = await admin_client.post_form(f"/tasks/{task.id}/mark-paid", {"expected_task_version": str(version)})
    assert resp.status == 303
    assert state(sync_conn, task.id) == ("PAID", version + 1)
    again = await admin_client.post_json(f"/tasks/{task.id}/mark-paid", {"expected_task_version": version + 1})
    assert await conflict_code(again) == "invalid_state"
