"""No SQL in ``server/store/`` writes a state as a literal, and only ``set_state`` writes one at all.

Every state change goes through one compare-and-set ``set_state`` per stateful store module, which checks
the ``(expected, new)`` pair against the transition tables (server/domain/states.py,
docs/state-machines.md). This test reads the store's source (``ast``, no import) and fails on:

- ``literal``: an UPDATE whose ``SET`` assigns ``state`` anything but a bound parameter (``state = 'X'``,
  ``state = CASE …``, ``state = other_column``), or an INSERT that puts a quoted literal in a ``state``
  column;
- ``outside set_state``: an UPDATE assigning ``state`` in a function not named ``set_state``;
- ``no compare-and-set``: a ``set_state`` UPDATE without ``state = ?`` after its ``SET`` (the expected state).

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

_UPDATE = re.compile(
    r"\bUPDATE\b(?:\s+(?!SET\b)[\w.\"]+)?\s+SET\b(?P<set>.*?)(?=\bWHERE\b|\bRETURNING\b|\bFROM\b|$)",
    re.IGNORECASE | re.DOTALL,
)
_INSERT = re.compile(
    r"\bINSERT\s+(?:OR\s+\w+\s+)?INTO\s+[\w\"]+\s*\((?P<cols>[^)]*)\)\s*VALUES\s*\((?P<vals>.*)\)",
    re.IGNORECASE | re.DOTALL,
)
_PARAM = re.compile(r"^\s*(\?\d*|:\w+)\s*$")
_CAS = re.compile(r"\bstate\s*=\s*\?", re.IGNORECASE)


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


def scan(root: Path) -> tuple[list[Violation], list[StateWrite]]:
    """Scan every ``*.py`` under ``root``; returns the violations and every state-assigning UPDATE."""
    violations: list[Violation] = []
    writes: list[StateWrite] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for text, line, function in _strings(tree):
            for m in _UPDATE.finditer(text):
                for assignment in _split_top_level(m.group("set")):
                    target, eq, expr = assignment.partition("=")
                    if not eq or _column(target) != "state":
                        continue
                    writes.append(StateWrite(rel, function))
                    if not _PARAM.match(expr):
                        violations.append(Violation(rel, line, function, "literal", text))
                    if function != "set_state":
                        violations.append(Violation(rel, line, function, "outside set_state", text))
                    elif not _CAS.search(text, m.end("set")):
                        violations.append(Violation(rel, line, function, "no compare-and-set", text))
            for m in _INSERT.finditer(text):
                cols = [_column(c) for c in _split_top_level(m.group("cols"))]
                vals = _split_top_level(m.group("vals"))
                if "state" in cols and len(cols) == len(vals):
                    value = vals[cols.index("state")].strip()
                    if value.startswith("'"):
                        violations.append(Violation(rel, line, function, "literal", text))
    return violations, writes


def test_store_has_no_state_literal_and_only_set_state_writes_state() -> None:
    violations, _ = scan(STORE)
    assert violations == [], "\n".join(map(str, violations))


def test_every_stateful_store_module_writes_state_in_set_state() -> None:
    """Not vacuous: the scanner finds the state writes of the real store, one ``set_state`` per module."""
    _, writes = scan(STORE)
    assert {w.function for w in writes} == {"set_state"}
    assert sorted(w.path for w in writes) == [
        "attempts.py",
        "authorizations.py",
        "authorizations.py",  # terminal moves stamp closed_at in a second statement of the same function
        "devices.py",
        "submissions.py",
        "supervision.py",
        "tasks.py",
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


def test_scanner_catches_a_synthetic_module(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(SYNTHETIC, encoding="utf-8")
    (tmp_path / "queries").mkdir()
    (tmp_path / "queries" / "clean.py").write_text(CLEAN, encoding="utf-8")
    violations, writes = scan(tmp_path)
    found = sorted((v.path, v.function, v.rule) for v in violations)
    assert found == [
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
    ]
    assert ("queries/clean.py", "set_state") in {(w.path, w.function) for w in writes}
    assert not [v for v in violations if v.path.startswith("queries/")]
