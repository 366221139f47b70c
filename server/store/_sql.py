"""Statement helpers the store modules share: a dataclass stored as one row (:class:`Table`, and
:class:`StateTable` for a row with a lifecycle ``state``), the "one row or None" lookup (:func:`one`,
:func:`one_dict`), the ``IN (?, …)`` list (:func:`marks`) and the one compare-and-set state write
(:func:`compare_and_set`).

Private to ``server/store/``: the modules call these inside the caller's transaction, like their own SQL.
``compare_and_set`` is the only function that writes a ``state`` column, and only a module's ``set_state``
calls it (tests/server/store/test_state_literals.py reads the source and fails otherwise).
"""

from __future__ import annotations

import dataclasses
import operator
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from cmbuyer.server.domain.states import StateChanges

T = TypeVar("T")


class Table(Generic[T]):
    """A frozen dataclass kept as one row of ``name``: one column per field, named and ordered as the
    fields (at least two; the table may have more columns). ``columns`` is the field list for a ``SELECT``;
    :meth:`row` builds the dataclass from a ``sqlite3.Row`` by column name; :meth:`insert` writes one,
    :meth:`first` reads the first row matching a condition and :meth:`get` the one with an ``id``."""

    def __init__(self, name: str, cls: type[T]) -> None:
        self.name = name
        self.fields: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
        if len(self.fields) < 2:
            raise ValueError("a table row has at least two fields")  # attrgetter returns a tuple only then
        self.columns = ", ".join(self.fields)
        self._make: Callable[..., T] = cls
        self._insert = f"INSERT INTO {name} ({self.columns}) VALUES ({', '.join('?' * len(self.fields))})"
        self._select = f"SELECT * FROM {name} WHERE "
        self._values = operator.attrgetter(*self.fields)  # the row tuple in column order, built in C

    def row(self, r: sqlite3.Row) -> T:
        """The dataclass of a row that has every field as a column (``SELECT *`` or ``SELECT columns``)."""
        return self._make(*(r[k] for k in self.fields))

    def insert(self, conn: sqlite3.Connection, item: T) -> None:
        """Insert ``item`` as a new row; constraint failures raise ``sqlite3.IntegrityError``."""
        conn.execute(self._insert, self._values(item))

    def first(self, conn: sqlite3.Connection, condition: str, params: Sequence[object]) -> T | None:
        """The first row of ``SELECT * FROM <name> WHERE <condition>`` (the fields read by name, so a table
        with more columns still reads), or None when there is none. ``condition`` is the store module's own
        SQL text after ``WHERE`` (it may end in ``ORDER BY … LIMIT 1``); values go in ``params``."""
        return one(conn, self._select + condition, params, self.row)

    def get(self, conn: sqlite3.Connection, row_id: str) -> T | None:
        """The row whose ``id`` is ``row_id`` (the primary key), or None when there is none."""
        return self.first(conn, "id = ?", (row_id,))


class StateTable(Table[T]):
    """A :class:`Table` whose rows have a lifecycle ``state`` column, moved only by :func:`compare_and_set`
    along ``changes`` (the ``(from, to)`` pairs of the row kind's transition table)."""

    def __init__(self, name: str, cls: type[T], changes: StateChanges) -> None:
        super().__init__(name, cls)
        self.changes = changes


def one(conn: sqlite3.Connection, sql: str, params: Sequence[object], make: Callable[[sqlite3.Row], T]) -> T | None:
    """The first row of ``sql`` built by ``make``, or None when there is none."""
    r = conn.execute(sql, params).fetchone()
    return None if r is None else make(r)


def _as_dict(r: sqlite3.Row) -> dict[str, Any]:
    return dict(r)


def one_dict(conn: sqlite3.Connection, sql: str, params: Sequence[object]) -> dict[str, Any] | None:
    """The first row of ``sql`` as a plain dict of its columns (the read models' shape), or None."""
    return one(conn, sql, params, _as_dict)


def marks(values: Sequence[object]) -> str:
    """``?,?,…`` — one bound parameter per value, for ``IN (…)`` (the caller returns early on no values)."""
    return ",".join("?" * len(values))


def compare_and_set(
    conn: sqlite3.Connection,
    table: StateTable[Any],
    row_id: str,
    *,
    expected_state: str,
    new_state: str,
    stamps: Mapping[str, object] | None = None,
    given: Mapping[str, object] | None = None,
    where: str = "",
    where_params: Sequence[object] = (),
) -> bool:
    """The one state write of the store: an UPDATE of row ``row_id`` of ``table`` that sets the state to
    ``new_state`` only while it is ``expected_state`` — both bound parameters, never literals.

    ``stamps`` are the module's extra columns, ``{column: value}``, each written as ``column = ?``;
    ``given`` columns are written only when their value is not None and keep what they hold otherwise
    (``column = coalesce(?, column)``). Naming each column beside its value keeps the assignment list and
    its parameters from drifting apart. ``where`` is the module's extra condition (a version or a joined
    row; ``where_params``). Returns True when the row changed, False when it was not in ``expected_state``
    or ``where`` did not hold (another writer got there first; nothing written).

    Raises :class:`~cmbuyer.server.domain.states.StateChangeNotAllowed` (nothing written) when no use-case
    of ``table.changes`` moves ``expected_state`` to ``new_state`` (docs/state-machines.md), and
    ``ValueError`` (nothing written) for a stamp that is not a column of ``table`` or is ``id``/``state``,
    or a column named in both ``stamps`` and ``given``.
    """
    table.changes.check(expected_state, new_state)  # refuse before any SQL runs
    stamps, given = stamps or {}, given or {}
    for column in (*stamps, *given):
        # the names go into the SQL text: only the table's own columns, and never the state a second time
        if column not in table.fields or column in ("id", "state"):
            raise ValueError(f"{table.name}: {column!r} is not a column a state change may stamp")
    if both := stamps.keys() & given.keys():
        # SQLite keeps the last of two assignments to one column: the stamp would be lost without a word
        raise ValueError(f"{table.name}: {sorted(both)} given both as stamps and as given")
    assignments = "".join(
        [f", {column} = ?" for column in stamps] + [f", {column} = coalesce(?, {column})" for column in given]
    )
    cur = conn.execute(
        f"UPDATE {table.name} SET state = ?{assignments} WHERE id = ? AND state = ?{' AND ' + where if where else ''}",
        (new_state, *stamps.values(), *given.values(), row_id, expected_state, *where_params),
    )
    return cur.rowcount == 1
