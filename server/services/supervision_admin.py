"""The admin side of supervised first orders (issue 17; docs/admin.md "Supervised first orders").

Use-cases, each one synchronous job inside one write transaction with its audit row:

- :func:`decide_approval` — a person approves or rejects what the phone read before the fence
  (``POST /approvals/{id}/approve|reject``). Only a WAITING request of a still OPEN attempt changes
  (WAITING → APPROVED/REJECTED through :func:`cmbuyer.server.domain.supervision.decide`); the same
  decision clicked twice is answered "already done" and changes nothing; anything else is a 409 with a
  Chinese message and changes nothing. Approving voids nothing else: the agent then asks the fence,
  which re-checks the readings hash.
- :func:`record_verdict` — after a supervised order, a person marks it right (the device–pack pair's
  ``confirmed_orders`` + 1) or wrong (the pair is held: the phone claims nothing for that pack). One
  verdict per submission.
- :func:`resupervise` — every pair of a device back to 0 confirmed, not held.

Read models for the pages: :func:`task_panel` (the drawer's side-by-side table, screenshot, buttons,
verdict) and :func:`device_states` (the devices page column). The side-by-side highlighting applies
the fence's own rule (:func:`cmbuyer.server.domain.fence.check_gates`) one value at a time for
display; the authoritative answer the page also shows is ``check_gates`` itself on the readings.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from cmbuyer.schemas import MONEY_RE, is_uuid4
from cmbuyer.schemas.sku import options_from_text
from cmbuyer.schemas.text import normalize_sku
from cmbuyer.server.clock import to_wire
from cmbuyer.server.config import Settings
from cmbuyer.server.domain import supervision as rules
from cmbuyer.server.domain import values
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import Conflict, DomainError, NotFound, ValidationFailed
from cmbuyer.server.domain.fence import FenceRefused, check_gates
from cmbuyer.server.domain.sku_readings import reported_options
from cmbuyer.server.domain.states import SubmissionState
from cmbuyer.server.store import authorizations as auth_store
from cmbuyer.server.store import supervision as supervision_store
from cmbuyer.server.store.authorizations import Authorization
from cmbuyer.server.store.queries import supervision as store
from cmbuyer.server.tx import audit as audit_tx
from cmbuyer.server.tx.common import Actor

NOTE_MAX = 500
DECISIONS = ("approve", "reject")
VERDICTS = {"right": "RIGHT", "wrong": "WRONG"}
# "right" counts an order towards N, so the order must exist (the result said so, or a person did);
# "wrong" can be said of any order whose tap happened — also one that turned out not created.
RIGHT_STATES = frozenset({SubmissionState.SUBMITTED, SubmissionState.CREATED})
WRONG_STATES = RIGHT_STATES | {SubmissionState.RECONCILIATION_REQUIRED, SubmissionState.NOT_CREATED}


def required_orders(settings: Settings) -> int:
    """``CMBUYER_SUPERVISED_ORDERS`` (N, an int ≥ 0; 0 = no device is supervised)."""
    return settings.supervised_orders


# -- the side-by-side table ------------------------------------------------------------------------------

UNREADABLE = "无法读取"


@dataclass(frozen=True)
class Row:
    """One line of the comparison: what the task allows, what the phone read, and whether it passes."""

    label: str
    task: str
    read: str
    ok: bool


def _money(raw: object) -> Decimal | None:
    return Decimal(raw) if isinstance(raw, str) and MONEY_RE.fullmatch(raw) else None


def _text(raw: object) -> str | None:
    return raw if isinstance(raw, str) and normalize_sku(raw).strip() else None


def _yuan(value: Decimal | None) -> str:
    return UNREADABLE if value is None else f"¥{value:.2f}"


def parse_readings(readings_json: str) -> dict[str, Any]:
    """The stored readings object; ``{}`` when it is not a JSON object (every value then shows as
    unreadable and approval is refused — fail closed)."""
    try:
        value = json.loads(readings_json)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def option_rows(readings: dict[str, Any], sku_options: str) -> list[Row]:
    """One row per SKU dimension (issue 34): each dimension the task names beside the value read for it
    (:data:`UNREADABLE` when the readings are malformed, "未读到" when the dimension was not read), then any
    dimension read that the task does not name (always failing)."""
    wanted = options_from_text(sku_options)
    read = reported_options(readings)
    if read is None:
        return [Row(d, v, UNREADABLE, False) for d, v in wanted]
    got = dict(read)
    rows = [Row(d, v, got.get(d, "未读到"), got.get(d) == v) for d, v in wanted]
    named = {d for d, _ in wanted}
    return rows + [Row(d, "任务未指定", v, False) for d, v in read if d not in named]


def compare(readings: dict[str, Any], auth: Authorization, allowed_payment_modes: tuple[str, ...]) -> list[Row]:
    """The task's locked values (``auth``, the authorization snapshot) beside the readings, one row per
    value the fence checks; a value that is missing or malformed shows :data:`UNREADABLE` and fails."""
    cap = Decimal(auth.max_total_price)
    gates = [_money(readings.get(k)) for k in ("gate1_unit_price", "gate2_unit_price", "gate3_unit_price")]
    quantity = readings.get("quantity_read")
    quantity = quantity if type(quantity) is int and quantity >= 1 else None
    amount = _money(readings.get("confirm_page_amount"))
    mode = _text(readings.get("payment_mode"))
    items = None if gates[0] is None else gates[0] * auth.quantity
    rows = option_rows(readings, auth.sku_options)
    rows += [
        Row("闸门一单价", f"单价 × {auth.quantity} ≤ ¥{cap:.2f}", _yuan(gates[0]), items is not None and items <= cap),
    ]
    for name, price in (("闸门二单价", gates[1]), ("闸门三单价", gates[2])):
        rows.append(Row(name, "与闸门一相同", _yuan(price), price is not None and price == gates[0]))
    rows += [
        Row("数量", str(auth.quantity), UNREADABLE if quantity is None else str(quantity), quantity == auth.quantity),
        Row(
            "总价（提交按钮）",
            f"≤ ¥{cap:.2f}，且不高于 单价 × 数量",
            _yuan(amount),
            amount is not None and items is not None and amount <= cap and amount <= items,
        ),
        Row(
            "支付方式",
            "允许：" + "、".join(allowed_payment_modes),
            mode or UNREADABLE,
            mode is not None and normalize_sku(mode).strip() in allowed_payment_modes,
        ),
    ]
    return rows


def gate_verdict(readings: dict[str, Any], auth: Authorization, allowed_payment_modes: tuple[str, ...]) -> str | None:
    """None when the fence's gates (``check_gates``) pass on these readings, else the refusal word
    (``unreadable`` when the readings are not the 8 well-formed values). The submit-control count is not
    part of the readings; it is checked by the fence itself, so 1 is assumed here."""
    try:
        canonical = rules.canonical_readings(readings)
    except DomainError:
        return "unreadable"
    try:
        check_gates({**canonical, "submit_control_match_count": 1}, auth, allowed_payment_modes)
    except FenceRefused as exc:
        return exc.detail
    return None


def task_panel(conn: sqlite3.Connection, task_id: str, settings: Settings) -> dict[str, Any]:
    """What the task page/drawer shows for supervision:

    ``{"approval": None | {"id", "state", "created_at", "attempt_id", "device_id", "pack_key",
    "screenshot_asset_id", "decided_by", "decided_at", "rows": [Row], "mismatches": int,
    "gates": None | word, "readable": bool}`` (the live request of the OPEN attempt; the page shows
    ``gates`` with its Chinese label, ``display/labels.py``),
    ``"verdict_submission_id": sid | None`` (a verdict can be given now),
    ``"verdict": None | row``, ``"supervised_submission": bool``, ``"stamp": str`` (changes whenever
    any of these does, for the live view)}.
    """
    live = store.live_approval_of_open_attempt(conn, task_id)
    panel: dict[str, Any] = {
        "approval": None,
        "verdict_submission_id": None,
        "verdict_right_allowed": False,
        "verdict": None,
        "supervised_submission": False,
    }
    if live is not None:
        auth = auth_store.get(conn, live["authorization_id"])
        readings = parse_readings(live["readings_json"])
        modes = settings.allowed_payment_modes
        rows = compare(readings, auth, modes) if auth is not None else []
        gates = gate_verdict(readings, auth, modes) if auth is not None else "unreadable"
        panel["approval"] = {
            **{
                k: live[k]
                for k in (
                    "id",
                    "state",
                    "created_at",
                    "attempt_id",
                    "device_id",
                    "pack_key",
                    "screenshot_asset_id",
                    "decided_by",
                    "decided_at",
                )
            },
            "rows": rows,
            "mismatches": sum(not r.ok for r in rows),
            "gates": gates,
            "readable": gates != "unreadable",
        }
    latest = store.latest_submission_for_task(conn, task_id)
    if latest is not None and latest["supervised"]:
        panel["supervised_submission"] = True
        panel["verdict"] = store.verdict(conn, latest["id"])
        if panel["verdict"] is None and SubmissionState(latest["state"]) in WRONG_STATES:
            panel["verdict_submission_id"] = latest["id"]
            panel["verdict_right_allowed"] = SubmissionState(latest["state"]) in RIGHT_STATES
    # the decision, a new request or a verdict changes the drawer (REJECTED/VOID leave the live slot empty)
    slot = f"{live['id']}:{live['state']}" if live else "-"
    panel["stamp"] = f"{slot}|{(panel['verdict'] or {}).get('verdict', '')}"
    return panel


# -- approve / reject ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """What an approve/reject did: the request, its task, its state now, and whether this call changed it
    (False: the same decision had already been recorded — a double click or a replayed form)."""

    approval_id: str
    task_id: str
    state: str
    changed: bool


_STATE_WORDS = {"APPROVED": "已批准", "REJECTED": "已驳回", "VOID": "已作废"}


def _not_waiting(row: dict[str, Any]) -> rules.ApprovalNotWaiting:
    if row["state"] == rules.ApprovalState.VOID:
        why = "设备重新读取了页面或这次尝试已结束，请求已作废"
    else:
        who = row["decided_by"] or "-"
        why = f"已由 {who} {_STATE_WORDS[row['state']]}"
    return rules.ApprovalNotWaiting(f"这个确认请求{why}；未做任何更改。")


def decide_approval(
    conn: sqlite3.Connection, approval_id: str, action: str, actor: Actor, now: datetime, request_id: str | None = None
) -> Decision:
    """``POST /approvals/{id}/approve|reject``. Order of checks (nothing is written on any refusal):
    unknown/malformed id → NotFound; the same decision already recorded → ``Decision(changed=False)``;
    not WAITING → 409 ``approval_not_waiting``; its attempt no longer OPEN → 409 ``attempt_closed``;
    approve with readings that are not the 8 well-formed values → 409 ``readings_unreadable`` (fail
    closed; rejecting stays possible). Then WAITING → APPROVED/REJECTED (``rules.decide``), audit row
    ``approval.approve`` / ``approval.reject`` on the task with the approval, attempt, device and pack."""
    if action not in DECISIONS:
        raise ValidationFailed("action", "未知操作")
    row = store.approval(conn, approval_id) if is_uuid4(approval_id) else None
    if row is None:
        raise NotFound("确认请求不存在")
    target = rules.ApprovalState.APPROVED if action == "approve" else rules.ApprovalState.REJECTED
    if row["state"] == target:
        return Decision(row["id"], row["task_id"], row["state"], changed=False)
    if row["state"] != rules.ApprovalState.WAITING:
        raise _not_waiting(row)
    if row["attempt_state"] != "OPEN":
        raise Conflict("这次尝试已结束，确认请求不再有效；未做任何更改。", code=Code.ATTEMPT_CLOSED)
    if action == "approve":
        try:
            rules.canonical_readings(parse_readings(row["readings_json"]))
        except DomainError:
            raise Conflict(
                "手机读取的数值不完整或无法识别，不能批准，只能驳回。", code=Code.READINGS_UNREADABLE
            ) from None
    new_state = rules.decide(rules.ApprovalState(row["state"]), "approve" if action == "approve" else "reject")
    at = to_wire(now)
    who = f"{actor.kind}:{actor.id}"
    if not supervision_store.set_state(
        conn,
        row["id"],
        expected_state=row["state"],
        new_state=new_state.value,
        decided_by=who,
        decided_at=at,
        while_attempt_open=True,
    ):
        raise Conflict("确认请求刚刚发生了变化，请刷新后再看；未做任何更改。", code=Code.APPROVAL_NOT_WAITING)
    audit_tx.record(
        conn,
        actor,
        AUDIT_DECISION[action],
        "task",
        row["task_id"],
        at=at,
        request_id=request_id,
        detail={
            "approval_id": row["id"],
            "attempt_id": row["attempt_id"],
            "device_id": row["device_id"],
            "pack_key": row["pack_key"],
            "from": row["state"],
            "to": new_state.value,
            "readings_hash": row["readings_hash"],
        },
    )
    return Decision(row["id"], row["task_id"], new_state.value, changed=True)


AUDIT_DECISION = {"approve": "approval.approve", "reject": "approval.reject"}
AUDIT_VERDICT = "supervision.verdict"
AUDIT_RESUPERVISE = "supervision.resupervise"


# -- the verdict on a supervised order --------------------------------------------------------------------


@dataclass(frozen=True)
class VerdictResult:
    """The recorded verdict and the pair it counted on (``confirmed_orders`` / ``held`` after it)."""

    submission_id: str
    task_id: str
    verdict: str
    device_id: str
    pack_key: str
    confirmed_orders: int
    held: bool


def parse_verdict(raw: dict[str, Any]) -> tuple[str, str | None]:
    """``{"verdict": "right"|"wrong", "note": optional str ≤ 500}`` → ``("RIGHT"|"WRONG", note or None)``.
    Raises ValidationFailed naming the field."""
    verdict = raw.get("verdict")
    if verdict not in VERDICTS:
        raise ValidationFailed("verdict", "请选择“核对无误”或“有误”")
    note = raw.get("note")
    if note is not None and not isinstance(note, str):
        raise ValidationFailed("note", "说明格式错误")
    note = (note or "").strip() or None
    if note is not None:
        if len(note) > NOTE_MAX:
            raise ValidationFailed("note", f"说明最多 {NOTE_MAX} 字")
        values.check_text("note", "说明", note, multiline=True)
    return VERDICTS[str(verdict)], note


def record_verdict(
    conn: sqlite3.Connection,
    submission_id: str,
    verdict: str,
    note: str | None,
    actor: Actor,
    now: datetime,
    request_id: str | None = None,
    *,
    state_label: Callable[[str], str] = str,
) -> VerdictResult:
    """``POST /order-submissions/{sid}/supervision-verdict``. Refusals (nothing written): unknown →
    NotFound; the attempt was not supervised → 409 ``not_supervised``; a verdict exists → 409
    ``verdict_exists``; the submission's state does not allow it (:data:`RIGHT_STATES` for RIGHT — the
    order must exist —, :data:`WRONG_STATES` for WRONG) → 409 ``invalid_state``. Then the verdict row and
    the pair of the attempt's ``(device_id, pack_key)``: RIGHT → ``confirmed_orders`` + 1, WRONG → held
    with a reason naming the submission and the note; audit ``supervision.verdict`` on the task.
    A ``verdict`` other than ``"RIGHT"``/``"WRONG"`` → ValidationFailed("verdict"), nothing read or
    written (callers other than the admin route — CLI, scripts — must not turn a typo into a hold).
    ``state_label`` names a submission state in the ``invalid_state`` message (the admin route passes the
    Chinese label of ``display/labels.py``; the default shows the code)."""
    if verdict not in VERDICTS.values():
        raise ValidationFailed("verdict", "请选择“核对无误”或“有误”")
    sub = store.submission_for_verdict(conn, submission_id) if is_uuid4(submission_id) else None
    if sub is None:
        raise NotFound("提交记录不存在")
    if not sub["supervised"] or not sub["pack_key"]:
        raise Conflict("这笔订单不在人工监督中，无需核对结论。", code=Code.NOT_SUPERVISED)
    existing = store.verdict(conn, sub["id"])
    if existing is not None:
        word = "核对无误" if existing["verdict"] == "RIGHT" else "有误"
        raise Conflict(
            f"这笔订单已由 {existing['admin_id']} 记录为“{word}”，不能再次记录；未做任何更改。",
            code=Code.VERDICT_EXISTS,
        )
    allowed = RIGHT_STATES if verdict == "RIGHT" else WRONG_STATES
    if SubmissionState(sub["state"]) not in allowed:
        label = state_label(sub["state"])
        raise Conflict(f"提交状态为“{label}”，现在不能记录这个结论；未做任何更改。", code=Code.INVALID_STATE)
    at = to_wire(now)
    if not supervision_store.insert_verdict(
        conn,
        submission_id=sub["id"],
        device_id=sub["device_id"],
        pack_key=sub["pack_key"],
        verdict=verdict,
        admin_id=actor.id,
        note=note,
        at=at,
    ):
        raise Conflict("这笔订单刚刚被记录了结论，请刷新；未做任何更改。", code=Code.VERDICT_EXISTS)
    if verdict == "RIGHT":
        supervision_store.count_confirmed(conn, sub["device_id"], sub["pack_key"], at)
    else:
        reason = f"订单有误（提交 {sub['id'][:8]}，{actor.id}）" + (f"：{note}" if note else "")
        supervision_store.hold(conn, sub["device_id"], sub["pack_key"], reason, at)
    pair = store.pair(conn, sub["device_id"], sub["pack_key"]) or {}
    result = VerdictResult(
        sub["id"],
        sub["task_id"],
        verdict,
        sub["device_id"],
        sub["pack_key"],
        int(pair.get("confirmed_orders", 0)),
        bool(pair.get("held", 0)),
    )
    audit_tx.record(
        conn,
        actor,
        AUDIT_VERDICT,
        "task",
        sub["task_id"],
        at=at,
        request_id=request_id,
        detail={
            "submission_id": sub["id"],
            "verdict": verdict,
            "device_id": sub["device_id"],
            "pack_key": sub["pack_key"],
            "confirmed_orders": result.confirmed_orders,
            "held": result.held,
            "note": note,
        },
    )
    return result


# -- resupervise ------------------------------------------------------------------------------------------


def resupervise(
    conn: sqlite3.Connection, device_id: str, actor: Actor, now: datetime, request_id: str | None = None
) -> int:
    """``POST /devices/{id}/resupervise``: every pair of the device → 0 confirmed, not held, so its next
    orders are supervised again (e.g. after the phone was set up anew). Returns the number of pairs
    reset; audit ``supervision.resupervise`` on the device with the pairs as they were. NotFound for an
    unknown device."""
    if not is_uuid4(device_id) or not store.device_exists(conn, device_id):
        raise NotFound("设备不存在")
    at = to_wire(now)
    before = supervision_store.reset_pairs(conn, device_id, at)
    audit_tx.record(
        conn,
        actor,
        AUDIT_RESUPERVISE,
        "device",
        device_id,
        at=at,
        request_id=request_id,
        detail={
            "pairs": len(before),
            "before": ", ".join(
                f"{p['pack_key']}={p['confirmed_orders']}{'/held' if p['held'] else ''}" for p in before
            ),
        },
    )
    return len(before)


# -- the devices page --------------------------------------------------------------------------------------


def device_states(conn: sqlite3.Connection, required: int) -> dict[str, dict[str, Any]]:
    """Per device id: ``{"required": N, "off": N == 0, "exempt": the device's audited exemption
    (``devices.supervision_off``, CLI ``cmbuyer-server device supervision DEVICE off``), "pack_key": current
    key or None (no heartbeat yet), "confirmed": x for the current key, "done": x >= N, "held": [pairs on
    hold, any key], "pairs": count, "waiting": bool (its OPEN attempt waits for a person)}``. The current
    key follows the claim-time rule (:func:`rules.pack_key_for` with no claim pack id: the heartbeat's pack
    id, else the app version)."""
    pairs: dict[str, list[dict[str, Any]]] = {}
    for p in store.all_pairs(conn):
        pairs.setdefault(p["device_id"], []).append(p)
    waiting = store.waiting_device_ids(conn)
    out: dict[str, dict[str, Any]] = {}
    for d in store.devices_for_supervision(conn):
        try:
            key: str | None = rules.pack_key_for(None, d["pack_id"], d["pdd_version"], d["pdd_version_code"])
        except ValueError:
            key = None
        mine = pairs.get(d["id"], [])
        current = next((p for p in mine if p["pack_key"] == key), None)
        confirmed = int(current["confirmed_orders"]) if current else 0
        out[d["id"]] = {
            "required": required,
            "off": required == 0,
            "exempt": bool(d["supervision_off"]),
            "pack_key": key,
            "confirmed": confirmed,
            "done": confirmed >= required,
            "held": [p for p in mine if p["held"]],
            "pairs": len(mine),
            "waiting": d["id"] in waiting,
        }
    return out


def waiting_tasks(conn: sqlite3.Connection, task_ids: list[str]) -> dict[str, str]:
    """The tasks among ``task_ids`` whose OPEN attempt waits for a person (the list badge), each with the time
    the phone gives up waiting (its countdown, issue 32 §8)."""
    return store.waiting_task_ids(conn, task_ids)


def waiting_summary(conn: sqlite3.Connection) -> tuple[int, str | None]:
    """(orders waiting for a person now, the earliest time one of them gives up) — the task table's count."""
    return store.waiting_summary(conn)
