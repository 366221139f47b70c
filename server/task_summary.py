"""``cmbuyer-server task show``'s text for a person: the task detail as labelled lines.

Input is :func:`cmbuyer.server.display.task_view.task_detail` — the same dict ``task show --json`` prints
unchanged — plus the devices' names by id. Labels are Chinese like the admin task page; every state keeps its
code in brackets so it can be searched for; times are Beijing time like the pages. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cmbuyer.schemas.sku import options_from_text, options_label
from cmbuyer.server.cli_text import TASK_STATES, coded
from cmbuyer.server.display.labels import (
    ATTEMPT_STATE_LABELS,
    AUTHORIZATION_STATE_LABELS,
    OBSERVATION_LABELS,
    SUBMISSION_STATE_LABELS,
    reason_label,
)
from cmbuyer.server.display.times import beijing_time

NONE = "-"


def _reason(code: str) -> str:
    """A state or close reason's label with its code (:func:`reason_label` looks in every reason table)."""
    text = reason_label(code)
    return f"{text} ({code})" if text != code else code


def _when(value: str | None) -> str:
    return f"{beijing_time(value)}（北京时间）" if value else NONE


def _sku(text: str) -> str:
    try:
        return options_label(options_from_text(text)) or NONE
    except ValueError:  # a stored text this reader cannot parse is shown as it is, never an error
        return text


def summary_lines(view: Mapping[str, Any], device_names: Mapping[str, str]) -> list[str]:
    """The lines of ``task show`` without ``--json``: 状态, 商品, 规格, 数量, 价格上限, 授权, 尝试 (one line
    each with its 手机), 手机, 订单号, 结果 and the times. ``device_names``: device id → name (an unknown id
    is shown as the id)."""
    task = view["task"]
    auth = view.get("authorization")
    attempts: list[Mapping[str, Any]] = view.get("attempts") or []
    sub = view.get("submission")

    def phone(device_id: str | None) -> str:
        return device_names.get(device_id, device_id) if device_id else NONE

    lines = [
        f"任务      {task['id']}",
        f"标题      {task['title']}",
        f"状态      {coded(TASK_STATES, task['state'])} · 版本 v{task['version']}",
    ]
    if task.get("state_reason"):
        lines.append(f"原因      {_reason(task['state_reason'])}")
    lines += [
        f"商品      {task['goods_id']} {task['product_url']}",
        f"规格      {_sku(task['sku_options'])}",
        f"数量      {task['quantity']}",
        f"价格上限  ¥{task['max_total_price']}",
    ]
    if auth:
        state = coded(AUTHORIZATION_STATE_LABELS, auth["state"])
        lines.append(f"授权      {state} · 锁定版本 v{auth['task_version']} · 有效期至 {_when(auth['expires_at'])}")
    else:
        lines.append(f"授权      {NONE}（草稿尚未开始采购）")
    lines.append(f"尝试      {len(attempts)} 次")
    for number, attempt in enumerate(attempts, 1):
        state = coded(ATTEMPT_STATE_LABELS, attempt["state"])
        closed = attempt.get("close_reason")
        end = f" · 结束原因 {_reason(closed)}" if closed else ""
        lines.append(f"  {number}. {_when(attempt['created_at'])} · 手机 {phone(attempt['device_id'])} · {state}{end}")
    last_device = sub["device_id"] if sub else attempts[-1]["device_id"] if attempts else None
    lines.append(f"手机      {phone(last_device)}")
    if sub:
        lines.append(f"订单号    {sub.get('order_sn') or '-（手机未读到）'}")
        observation = sub.get("observation")
        seen = coded(OBSERVATION_LABELS, observation) if observation else "尚未上报"
        state = coded(SUBMISSION_STATE_LABELS, sub["state"])
        lines.append(f"结果      {state} · 手机观察 {seen} · 提交记录 {sub['id']}")
    else:
        lines += [f"订单号    {NONE}", f"结果      {NONE}（尚未提交订单）"]
    lines += [
        f"创建      {_when(task['created_at'])} · {task['created_by']}",
        f"更新      {_when(task['updated_at'])}",
        "完整记录（事件、证据、审计）：task show --json，或管理页面的任务详情",
    ]
    return lines
