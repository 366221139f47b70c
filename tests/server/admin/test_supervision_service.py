"""services/supervision_admin.py, its read models (store/queries/supervision.py) and the drawer's table
(web/admin/supervision_view.py) on a real SQLite file (admin side):
the side-by-side comparison, approve/reject (only WAITING + OPEN attempt, replay-safe, audited), the
verdict (right counts, wrong holds, one per submission), resupervise, and the devices-page states.
Every refusal is checked to change nothing (a fingerprint of the tables these use-cases write)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from cmbuyer.server.db import run_in_transaction
from cmbuyer.server.display.labels import refusal_message
from cmbuyer.server.domain.errors import Conflict, DomainError, NotFound, ValidationFailed
from cmbuyer.server.domain.fence import gate_refusal
from cmbuyer.server.domain.supervision import ApprovalNotWaiting, parse_readings
from cmbuyer.server.services import devices as device_service
from cmbuyer.server.services import supervision_admin as service
from cmbuyer.server.store import authorizations as auth_store
from cmbuyer.server.store.queries import supervision as queries
from cmbuyer.server.tx.common import Actor, new_id
from cmbuyer.server.web.admin import supervision_view as view

from .seed_supervision import (
    PACK_KEY,
    approval,
    pair,
    readings,
    set_pair,
    supervised_claim,
    supervised_orders,  # noqa: F401  (fixture: N = 3)
)

OPS = Actor("admin", "ops")


def fingerprint(conn: sqlite3.Connection) -> list[Any]:
    """Everything the admin supervision use-cases may write."""
    return [
        conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
        for table in ("approval_requests", "supervision_pairs", "supervision_verdicts", "attempts", "audit_log")
    ]


def tx(conn: sqlite3.Connection, fn: Any) -> Any:
    return run_in_transaction(conn, fn)


@pytest.fixture
def waiting(make_task: Any, make_device: Any, seed: Any) -> dict[str, Any]:
    """A started task claimed under supervision whose phone waits for a person."""
    task = make_task(start=True)
    device = make_device("采购机 A")
    attempt = supervised_claim(seed, task.id, device.device_id)
    approval_id, asset = approval(seed, task.id, attempt, device.device_id)
    return {"task": task, "device": device.device_id, "attempt": attempt, "approval": approval_id, "asset": asset}


# -- the side-by-side table --------------------------------------------------------------------------------


def _auth(conn: sqlite3.Connection, task_id: str) -> Any:
    return auth_store.latest_for_task(conn, task_id)


def test_matching_readings_pass_every_row_and_the_fence_gates(
    waiting: dict[str, Any], sync_conn: Any, settings: Any
) -> None:
    auth = _auth(sync_conn, waiting["task"].id)
    rows = view.compare(readings(), auth, settings.allowed_payment_modes)
    assert [r.label for r in rows] == [
        "颜色",
        "尺码",
        "闸门一单价",
        "闸门二单价",
        "闸门三单价",
        "数量",
        "总价（提交按钮）",
        "支付方式",
    ]
    assert all(r.ok for r in rows), rows
    assert [r.read for r in rows] == [
        "黑色CHA(纯棉)",
        "M(建议100-115)",
        "¥12.88",
        "¥12.88",
        "¥12.88",
        "2",
        "¥25.76",
        "微信支付",
    ]
    assert rows[0].task == "黑色CHA(纯棉)" and rows[5].task == "2" and "¥30.00" in rows[6].task
    assert gate_refusal(readings(), auth, settings.allowed_payment_modes) is None


@pytest.mark.parametrize(
    ("over", "bad", "gate"),
    [
        ({"selected_options": [["颜色", "白色"], ["尺码", "M(建议100-115)"]]}, {"颜色"}, "sku_mismatch"),
        ({"selected_options": [["颜色", "黑色CHA(纯棉)"]]}, {"尺码"}, "sku_mismatch"),  # a dimension not read
        (  # a dimension read that the task does not name: its own failing row
            {"selected_options": [["颜色", "黑色CHA(纯棉)"], ["尺码", "M(建议100-115)"], ["款式", "短袖"]]},
            {"款式"},
            "sku_mismatch",
        ),
        ({"quantity_read": 3}, {"数量"}, "quantity_mismatch"),
        ({"gate3_unit_price": "13.88"}, {"闸门三单价"}, "unit_price_changed"),
        (
            {"gate1_unit_price": "15.01", "gate2_unit_price": "15.01", "gate3_unit_price": "15.01"},
            {"闸门一单价"},
            "total_over_cap",
        ),
        ({"confirm_page_amount": "26.76"}, {"总价（提交按钮）"}, "total_above_items"),
        ({"payment_mode": "先用后付"}, {"支付方式"}, "payment_mode_not_allowed"),
        ({"confirm_page_amount": "25.00"}, set(), None),  # a discount passes (fence rule)
    ],
)
def test_mismatches_are_flagged_row_by_row_like_the_fence(
    waiting: dict[str, Any], sync_conn: Any, settings: Any, over: dict[str, Any], bad: set[str], gate: str | None
) -> None:
    auth = _auth(sync_conn, waiting["task"].id)
    values = readings(**over)
    rows = view.compare(values, auth, settings.allowed_payment_modes)
    assert {r.label for r in rows if not r.ok} == bad
    assert gate_refusal(values, auth, settings.allowed_payment_modes) == gate


def test_unreadable_readings_fail_closed(waiting: dict[str, Any], sync_conn: Any, settings: Any) -> None:
    auth = _auth(sync_conn, waiting["task"].id)
    for raw in ("not json", "[1, 2]", json.dumps({"selected_color": 5})):
        values = parse_readings(raw)
        rows = view.compare(values, auth, settings.allowed_payment_modes)
        assert all(not r.ok for r in rows) and all(r.read == view.UNREADABLE for r in rows), raw
        assert gate_refusal(values, auth, settings.allowed_payment_modes) == "unreadable"


def test_task_panel_shows_the_waiting_request_then_the_approval(
    waiting: dict[str, Any], sync_conn: Any, settings: Any, clock: Any
) -> None:
    panel = tx(sync_conn, lambda c: view.task_panel(c, waiting["task"].id, settings))
    ap = panel["approval"]
    assert ap["id"] == waiting["approval"] and ap["state"] == "WAITING" and ap["readable"] and ap["gates"] is None
    assert ap["screenshot_asset_id"] == waiting["asset"] and ap["pack_key"] == PACK_KEY and ap["mismatches"] == 0
    before = panel["stamp"]
    tx(sync_conn, lambda c: service.decide_approval(c, waiting["approval"], "approve", OPS, clock.now()))
    panel = tx(sync_conn, lambda c: view.task_panel(c, waiting["task"].id, settings))
    assert panel["approval"]["state"] == "APPROVED" and panel["approval"]["decided_by"] == "admin:ops"
    assert panel["stamp"] != before  # the live view notices the decision
    assert tx(sync_conn, lambda c: queries.waiting_task_ids(c, [waiting["task"].id])) == {}


# -- approve / reject ---------------------------------------------------------------------------------------


def test_approve_records_who_and_audits_once(waiting: dict[str, Any], sync_conn: Any, clock: Any) -> None:
    assert set(tx(sync_conn, lambda c: queries.waiting_task_ids(c, [waiting["task"].id]))) == {waiting["task"].id}
    d = tx(sync_conn, lambda c: service.decide_approval(c, waiting["approval"], "approve", OPS, clock.now(), "rid-1"))
    assert (d.state, d.changed, d.task_id) == ("APPROVED", True, waiting["task"].id)
    row = sync_conn.execute(
        "SELECT state, decided_by, decided_at FROM approval_requests WHERE id = ?", (waiting["approval"],)
    ).fetchone()
    assert row["state"] == "APPROVED" and row["decided_by"] == "admin:ops" and row["decided_at"]
    audits = sync_conn.execute("SELECT * FROM audit_log WHERE action LIKE 'approval.%'").fetchall()
    assert len(audits) == 1
    a = audits[0]
    assert (a["actor_kind"], a["actor_id"], a["subject_kind"], a["subject_id"], a["request_id"]) == (
        "admin",
        "ops",
        "task",
        waiting["task"].id,
        "rid-1",
    )
    detail = json.loads(a["detail_json"])
    assert detail["approval_id"] == waiting["approval"] and detail["attempt_id"] == waiting["attempt"]
    assert detail["from"] == "WAITING" and detail["to"] == "APPROVED" and detail["pack_key"] == PACK_KEY
    # a double click / replayed form: answered "already", nothing written
    snap = fingerprint(sync_conn)
    again = tx(sync_conn, lambda c: service.decide_approval(c, waiting["approval"], "approve", OPS, clock.now()))
    assert (again.state, again.changed) == ("APPROVED", False)
    assert fingerprint(sync_conn) == snap
    # the other decision after the fact: refused, nothing written
    with pytest.raises(ApprovalNotWaiting) as exc:
        tx(sync_conn, lambda c: service.decide_approval(c, waiting["approval"], "reject", OPS, clock.now()))
    assert (
        exc.value.status == 409
        and exc.value.code == "approval_not_waiting"
        and "已由 admin:ops 已批准" in refusal_message(exc.value)
    )
    assert fingerprint(sync_conn) == snap


def test_reject(waiting: dict[str, Any], sync_conn: Any, clock: Any) -> None:
    d = tx(sync_conn, lambda c: service.decide_approval(c, waiting["approval"], "reject", OPS, clock.now()))
    assert (d.state, d.changed) == ("REJECTED", True)
    assert (
        sync_conn.execute("SELECT action FROM audit_log WHERE action LIKE 'approval.%'").fetchall()[0][0]
        == "approval.reject"
    )
    # the attempt itself is left to the phone (it fails with REJECTED_BY_REVIEWER before the fence)
    assert sync_conn.execute("SELECT state FROM attempts WHERE id = ?", (waiting["attempt"],)).fetchone()[0] == "OPEN"


@pytest.mark.parametrize("action", ["approve", "reject"])
def test_a_void_request_changes_nothing(waiting: dict[str, Any], sync_conn: Any, clock: Any, action: str) -> None:
    tx(
        sync_conn,
        lambda c: c.execute("UPDATE approval_requests SET state = 'VOID' WHERE id = ?", (waiting["approval"],)),
    )
    snap = fingerprint(sync_conn)
    with pytest.raises(ApprovalNotWaiting) as exc:
        tx(sync_conn, lambda c: service.decide_approval(c, waiting["approval"], action, OPS, clock.now()))
    assert "已作废" in refusal_message(exc.value)
    assert fingerprint(sync_conn) == snap


@pytest.mark.parametrize("action", ["approve", "reject"])
def test_a_closed_attempt_changes_nothing(
    waiting: dict[str, Any], sync_conn: Any, clock: Any, seed: Any, action: str
) -> None:
    seed.fail(waiting["task"].id, waiting["attempt"])  # the request was left WAITING (not voided): still refused
    snap = fingerprint(sync_conn)
    with pytest.raises(Conflict) as exc:
        tx(sync_conn, lambda c: service.decide_approval(c, waiting["approval"], action, OPS, clock.now()))
    assert exc.value.code == "attempt_closed" and "尝试已结束" in refusal_message(exc.value)
    assert fingerprint(sync_conn) == snap


def test_unreadable_readings_can_be_rejected_but_not_approved(
    make_task: Any, make_device: Any, seed: Any, sync_conn: Any, clock: Any
) -> None:
    task = make_task(start=True)
    device = make_device().device_id
    attempt = supervised_claim(seed, task.id, device)
    approval_id, _ = approval(seed, task.id, attempt, device, raw_readings='{"selected_color": 1}')
    snap = fingerprint(sync_conn)
    with pytest.raises(Conflict) as exc:
        tx(sync_conn, lambda c: service.decide_approval(c, approval_id, "approve", OPS, clock.now()))
    assert exc.value.code == "readings_unreadable"
    assert fingerprint(sync_conn) == snap
    assert tx(sync_conn, lambda c: service.decide_approval(c, approval_id, "reject", OPS, clock.now())).changed


def test_unknown_or_malformed_approval_ids(sync_conn: Any, clock: Any) -> None:
    for bad in (new_id(), "not-a-uuid", "'; DROP TABLE approval_requests; --"):
        with pytest.raises(NotFound):
            tx(sync_conn, lambda c, bad=bad: service.decide_approval(c, bad, "approve", OPS, clock.now()))
    with pytest.raises(ValidationFailed):
        tx(sync_conn, lambda c: service.decide_approval(c, new_id(), "void", OPS, clock.now()))


# -- verdicts ------------------------------------------------------------------------------------------------


def _supervised_order(
    make_task: Any, seed: Any, device: str, *, observation: str | None = "SUBMITTED", supervised: bool = True
) -> tuple[str, str]:
    task = make_task(start=True)
    attempt = supervised_claim(seed, task.id, device) if supervised else seed.claim(task.id, device, ordering=True)
    return task.id, seed.fence(task.id, attempt, device, observation=observation)


def test_right_verdicts_count_towards_n(
    make_task: Any, make_device: Any, seed: Any, sync_conn: Any, clock: Any, settings: Any
) -> None:
    device = make_device().device_id
    task_id, sid = _supervised_order(make_task, seed, device)
    panel = tx(sync_conn, lambda c: view.task_panel(c, task_id, settings))
    assert panel["supervised_submission"] and panel["verdict_submission_id"] == sid and panel["verdict_right_allowed"]
    r = tx(sync_conn, lambda c: service.record_verdict(c, sid, "RIGHT", None, OPS, clock.now(), "rid-v"))
    assert (r.verdict, r.confirmed_orders, r.held, r.pack_key) == ("RIGHT", 1, False, PACK_KEY)
    assert tuple(pair(seed, device)) == (1, 0, None)
    _, sid2 = _supervised_order(make_task, seed, device)
    second = tx(sync_conn, lambda c: service.record_verdict(c, sid2, "RIGHT", "看过了", OPS, clock.now()))
    assert second.confirmed_orders == 2
    v = sync_conn.execute("SELECT * FROM supervision_verdicts WHERE submission_id = ?", (sid2,)).fetchone()
    assert (v["verdict"], v["admin_id"], v["note"], v["device_id"], v["pack_key"]) == (
        "RIGHT",
        "ops",
        "看过了",
        device,
        PACK_KEY,
    )
    a = sync_conn.execute("SELECT * FROM audit_log WHERE action = 'supervision.verdict' ORDER BY id").fetchall()
    assert len(a) == 2 and a[0]["subject_id"] == task_id and a[0]["request_id"] == "rid-v"
    assert json.loads(a[1]["detail_json"])["confirmed_orders"] == 2
    panel = tx(sync_conn, lambda c: view.task_panel(c, task_id, settings))
    assert panel["verdict"]["verdict"] == "RIGHT" and panel["verdict_submission_id"] is None


def test_wrong_holds_the_pair_and_one_verdict_per_submission(
    make_task: Any, make_device: Any, seed: Any, sync_conn: Any, clock: Any
) -> None:
    device = make_device().device_id
    set_pair(seed, device, 2)
    _, sid = _supervised_order(make_task, seed, device)
    r = tx(sync_conn, lambda c: service.record_verdict(c, sid, "WRONG", "颜色选错了", OPS, clock.now()))
    assert (r.held, r.confirmed_orders) == (True, 2)
    row = pair(seed, device)
    assert row["held"] == 1 and "颜色选错了" in row["held_reason"] and sid[:8] in row["held_reason"]
    snap = fingerprint(sync_conn)
    for verdict in ("RIGHT", "WRONG"):
        with pytest.raises(Conflict) as exc:
            tx(sync_conn, lambda c, v=verdict: service.record_verdict(c, sid, v, None, OPS, clock.now()))
        assert exc.value.code == "verdict_exists" and "有误" in refusal_message(exc.value)
    assert fingerprint(sync_conn) == snap


def test_verdict_refusals_change_nothing(
    make_task: Any, make_device: Any, seed: Any, sync_conn: Any, clock: Any, settings: Any
) -> None:
    device = make_device().device_id
    task_plain, plain = _supervised_order(make_task, seed, device, supervised=False)
    _, unknown = _supervised_order(make_task, seed, device, observation="UNKNOWN")  # → RECONCILIATION_REQUIRED
    task_fenced, fenced = _supervised_order(make_task, seed, device, observation=None)  # no result yet
    snap = fingerprint(sync_conn)
    cases = [
        (plain, "RIGHT", "not_supervised"),
        (fenced, "RIGHT", "invalid_state"),
        (fenced, "WRONG", "invalid_state"),
        (unknown, "RIGHT", "invalid_state"),
    ]
    for sid, verdict, code in cases:
        with pytest.raises(DomainError) as exc:
            tx(sync_conn, lambda c, s=sid, v=verdict: service.record_verdict(c, s, v, None, OPS, clock.now()))
        assert exc.value.code == code, (sid, verdict)
    with pytest.raises(NotFound):
        tx(sync_conn, lambda c: service.record_verdict(c, new_id(), "RIGHT", None, OPS, clock.now()))
    assert fingerprint(sync_conn) == snap
    assert not tx(sync_conn, lambda c: view.task_panel(c, task_plain, settings))["supervised_submission"]
    fenced_panel = tx(sync_conn, lambda c: view.task_panel(c, task_fenced, settings))
    assert fenced_panel["supervised_submission"] and fenced_panel["verdict_submission_id"] is None
    # an order whose outcome is uncertain can still be called wrong
    assert tx(sync_conn, lambda c: service.record_verdict(c, unknown, "WRONG", None, OPS, clock.now())).held


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"verdict": "RIGHT"}, "verdict"),
        ({"verdict": None}, "verdict"),
        ({}, "verdict"),
        ({"verdict": "wrong", "note": 5}, "note"),
        ({"verdict": "wrong", "note": "x" * 501}, "note"),
        ({"verdict": "wrong", "note": "ok\u202e"}, "note"),
    ],
)
def test_parse_verdict_refusals(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationFailed) as exc:
        service.parse_verdict(raw)
    assert exc.value.field == field


def test_parse_verdict() -> None:
    assert service.parse_verdict({"verdict": "right", "note": "  "}) == ("RIGHT", None)
    assert service.parse_verdict({"verdict": "wrong", "note": " 少了一件\n "}) == ("WRONG", "少了一件")


# -- resupervise and the devices page ------------------------------------------------------------------------


def test_resupervise_resets_every_pair_of_the_device_only(
    make_device: Any, seed: Any, sync_conn: Any, clock: Any
) -> None:
    device, other = make_device("a").device_id, make_device("b").device_id
    set_pair(seed, device, 3)
    set_pair(seed, device, 1, pack_key="app:8.22.0:82200", held_reason="订单有误")
    set_pair(seed, other, 2, held_reason="别的设备")
    assert tx(sync_conn, lambda c: service.resupervise(c, device, OPS, clock.now(), "rid-r")) == 2
    assert tuple(pair(seed, device)) == (0, 0, None)
    assert tuple(pair(seed, device, "app:8.22.0:82200")) == (0, 0, None)
    assert tuple(pair(seed, other)) == (2, 1, "别的设备")
    a = sync_conn.execute("SELECT * FROM audit_log WHERE action = 'supervision.resupervise'").fetchone()
    assert (a["subject_kind"], a["subject_id"], a["actor_id"], a["request_id"]) == ("device", device, "ops", "rid-r")
    assert json.loads(a["detail_json"])["pairs"] == 2 and "订单有误" not in a["detail_json"]
    snap = fingerprint(sync_conn)
    with pytest.raises(NotFound):
        tx(sync_conn, lambda c: service.resupervise(c, new_id(), OPS, clock.now()))
    assert fingerprint(sync_conn) == snap


def test_device_states(make_task: Any, make_device: Any, seed: Any, sync_conn: Any, clock: Any) -> None:
    pack, app, silent = (make_device(n).device_id for n in ("pack", "app", "silent"))
    tx(
        sync_conn,
        lambda c: c.execute(
            "UPDATE devices SET pack_id = ?, pdd_version = '8.22.0', pdd_version_code = 82200 WHERE id = ?",
            (PACK_KEY, pack),
        ),
    )
    tx(
        sync_conn,
        lambda c: c.execute(
            "UPDATE devices SET pack_id = 'NO_PACK', pdd_version = '8.22.0', pdd_version_code = 82200 WHERE id = ?",
            (app,),
        ),
    )
    set_pair(seed, pack, 2)
    set_pair(seed, pack, 0, pack_key="old-pack", held_reason="订单有误（旧包）")
    task = make_task(start=True)
    attempt = supervised_claim(seed, task.id, pack)
    approval(seed, task.id, attempt, pack)
    states = tx(sync_conn, lambda c: queries.device_states(c, 3))
    s = states[pack]
    assert (s["pack_key"], s["confirmed"], s["done"], s["off"], s["waiting"]) == (PACK_KEY, 2, False, False, True)
    assert [p["pack_key"] for p in s["held"]] == ["old-pack"]
    assert (states[app]["pack_key"], states[app]["confirmed"], states[app]["waiting"]) == ("app:8.22.0:82200", 0, False)
    assert states[silent]["pack_key"] is None
    assert tx(sync_conn, lambda c: queries.device_states(c, 2))[pack]["done"]
    assert tx(sync_conn, lambda c: queries.device_states(c, 0))[pack]["off"]
    assert not states[pack]["exempt"]
    tx(sync_conn, lambda c: device_service.set_supervision(c, app, off=True, actor=OPS, now=clock.now()))
    assert tx(sync_conn, lambda c: queries.device_states(c, 3))[app]["exempt"]


def test_required_orders_defaults_to_the_contract_value(settings: Any) -> None:
    assert settings.supervised_orders == 3  # device_states(conn, settings.supervised_orders)


def test_audit_actions_and_gate_refusals_have_chinese_labels() -> None:
    import inspect
    import re

    from cmbuyer.server.display import labels
    from cmbuyer.server.domain.fence import check_gates

    for action in (*service.AUDIT_DECISION.values(), service.AUDIT_VERDICT, service.AUDIT_RESUPERVISE):
        assert action in labels.AUDIT_ACTION_LABELS, action
    words = set(re.findall(r'FenceRefused\("([a-z_]+)"\)', inspect.getsource(check_gates)))
    assert "unit_price_changed" in words
    assert words | {"unreadable"} <= set(labels.FENCE_REFUSAL_LABELS)
