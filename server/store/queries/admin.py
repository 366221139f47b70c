"""Read-only SQL behind the admin pages: the task table (filters, keyword search, keyset paging),
the devices page, and the lookups of the reconcile / evidence routes.

Every list query is index-driven so ``GET /tasks`` stays fast at 100,000 tasks:

* no keyword: ``tasks_created`` / ``tasks_state_created`` give rows already in (created_at, id) order;
* keyword that is a task UUID: primary key; all digits: ``tasks_goods`` (exact goods id) plus the
  trigram index; 3+ characters also match an order number exactly (``order_submissions_order_sn``,
  migration 0008); 3+ characters: the FTS5 trigram table ``task_search`` (migration 0003);
* 1–2 character keywords cannot use a trigram index, so they are checked only against the newest
  :data:`SHORT_KEYWORD_WINDOW` rows that pass the other filters — a bounded scan, never the whole
  table; the page tells the operator so.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from cmbuyer.server.store._sql import marks, one_dict

SHORT_KEYWORD_WINDOW = 5000
TASK_COLUMNS = (
    "t.id, t.title, t.goods_id, t.sku_options, t.quantity, t.max_total_price, t.state,"
    " t.version, t.created_at, t.updated_at, t.state_reason"
)


@dataclass(frozen=True)
class TaskFilter:
    """Filters of the task table. Times are canonical UTC text; ``before``/``after`` are keyset cursors
    ``(created_at, id)`` of the last/first row of the neighbouring page."""

    states: tuple[str, ...] = ()
    keyword: str = ""
    keyword_kind: str = ""  # "" | "id" | "digits" | "text" | "short"
    waiting_approval: bool = False  # only tasks whose open attempt waits for a person's 批准
    phone: str = ""  # only tasks a device of this exact name has claimed
    created_from: str | None = None
    created_to: str | None = None
    before: tuple[str, str] | None = None
    after: tuple[str, str] | None = None


def task_page(conn: sqlite3.Connection, f: TaskFilter, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` task rows (dicts of the list columns), newest first.

    With ``f.after`` set the page *before* the cursor in display order is returned (still newest
    first), which is how "上一页" works with keyset pagination.
    """
    where: list[str] = []
    args: list[object] = []
    if len(f.states) == 1:
        where.append("t.state = ?")
        args.append(f.states[0])
    elif f.states:
        # Several states: the unary + keeps SQLite on the (created_at, id) index, which yields rows in
        # page order and stops after `limit` matches, instead of sorting every row of those states.
        where.append(f"+t.state IN ({','.join('?' * len(f.states))})")
        args.extend(f.states)
    if f.created_from:
        where.append("t.created_at >= ?")
        args.append(f.created_from)
    if f.created_to:
        where.append("t.created_at < ?")
        args.append(f.created_to)
    if f.phone:
        # one pass over attempts (no index leads with device_id; the devices page links here, not every search)
        where.append(
            "t.id IN (SELECT a.task_id FROM attempts a WHERE a.device_id IN (SELECT id FROM devices WHERE name = ?))"
        )
        args.append(f.phone)
    if f.waiting_approval:
        where.append(
            "t.id IN (SELECT r.task_id FROM approval_requests r JOIN attempts a ON a.id = r.attempt_id"
            " WHERE r.state = 'WAITING' AND a.state = 'OPEN')"
        )
    if f.keyword_kind == "id":
        where.append("t.id = ?")
        args.append(f.keyword)
    elif f.keyword_kind == "digits":
        if len(f.keyword) >= 3:
            where.append(
                "t.id IN (SELECT id FROM tasks WHERE goods_id = ?"
                " UNION SELECT task_id FROM task_search WHERE task_search MATCH ?"
                " UNION SELECT task_id FROM order_submissions WHERE order_sn = ?)"
            )
            args.extend([f.keyword, fts_phrase(f.keyword), f.keyword])
        else:
            where.append("t.goods_id = ?")
            args.append(f.keyword)
    elif f.keyword_kind == "text":
        where.append(
            "t.id IN (SELECT task_id FROM task_search WHERE task_search MATCH ?"
            " UNION SELECT task_id FROM order_submissions WHERE order_sn = ?)"
        )
        args.extend([fts_phrase(f.keyword), f.keyword])
    if f.after is not None:
        where.append("(t.created_at, t.id) > (?, ?)")
        args.extend(f.after)
        order = "ASC"
    else:
        if f.before is not None:
            where.append("(t.created_at, t.id) < (?, ?)")
            args.extend(f.before)
        order = "DESC"
    where_sql = (" WHERE " + " AND ".join(where)) if where else ""
    if f.keyword_kind == "short":
        # Bounded window: newest SHORT_KEYWORD_WINDOW rows of the other filters, then the substring test.
        sql = (
            f"SELECT * FROM (SELECT {TASK_COLUMNS} FROM tasks t{where_sql}"
            f" ORDER BY t.created_at {order}, t.id {order} LIMIT ?)"
            " WHERE instr(title, ?) > 0 OR instr(sku_options, ?) > 0"
            f" ORDER BY created_at {order}, id {order} LIMIT ?"
        )
        args.extend([SHORT_KEYWORD_WINDOW, f.keyword, f.keyword, limit])
    else:
        sql = f"SELECT {TASK_COLUMNS} FROM tasks t{where_sql} ORDER BY t.created_at {order}, t.id {order} LIMIT ?"
        args.append(limit)
    rows = [dict(r) for r in conn.execute(sql, args)]
    if f.after is not None:
        rows.reverse()
    return rows


