"""The task drawer's supervision panel as people read it (docs/admin.md "Supervised first orders"): the
side-by-side table of what the task allows and what the phone read, one row per value the fence checks,
each marked by the fence's own rule (:class:`cmbuyer.server.domain.fence.GateReadings`), beside the
authoritative answer (:func:`cmbuyer.server.domain.fence.gate_refusal`, shown with its Chinese label).
The facts come from the read model :func:`cmbuyer.server.store.queries.supervision.task_panel`."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from cmbuyer.schemas.sku import options_from_text
from cmbuyer.server.config import Settings
from cmbuyer.server.domain.fence import GateReadings, gate_refusal
from cmbuyer.server.domain.rows import Snapshot
from cmbuyer.server.domain.sku_readings import reported_options
from cmbuyer.server.domain.supervision import parse_readings
from cmbuyer.server.store.queries import supervision as queries

UNREADABLE = "无法读取"


@dataclass(frozen=True)
class Row:
    """One line of the comparison: what the task allows, what the phone read, and whether it passes."""

    label: str
    task: str
    read: str
    ok: bool


def _yuan(value: Decimal | None) -> str:
    return UNREADABLE if value is None else f"¥{value:.2f}"


def option_rows(readings: dict[str, Any], sku_options: str) -> list[Row]:
    """One row per SKU dimension: each dimension the task names beside the value read for it
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


def compare(readings: dict[str, Any], auth: Snapshot, allowed_payment_modes: tuple[str, ...]) -> list[Row]:
    """The task's locked values (``auth``, the authorization snapshot) beside the readings, one row per
    value the fence checks; a value that is missing or malformed shows :data:`UNREADABLE` and fails."""
    cap = Decimal(auth.max_total_price)
    values = GateReadings.parse(readings)
    passes = values.passes(auth, allowed_payment_modes)
    gate1, gate2, gate3 = values.unit_prices
    rows = option_rows(readings, auth.sku_options)
    rows += [
        Row("闸门一单价", f"单价 × {auth.quantity} ≤ ¥{cap:.2f}", _yuan(gate1), passes.gate1),
        Row("闸门二单价", "与闸门一相同", _yuan(gate2), passes.gate2),
        Row("闸门三单价", "与闸门一相同", _yuan(gate3), passes.gate3),
        Row(
            "数量",
            str(auth.quantity),
            UNREADABLE if values.quantity is None else str(values.quantity),
            passes.quantity,
        ),
        Row(
            "总价（提交按钮）",
            f"≤ ¥{cap:.2f}，且不高于 单价 × 数量",
            _yuan(values.amount),
            passes.amount_within_cap and passes.amount_within_items,
        ),
        Row(
            "支付方式",
            "允许：" + "、".join(allowed_payment_modes),
            values.payment_mode or UNREADABLE,
            passes.payment_mode,
        ),
    ]
    return rows


def task_panel(conn: sqlite3.Connection, task_id: str, settings: Settings) -> dict[str, Any]:
    """What the task page/drawer shows for supervision: the read model's facts
    (:func:`~cmbuyer.server.store.queries.supervision.task_panel`: ``verdict_submission_id``,
    ``verdict_right_allowed``, ``verdict``, ``supervised_submission``, ``stamp``) with ``"approval"``:
    None | the live request's columns plus ``"rows": [Row], "mismatches": int, "gates": None | word,
    "readable": bool`` (the page shows ``gates`` with its Chinese label, ``display/labels.py``)."""
    facts = queries.task_panel(conn, task_id)
    live, auth = facts.pop("live"), facts.pop("authorization")
    if live is not None:
        readings = parse_readings(live["readings_json"])
        modes = settings.allowed_payment_modes
        rows = compare(readings, auth, modes) if auth is not None else []
        gates = gate_refusal(readings, auth, modes) if auth is not None else "unreadable"
        facts["approval"] = {
            **facts["approval"],
            "rows": rows,
            "mismatches": sum(not r.ok for r in rows),
            "gates": gates,
            "readable": gates != "unreadable",
        }
    return facts
