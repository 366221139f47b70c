"""The task export (the admin page's download and ``cmbuyer-server task export``): the header and one line
per task, with Chinese labels beside the codes and times in Beijing time (docs/admin.md "Export")."""

from __future__ import annotations

import sqlite3
from typing import Any

from cmbuyer.schemas.sku import options_from_text, options_label
from cmbuyer.server.display.labels import TASK_STATE_LABELS, reason_label
from cmbuyer.server.display.times import beijing_time
from cmbuyer.server.domain.states import TaskState
from cmbuyer.server.store.queries import task_lists

EXPORT_MAX_ROWS = 100_000
EXPORT_HEADER = (
    "任务 id",
    "标题",
    "商品 id",
    "规格选项",
    "数量",
    "最高总价",
    "状态",
    "状态代码",
    "设备",
    "订单编号",
    "围栏时间（北京）",
    "结果时间（北京）",
    "最后原因",
)


def sku_label(text: str) -> str:
    """A stored ``sku_options`` text as people read it in a file: ``颜色分类=黑色 / 尺码=M``."""
    return options_label(options_from_text(text))


def export_rows(conn: sqlite3.Connection, rows: list[dict[str, Any]]) -> list[list[Any]]:
    """The export lines (:data:`EXPORT_HEADER` order) of task list rows: Chinese state label and code,
    device, order number, fence/result times in Beijing time, last reason (label)."""
    details = task_lists.export_details(conn, [r["id"] for r in rows])
    out: list[list[Any]] = []
    for r in rows:
        d = details.get(r["id"], {})
        state = r["state"]
        out.append(
            [
                r["id"],
                r["title"],
                r["goods_id"],
                sku_label(r["sku_options"]),
                r["quantity"],
                r["max_total_price"],
                TASK_STATE_LABELS[TaskState(state)] if state in TaskState.__members__ else state,
                state,
                d.get("device_name") or "",
                d.get("order_sn") or "",
                beijing_time(d.get("fenced_at")),
                beijing_time(d.get("result_at")),
                reason_label(r.get("state_reason")) if r.get("state_reason") else "",
            ]
        )
    return out