def fts_phrase(keyword: str) -> str:
    """``keyword`` as one FTS5 phrase (double quotes doubled), so no FTS query syntax gets through."""
    return '"' + keyword.replace('"', '""') + '"'


def _by_task(conn: sqlite3.Connection, sql: str, task_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``{task_id: row}`` of ``sql`` for ``task_ids`` (``{marks}`` in ``sql`` takes their ``IN`` list); the
    rows are keyed by their ``task_id`` column, so ``sql`` yields at most one row per task."""
    if not task_ids:
        return {}
    return {r["task_id"]: dict(r) for r in conn.execute(sql.format(marks=marks(task_ids)), task_ids)}


def latest_events(conn: sqlite3.Connection, task_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``{task_id: {step, outcome, reason_code, occurred_at}}`` of each task's newest event (index ``events_task``)."""
    return _by_task(
        conn,
        "SELECT e.task_id, e.step, e.outcome, e.reason_code, e.occurred_at FROM events e"
        " WHERE e.id IN (SELECT max(id) FROM events WHERE task_id IN ({marks}) GROUP BY task_id)",
        task_ids,
    )


def open_attempts(conn: sqlite3.Connection, task_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``{task_id: {device_id, device_name, lease_expires_at}}`` for tasks with an OPEN attempt."""
    return _by_task(
        conn,
        "SELECT a.task_id, a.device_id, d.name AS device_name, a.lease_expires_at FROM attempts a"
        " JOIN devices d ON d.id = a.device_id WHERE a.state = 'OPEN' AND a.task_id IN ({marks})",
        task_ids,
    )


def devices_with_claims(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every device (no token hash) with its OPEN attempt, if any, newest device last."""
    rows = conn.execute(
        "SELECT d.id, d.name, d.state, d.created_at, d.revoked_at, d.last_heartbeat_at, d.client_version,"
        " d.adb_serial, d.android_release, d.pdd_version, d.pdd_version_code, d.reported_state,"
        " d.app_version_allowed, d.pack_id, d.paused_at, d.paused_by, d.min_claim_interval_seconds,"
        " d.max_claims_per_day, d.last_claim_at, d.claims_day, d.claims_on_day,"
        " a.id AS attempt_id, a.task_id AS claim_task_id,"
        " a.lease_expires_at AS claim_lease_expires_at, t.title AS claim_task_title"
        " FROM devices d LEFT JOIN attempts a ON a.device_id = d.id AND a.state = 'OPEN'"
        " LEFT JOIN tasks t ON t.id = a.task_id ORDER BY d.created_at, d.id"
    )
    return [dict(r) for r in rows]


def device_holds(conn: sqlite3.Connection) -> dict[str, dict[str, Any]]:
    """Per device with a reported hold or a pending screen request: the hold's code, line,
    since when (``hold_seen_at``), a pending release, the task the held attempt was for and that attempt's
    newest FAILURE screenshot (index ``evidence_task``), and the pending screen request."""
    rows = conn.execute(
        "SELECT d.id, d.hold_code, d.hold_reason, d.hold_attempt_id, d.hold_seen_at, d.hold_release_at,"
        " d.hold_release_by, d.hold_release_note, d.screen_request_id, d.screen_requested_at,"
        " a.task_id AS hold_task_id, t.title AS hold_task_title,"
        " (SELECT e.id FROM evidence_assets e WHERE e.task_id = a.task_id AND e.attempt_id = a.id"
        "  AND e.kind = 'FAILURE' ORDER BY e.created_at DESC LIMIT 1) AS hold_screenshot_id"
        " FROM devices d LEFT JOIN attempts a ON a.id = d.hold_attempt_id LEFT JOIN tasks t ON t.id = a.task_id"
        " WHERE d.hold_seen_at IS NOT NULL OR d.screen_request_id IS NOT NULL"
    )
    return {r["id"]: dict(r) for r in rows}


def device_day_counts(conn: sqlite3.Connection, since: str) -> dict[str, dict[str, int]]:
    """Per device, what happened since ``since`` (wire time, the start of the day): ``claimed`` (new attempts),
    ``failed`` (of those, closed FAILED before the fence), ``created`` (orders fenced since then and reported
    or settled as created) and ``reconciliation`` (fenced since then and waiting for a person). Devices with
    nothing are absent. Two grouped scans (attempts, order_submissions), each one pass over its table."""
    counts: dict[str, dict[str, int]] = {}

    def add(device_id: str, **values: int) -> None:
        counts.setdefault(device_id, {"claimed": 0, "failed": 0, "created": 0, "reconciliation": 0}).update(values)

    for r in conn.execute(
        "SELECT device_id, COUNT(*), SUM(close_reason = 'FAILED') FROM attempts WHERE created_at >= ?"
        " GROUP BY device_id",
        (since,),
    ):
        add(r[0], claimed=r[1], failed=r[2] or 0)
    for r in conn.execute(
        "SELECT device_id, SUM(state IN ('SUBMITTED', 'CREATED')), SUM(state = 'RECONCILIATION_REQUIRED')"
        " FROM order_submissions WHERE created_at >= ? GROUP BY device_id",
        (since,),
    ):
        add(r[0], created=r[1] or 0, reconciliation=r[2] or 0)
    return counts


def device_names(conn: sqlite3.Connection, device_ids: list[str]) -> dict[str, str]:
    """``{device_id: name}`` for the given ids."""
    if not device_ids:
        return {}
    return {
        r[0]: r[1] for r in conn.execute(f"SELECT id, name FROM devices WHERE id IN ({marks(device_ids)})", device_ids)
    }


def submission(conn: sqlite3.Connection, submission_id: str) -> dict[str, Any] | None:
    """One order submission row as a dict, or None."""
    return one_dict(conn, "SELECT * FROM order_submissions WHERE id = ?", (submission_id,))


def submission_exists_for_task(conn: sqlite3.Connection, task_id: str) -> bool:
    """True once any order submission (fence row) exists for the task (index ``order_submissions_task``)."""
    return conn.execute("SELECT 1 FROM order_submissions WHERE task_id = ? LIMIT 1", (task_id,)).fetchone() is not None


def evidence_file_ref(conn: sqlite3.Connection, asset_id: str) -> tuple[str, int] | None:
    """``(sha256, byte_size)`` of a PNG evidence asset, or None."""
    r = conn.execute(
        "SELECT sha256, byte_size FROM evidence_assets WHERE id = ? AND mime = 'image/png'", (asset_id,)
    ).fetchone()
    return None if r is None else (r[0], r[1])
