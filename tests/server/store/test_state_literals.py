"""No SQL in ``server/store/`` writes a state as a literal, and only ``set_state`` writes one at all.

Every state change goes through one compare-and-set ``set_state`` per stateful store module, which checks
the ``(expected, new)`` pair against the transition tables (server/domain/states.py,
docs/state-machines.md). The UPDATE itself is built once, by ``compare_and_set`` in ``store/_sql.py``
(:data:`HELPER`); each ``set_state`` calls it with its module's extra columns (``stamps=``, ``given=``). This test
reads the store's source (``ast``, no import) and fails on:

- ``literal``: an UPDATE whose ``SET`` assigns ``state`` anything but a bound parameter (``state = 'X'``,
  ``state = CASE …``, ``state = other_column``, ``state = {interpolated}``), an INSERT that puts a quoted
  literal in a ``state`` column, or a call of the helper that assigns ``state`` again (a ``"state"`` key
  in ``stamps=``/``given=``, or an ``also=`` SQL fragment assigning it — the helper's older form);
- ``outside set_state``: an UPDATE assigning ``state``, or a call of the helper, in a function not named
  ``set_state`` (the helper's own statement, in :data:`HELPER`'s file and function, excepted);
- ``no compare-and-set``: a ``set_state`` (or helper) UPDATE without ``state = ?`` after its ``SET`` (the
  expected state);
- ``positional insert``: an ``INSERT INTO t VALUES …`` without its column list (a value can land in the
  wrong column, the state among them, without any error).

:func:`scan` takes the state columns, the compare-and-set functions and the helper as arguments, so the
agent's journal is held to the same rules (tests/agent/test_journal_literals.py).

``test_scanner_catches_a_synthetic_module`` proves each check fires on a module written to ``tmp_path``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cmbuyer.server.store

STORE = Path(cmbuyer.server.store.__file__).resolve().parent
# The one function that may hold the state-writing UPDATE besides a set_state: (file under the store, name).
HELPER = ("_sql.py", "compare_and_set")

_UPDATE = re.compile(
    r"\bUPDATE\b(?:\s+(?!SET\b)[\w.\"{}]+)?\s+SET\b(?P<set>.*?)(?=\bWHERE\b|\bRETURNING\b|\bFROM\b|$)",
    re.IGNORECASE | re.DOTALL,
)
_INSERT = re.compile(
    r"\bINSERT\s+(?:OR\s+\w+\s+)?INTO\s+[\w\"]+\s*\((?P<cols>[^)]*)\)\s*VALUES\s*\((?P<vals>.*)\)",
    re.IGNORECASE | re.DOTALL,
)
_PARAM = re.compile(r"^\s*(\?\d*|:\w+)\s*$")
_POSITIONAL = re.compile(r"\bINSERT\s+(?:OR\s+\w+\s+)?INTO\s+[\w\"]+\s+VALUES\b", re.IGNORECASE)


def _cas(column: str) -> re.Pattern[str]:
    """``<column> = ?``: the compare-and-set's condition on the expected state."""
    return re.compile(rf"\b{re.escape(column)}\s*=\s*\?", re.IGNORECASE)


@dataclass(frozen=True)
class Violation:
    """One offending statement: where it is, which rule it breaks and the statement's text."""

    path: str
    line: int
    function: str
    rule: str
    sql: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} in {self.function}(): {self.rule}: {self.sql[:120]!r}"


@dataclass(frozen=True)
class StateWrite:
    """An UPDATE that assigns ``state`` (by whatever expression), found by the scanner."""

    path: str
    function: str


def _split_top_level(text: str) -> list[str]:
    """``text`` split on commas outside parentheses and quotes."""
    parts, depth, quote, current = [], 0, "", []
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    parts.append("".join(current))
    return parts


def _column(name: str) -> str:
    return name.strip().strip('"').rsplit(".", 1)[-1].strip('"').lower()


