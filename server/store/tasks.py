"""SQL for tasks. Version checks are part of each UPDATE (compare-and-set on ``version``); the state
changes only through :func:`set_state`."""

from __future__ import annotations

import sqlite3
from collections.abc import Collection
from dataclasses import dataclass

from cmbuyer.server.domain.states import TASK_TRANSITIONS, StateChanges
from cmbuyer.server.store._sql import StateTable, compare_and_set, marks


@dataclass(frozen=True)
class Task:
    """A task row. ``max_total_price`` is canonical decimal text; times are canonical UTC text."""

    id: str
    create_key: str
    create_hash: str
    title: str
    product_url: str
    goods_id: str
    sku_options: str  # canonical JSON of [[dimension, value], ...] (migration 0011, cmbuyer.schemas.sku)
    quantity: int
    max_total_price: str
    state: str
    version: int
    state_reason: str | None
    created_by: str
    created_at: str
    updated_at: str


_TABLE = StateTable("tasks", Task, StateChanges("task", TASK_TRANSITIONS))


def from_row(r: sqlite3.Row) -> Task:
    """A ``tasks`` row (``SELECT *``) as a :class:`Task`."""
    return _TABLE.row(r)


def insert(conn: sqlite3.Connection, task: Task) -> None:
    """Insert a new task row (state DRAFT, version 1 by the caller)."""
    _TABLE.insert(conn, task)


get = _TABLE.get  # one task by id, or None


def by_create_key(conn: sqlite3.Connection, create_key: str) -> Task | None:
    """The task created with ``create_key``, or None."""
    return _TABLE.first(conn, "create_key = ?", (create_key,))


def set_state(
    conn: sqlite3.Connection,
    task_id: str,
    *,
    expected_version: int,
    expected_state: str,
    new_state: str,
    at: str,
    reason: str | None = None,
) -> bool:
    """CAS: move the task to ``new_state`` and bump the version when both version and state still match.

    Returns False (nothing written) when another writer got there first. Raises
    :class:`~cmbuyer.server.domain.states.StateChangeNotAllowed` (nothing written) when no use-case of
    ``TASK_TRANSITIONS`` moves ``expected_state`` to ``new_state``.
    """
    return compare_and_set(
        conn,
        _TABLE,
        task_id,
        expected_state=expected_state,
        new_state=new_state,
        # the WHERE holds the version at expected_version, so this is version + 1
        stamps={"version": expected_version + 1, "state_reason": reason, "updated_at": at},
        where="version = ?",
        where_params=(expected_version,),
    )


def in_states(conn: sqlite3.Connection, states: Collection[str]) -> list[Task]:
    """Every task whose state is one of ``states``, oldest first (``created_at, id``)."""
    wanted = list(states)
    rows = conn.execute(f"SELECT * FROM tasks WHERE state IN ({marks(wanted)}) ORDER BY created_at, id", wanted)
    return [from_row(r) for r in rows]


def live_with_goods(conn: sqlite3.Connection, goods_ids: list[str], cancelled: str) -> list[Task]:
    """Every task not in state ``cancelled`` whose goods id is one of ``goods_ids`` (index ``tasks_goods``) —
    the candidates a spreadsheet row may repeat. ``cancelled`` is the state's name, passed in so
    no state is an SQL literal."""
    out: list[Task] = []
    unique = sorted(set(goods_ids))
    for start in range(0, len(unique), 500):  # bounded IN lists
        chunk = unique[start : start + 500]
        out.extend(
            from_row(r)
            for r in conn.execute(
                f"SELECT * FROM tasks WHERE goods_id IN ({marks(chunk)}) AND state != ?", (*chunk, cancelled)
            )
        )
    return out


def update_draft_fields(
    conn: sqlite3.Connection,
    task_id: str,
    *,
    expected_version: int,
    draft_state: str,
    values: dict[str, object],
    at: str,
) -> bool:
    """CAS: overwrite the editable fields of a draft (``values``: title, product_url, goods_id, sku_options,
    quantity, max_total_price) and bump the version, when the task is still ``draft_state`` at
    ``expected_version``. The state does not change. Returns False (nothing written) otherwise."""
    allowed = ("title", "product_url", "goods_id", "sku_options", "quantity", "max_total_price")
    if set(values) != set(allowed):
        raise ValueError("update_draft_fields needs exactly the editable fields")
    sets = ", ".join(f"{name} = ?" for name in allowed)
    cur = conn.execute(
        f"UPDATE tasks SET {sets}, version = version + 1, updated_at = ? WHERE id = ? AND version = ? AND state = ?",
        (*(values[name] for name in allowed), at, task_id, expected_version, draft_state),
    )
    return cur.rowcount == 1
