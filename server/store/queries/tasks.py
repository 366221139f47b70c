"""Read model of the task list of ``cmbuyer-server task list`` (the admin table has its own, index-driven
query in ``queries/admin.py``)."""

from __future__ import annotations

import sqlite3

from cmbuyer.server.store.tasks import Task, from_row


def page(
    conn: sqlite3.Connection,
    *,
    states: list[str] | None = None,
    keyword: str | None = None,
    created_from: str | None = None,
    created_to: str | None = None,
    before: tuple[str, str] | None = None,
    limit: int = 50,
) -> list[Task]:
    """A page of tasks, newest first, keyset-paginated on ``(created_at, id)`` (index-backed).

    ``keyword`` matches the goods id exactly or a title substring; ``before`` is the last row of the
    previous page.
    """
    where: list[str] = []
    args: list[object] = []
    if states:
        where.append(f"state IN ({','.join('?' * len(states))})")
        args.extend(states)
    if keyword:
        where.append("(goods_id = ? OR instr(title, ?) > 0 OR id = ?)")
        args.extend([keyword, keyword, keyword])
    if created_from:
        where.append("created_at >= ?")
        args.append(created_from)
    if created_to:
        where.append("created_at < ?")
        args.append(created_to)
    if before:
        where.append("(created_at, id) < (?, ?)")
        args.extend(before)
    sql = "SELECT * FROM tasks"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY created_at DESC, id DESC LIMIT ?"
    args.append(limit)
    return [from_row(r) for r in conn.execute(sql, args)]
