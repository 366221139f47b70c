"""Read-only SQL behind the task lists: counts per state (the task table's header), the
columns an export adds to the task rows, the pay list, and the devices a start confirmation counts.

``state_counts`` is one ``GROUP BY state`` over the ``tasks_state_created`` index (a covering scan of
the index, never the table); bench/admin_pages.py measures it at 100,000 tasks.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from cmbuyer.server.store._sql import marks
from cmbuyer.server.store.queries.admin import TASK_COLUMNS


def state_counts(conn: sqlite3.Connection) -> dict[str, int]:
    """``{state: number of tasks}`` for every state that has a task."""
    return {
        r[0]: r[1]
        for r in conn.execute("SELECT state, count(*) FROM tasks INDEXED BY tasks_state_created GROUP BY state")
    }


def export_details(conn: sqlite3.Connection, task_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``{task_id: {device_name, order_sn, fenced_at, result_at, amount}}`` from each task's newest order
    submission, else (no fence yet) the device of its newest attempt with the other values None."""
    out: dict[str, dict[str, Any]] = {}
    for start in range(0, len(task_ids), 500):
        chunk = task_ids[start : start + 500]
        for r in conn.execute(
            "SELECT a.task_id, d.name AS device_name FROM attempts a JOIN devices d ON d.id = a.device_id"
            f" WHERE a.task_id IN ({marks(chunk)}) ORDER BY a.created_at, a.id",
            chunk,
        ):
            out[r["task_id"]] = {
                "device_name": r["device_name"],
                "order_sn": None,
                "fenced_at": None,
                "result_at": None,
                "amount": None,
            }
        for r in conn.execute(
            "SELECT s.task_id, d.name AS device_name, s.order_sn, s.created_at AS fenced_at, s.result_at,"
            " s.confirm_page_amount AS amount FROM order_submissions s JOIN devices d ON d.id = s.device_id"
            f" WHERE s.task_id IN ({marks(chunk)}) ORDER BY s.created_at, s.id",
            chunk,
        ):
            out[r["task_id"]] = {k: r[k] for k in ("device_name", "order_sn", "fenced_at", "result_at", "amount")}
    return out


def pay_list(conn: sqlite3.Connection, waiting_state: str) -> list[dict[str, Any]]:
    """Every task in ``waiting_state`` (WAITING_PAYMENT) with the order its newest submission created:
    device id and name, order number, amount read on the phone, fence time; ordered by device name, then
    the order's age (oldest first) — the order a person walks the phones in."""
    rows = conn.execute(
        "SELECT t.id, t.title, t.goods_id, t.sku_options, t.quantity, t.max_total_price, t.version,"
        " t.updated_at, s.id AS submission_id, s.device_id, d.name AS device_name, s.order_sn,"
        " s.confirm_page_amount AS amount, s.created_at AS fenced_at, s.result_at"
        " FROM tasks t JOIN order_submissions s ON s.id = ("
        "   SELECT s2.id FROM order_submissions s2 WHERE s2.task_id = t.id ORDER BY s2.created_at DESC, s2.id DESC"
        "   LIMIT 1)"
        " JOIN devices d ON d.id = s.device_id"
        " WHERE t.state = ? ORDER BY d.name, d.id, s.created_at, t.id",
        (waiting_state,),
    )
    return [dict(r) for r in rows]


def devices_for_start(conn: sqlite3.Connection, active_state: str) -> list[dict[str, Any]]:
    """Every device in ``active_state`` with its latest heartbeat facts (last heartbeat time, reported
    state, app version) — what the start confirmation asks the claim gate about."""
    rows = conn.execute(
        "SELECT id, name, last_heartbeat_at, reported_state, pdd_version FROM devices WHERE state = ?",
        (active_state,),
    )
    return [dict(r) for r in rows]


def tasks_by_id(conn: sqlite3.Connection, task_ids: list[str]) -> list[dict[str, Any]]:
    """The task table's columns (``store.queries.admin`` list columns) of the given tasks, newest first."""
    out: list[dict[str, Any]] = []
    for start in range(0, len(task_ids), 500):
        chunk = task_ids[start : start + 500]
        out.extend(
            dict(r) for r in conn.execute(f"SELECT {TASK_COLUMNS} FROM tasks t WHERE t.id IN ({marks(chunk)})", chunk)
        )
    out.sort(key=lambda r: (r["created_at"], r["id"]), reverse=True)
    return out