def _helper_calls(tree: ast.AST, helper: str = HELPER[1]) -> Iterator[tuple[ast.Call, str]]:
    """Every call of the helper (``compare_and_set(…)`` or ``module.compare_and_set(…)``) with the name of
    the innermost enclosing function."""

    def walk(node: ast.AST, function: str) -> Iterator[tuple[ast.Call, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield from walk(child, child.name)
                continue
            if isinstance(child, ast.Call):
                func = child.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                if name == helper:
                    yield child, function
            yield from walk(child, function)

    yield from walk(tree, "<module>")


def _assigns_state(set_clause: str, columns: tuple[str, ...] = ("state",)) -> list[tuple[str, str]]:
    """The ``(column, expression)`` pairs by which ``set_clause`` assigns one of the state ``columns``. An
    f-string placeholder (``{}``) is opaque SQL: it counts as an item of its own, so ``state = ?{}`` assigns a
    parameter and ``state = {}`` does not."""
    found = []
    for assignment in _split_top_level(set_clause.replace("{}", ",{}")):
        target, eq, expr = assignment.partition("=")
        if eq and _column(target) in columns:
            found.append((_column(target), expr))
    return found


def _strings(tree: ast.AST) -> Iterator[tuple[str, int, str]]:
    """Every string constant (f-string parts joined, placeholders as ``{}``) with its line and the name of
    the innermost enclosing function ("<module>" at top level)."""

    def walk(node: ast.AST, function: str) -> Iterator[tuple[str, int, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield from walk(child, child.name)
            elif isinstance(child, ast.Constant) and isinstance(child.value, str):
                yield child.value, child.lineno, function
            elif isinstance(child, ast.JoinedStr):
                text = "".join(
                    v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}" for v in child.values
                )
                yield text, child.lineno, function
            else:
                yield from walk(child, function)

    yield from walk(tree, "<module>")


def scan(
    root: Path,
    *,
    columns: tuple[str, ...] = ("state",),
    writers: tuple[str, ...] = ("set_state",),
    helper: tuple[str, str] | None = HELPER,
) -> tuple[list[Violation], list[StateWrite]]:
    """Scan every ``*.py`` under ``root``; returns the violations and every state-assigning UPDATE.

    ``columns`` are the state columns, ``writers`` the names of the compare-and-set functions allowed to
    write them, ``helper`` the ``(file, function)`` of a shared UPDATE builder (None: there is none)."""
    violations: list[Violation] = []
    writes: list[StateWrite] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for text, line, function in _strings(tree):
            for m in _UPDATE.finditer(text):
                for column, expr in _assigns_state(m.group("set"), columns):
                    writes.append(StateWrite(rel, function))
                    if not _PARAM.match(expr):
                        violations.append(Violation(rel, line, function, "literal", text))
                    if function not in writers and (rel, function) != helper:
                        violations.append(Violation(rel, line, function, "outside set_state", text))
                    elif not _cas(column).search(text, m.end("set")):
                        violations.append(Violation(rel, line, function, "no compare-and-set", text))
            for m in _INSERT.finditer(text):
                cols = [_column(c) for c in _split_top_level(m.group("cols"))]
                vals = _split_top_level(m.group("vals"))
                for column in (c for c in columns if c in cols and len(cols) == len(vals)):
                    if vals[cols.index(column)].strip().startswith("'"):
                        violations.append(Violation(rel, line, function, "literal", text))
            if _POSITIONAL.search(text):
                violations.append(Violation(rel, line, function, "positional insert", text))
        for call, function in _helper_calls(tree, helper[1]) if helper else ():
            writes.append(StateWrite(rel, function))
            if function not in writers:
                violations.append(Violation(rel, call.lineno, function, "outside set_state", ast.unparse(call)))
            also = [k.value for k in call.keywords if k.arg == "also"]
            for fragment, line, _ in (s for value in also for s in _strings(ast.Expression(value))):
                if _assigns_state(fragment, columns):
                    violations.append(Violation(rel, line, function, "literal", fragment))
            extra = [k.value for k in call.keywords if k.arg in ("stamps", "given")]
            for mapping in (node for value in extra for node in ast.walk(value) if isinstance(node, ast.Dict)):
                for key in mapping.keys:
                    if isinstance(key, ast.Constant) and isinstance(key.value, str) and _column(key.value) in columns:
                        violations.append(Violation(rel, key.lineno, function, "literal", ast.unparse(mapping)))
    return violations, writes


def test_store_has_no_state_literal_and_only_set_state_writes_state() -> None:
    violations, _ = scan(STORE)
    assert violations == [], "\n".join(map(str, violations))


def test_every_stateful_store_module_writes_state_in_set_state() -> None:
    """Not vacuous: the scanner finds the state writes of the real store, one ``set_state`` per module."""
    _, writes = scan(STORE)
    assert sorted((w.path, w.function) for w in writes) == [
        HELPER,  # the one UPDATE, built for every module
        ("attempts.py", "set_state"),
        ("authorizations.py", "set_state"),
        ("devices.py", "set_state"),
        ("submissions.py", "set_state"),
        ("supervision.py", "set_state"),
        ("tasks.py", "set_state"),
    ]


SYNTHETIC = """
import sqlite3


def revoke(conn: sqlite3.Connection, device_id: str) -> None:
    conn.execute("UPDATE devices SET state = 'REVOKED', revoked_at = ? WHERE id = ?", (device_id,))


def close_all(conn: sqlite3.Connection) -> None:
    conn.execute("update attempts set close_reason = ?, state='CLOSED' where state = 'OPEN'", ("X",))


def set_state(conn: sqlite3.Connection, sid: str) -> None:
    conn.execute(
        "UPDATE order_submissions SET state = CASE WHEN observation IS NULL THEN 'FENCED' ELSE ? END"
        " WHERE id = ? AND state = ?",
        (sid,),
    )


def bump(conn: sqlite3.Connection, task_id: str, new: str) -> None:
    conn.execute(f"UPDATE tasks SET version = version + 1, state = ? WHERE id = {task_id!r}", (new,))


def set_state_blind(conn: sqlite3.Connection, aid: str, new: str) -> None:
    conn.execute("UPDATE authorizations SET state = ? WHERE id = ?", (new, aid))


class Store:
    def set_state(self, conn: sqlite3.Connection, aid: str, new: str) -> None:
        conn.execute("UPDATE approval_requests SET state = ? WHERE id = ?", (new, aid))


def add(conn: sqlite3.Connection, device_id: str) -> None:
    conn.execute("INSERT INTO devices (id, state, created_at) VALUES (?, 'ACTIVE', ?)", (device_id, "t"))


def upsert(conn: sqlite3.Connection, key: str) -> None:
    conn.execute(
        "INSERT INTO pairs (k, held) VALUES (?, 1) ON CONFLICT (k) DO UPDATE SET state = 'HELD'", (key,)
    )
"""

CLEAN = """
import sqlite3


def set_state(conn: sqlite3.Connection, tid: str, expected: str, new: str) -> bool:
    cur = conn.execute(
        "UPDATE tasks SET state = ?, version = version + 1 WHERE id = ? AND state = ?", (new, tid, expected)
    )
    return cur.rowcount == 1


def open_for_task(conn: sqlite3.Connection, tid: str) -> object:
    return conn.execute("SELECT * FROM attempts WHERE task_id = ? AND state = 'OPEN'", (tid,)).fetchone()


def confirm(conn: sqlite3.Connection, did: str) -> None:
    conn.execute("UPDATE devices SET write_seq = write_seq + 1 WHERE id = ? AND state = 'ACTIVE'", (did,))


def add(conn: sqlite3.Connection, did: str, state: str) -> None:
    conn.execute("INSERT INTO devices (id, state, note) VALUES (?, ?, 'a, b')", (did, state))
"""


# A helper that interpolates the state, and callers that misuse the real helper's name.
SYNTHETIC_HELPER = """
import sqlite3


def compare_and_set(conn: sqlite3.Connection, table: str, row_id: str, new: str, expected: str, also: str) -> bool:
    cur = conn.execute(f"UPDATE {table} SET state = {new!r}{also} WHERE id = ? AND state = ?", (row_id, expected))
    return cur.rowcount == 1
"""

SYNTHETIC_CALLERS = """
import sqlite3

from cmbuyer.server.store import _sql
from cmbuyer.server.store._sql import compare_and_set


def reopen(conn: sqlite3.Connection, aid: str) -> bool:
    return compare_and_set(conn, CHANGES, "attempts", aid, expected_state="CLOSED", new_state="OPEN")


def set_state(conn: sqlite3.Connection, sid: str, expected: str, new: str) -> bool:
    return _sql.compare_and_set(
        conn, CHANGES, "order_submissions", sid, expected_state=expected, new_state=new,
        also="note = coalesce(?, note), " + "state = 'FENCED'", also_params=("n",),
    )
"""

# The helper's column form: a "state" key among the stamps assigns the state a second time.
SYNTHETIC_STAMPS = """
import sqlite3

from cmbuyer.server.store._sql import compare_and_set


def set_state(conn: sqlite3.Connection, sid: str, expected: str, new: str, note: str) -> bool:
    return compare_and_set(
        conn, TABLE, sid, expected_state=expected, new_state=new,
        stamps={"note": note, "state": "FENCED"} if note else None,
    )
"""

CLEAN_CALLER = """
import sqlite3

from cmbuyer.server.store._sql import compare_and_set


def set_state(conn: sqlite3.Connection, aid: str, expected: str, new: str, at: str, closing: bool) -> bool:
    return compare_and_set(
        conn, CHANGES, "attempts", aid, expected_state=expected, new_state=new,
        also="closed_at = ?, close_reason = coalesce(?, close_reason)" if closing else "", also_params=(at, None),
    )
"""

CLEAN_STAMPS = """
import sqlite3

from cmbuyer.server.store._sql import compare_and_set


def set_state(conn: sqlite3.Connection, aid: str, expected: str, new: str, at: str) -> bool:
    return compare_and_set(
        conn, TABLE, aid, expected_state=expected, new_state=new,
        stamps={"closed_at": at}, given={"close_reason": None, "states_seen": 2},
    )
"""


def test_scanner_catches_a_synthetic_module(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(SYNTHETIC, encoding="utf-8")
    (tmp_path / HELPER[0]).write_text(SYNTHETIC_HELPER, encoding="utf-8")
    (tmp_path / "callers.py").write_text(SYNTHETIC_CALLERS, encoding="utf-8")
    (tmp_path / "stamps.py").write_text(SYNTHETIC_STAMPS, encoding="utf-8")
    (tmp_path / "queries").mkdir()
    (tmp_path / "queries" / "clean.py").write_text(CLEAN, encoding="utf-8")
    (tmp_path / "queries" / "clean_caller.py").write_text(CLEAN_CALLER, encoding="utf-8")
    (tmp_path / "queries" / "clean_stamps.py").write_text(CLEAN_STAMPS, encoding="utf-8")
    violations, writes = scan(tmp_path)
    found = sorted((v.path, v.function, v.rule) for v in violations)
    assert found == [
        ("_sql.py", "compare_and_set", "literal"),  # state = {new!r}: interpolated, not a bound parameter
        ("bad.py", "add", "literal"),
        ("bad.py", "bump", "outside set_state"),
        ("bad.py", "close_all", "literal"),
        ("bad.py", "close_all", "outside set_state"),
        ("bad.py", "revoke", "literal"),
        ("bad.py", "revoke", "outside set_state"),
        ("bad.py", "set_state", "literal"),  # the module-level one: state = CASE … 'FENCED' …
        ("bad.py", "set_state", "no compare-and-set"),  # the method of class Store
        ("bad.py", "set_state_blind", "outside set_state"),
        ("bad.py", "upsert", "literal"),
        ("bad.py", "upsert", "outside set_state"),
        ("callers.py", "reopen", "outside set_state"),  # the helper called outside set_state
        ("callers.py", "set_state", "literal"),  # also= assigns state a second time, as a literal
        ("stamps.py", "set_state", "literal"),  # a "state" key among the stamps
    ]
    assert {
        ("queries/clean.py", "set_state"),
        ("queries/clean_caller.py", "set_state"),
        ("queries/clean_stamps.py", "set_state"),
    } <= {(w.path, w.function) for w in writes}
    assert not [v for v in violations if v.path.startswith("queries/")]
