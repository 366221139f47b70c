"""No SQL in ``agent/`` writes a claim state or a submission phase as a literal, and only the journal's two
compare-and-sets write one at all (``Journal._set_claim_state``, ``Journal._set_phase``: agent/journal.py).

The scanner is the server store's (tests/server/store/test_state_literals.py), run with the journal's state
columns (``state``, ``phase``) and compare-and-set names; it reads the source (``ast``, no import). It also
refuses an ``INSERT`` without its column list. ``test_scanner_catches_a_synthetic_agent_module`` proves each
check fires on a module written to ``tmp_path``.
"""

from __future__ import annotations

from pathlib import Path

import cmbuyer.agent
from tests.server.store.test_state_literals import scan

AGENT = Path(cmbuyer.agent.__file__).resolve().parent
COLUMNS = ("state", "phase")
WRITERS = ("_set_claim_state", "_set_phase")


def _scan(root: Path) -> tuple[list[object], list[tuple[str, str]]]:
    violations, writes = scan(root, columns=COLUMNS, writers=WRITERS, helper=None)
    return list(violations), sorted((w.path, w.function) for w in writes)


def test_agent_has_no_state_literal_and_only_the_compare_and_sets_write_states() -> None:
    violations, _ = _scan(AGENT)
    assert violations == [], "\n".join(map(str, violations))


def test_the_journal_writes_each_state_column_in_its_compare_and_set() -> None:
    """Not vacuous: the scanner finds the journal's two state writes, each in its compare-and-set."""
    _, writes = _scan(AGENT)
    assert writes == [("journal.py", "_set_claim_state"), ("journal.py", "_set_phase")]


SYNTHETIC = """
import sqlite3


def record_permit(db: sqlite3.Connection, attempt: str, sid: str) -> None:
    db.execute("INSERT INTO submissions VALUES (?,?,?,NULL,NULL,NULL,?)", (attempt, sid, "PERMIT_RECEIVED", "t"))
    db.execute("UPDATE claims SET state='FENCED', updated_at=? WHERE attempt_id=?", ("t", attempt))


def record_fence_without_permit(db: sqlite3.Connection, attempt: str) -> None:
    db.execute(
        "INSERT INTO submissions (attempt_id, phase, observation) VALUES (?, 'NO_PERMIT', 'UNKNOWN')", (attempt,)
    )


def advance(db: sqlite3.Connection, attempt: str, phase: str) -> None:
    db.execute("UPDATE submissions SET phase=?, updated_at=? WHERE attempt_id=?", (phase, "t", attempt))


def _set_phase(db: sqlite3.Connection, attempt: str, new: str) -> None:
    db.execute("UPDATE submissions SET phase = ? WHERE attempt_id = ?", (new, attempt))


def _set_claim_state(db: sqlite3.Connection, attempt: str, expected: str) -> None:
    db.execute(
        "UPDATE claims SET state = CASE WHEN reason IS NULL THEN 'ABANDONED' ELSE ? END "
        "WHERE attempt_id = ? AND state = ?",
        ("FAILED_REPORTED", attempt, expected),
    )
"""

CLEAN = """
import sqlite3


def _set_phase(db: sqlite3.Connection, attempt: str, expected: str, new: str) -> None:
    db.execute("UPDATE submissions SET phase = ?, updated_at = ? WHERE attempt_id = ? AND phase = ?",
               (new, "t", attempt, expected))


def unreported(db: sqlite3.Connection) -> list[object]:
    return db.execute("SELECT * FROM submissions WHERE phase != 'RESULT_REPORTED'").fetchall()


def add(db: sqlite3.Connection, attempt: str, state: str) -> None:
    db.execute("INSERT INTO claims (attempt_id, state, reason) VALUES (?, ?, 'a, b')", (attempt, state))
"""


def test_scanner_catches_a_synthetic_agent_module(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(SYNTHETIC, encoding="utf-8")
    (tmp_path / "clean.py").write_text(CLEAN, encoding="utf-8")
    violations, writes = scan(tmp_path, columns=COLUMNS, writers=WRITERS, helper=None)
    assert sorted((v.path, v.function, v.rule) for v in violations) == [
        ("bad.py", "_set_claim_state", "literal"),  # state = CASE … 'ABANDONED' …
        ("bad.py", "_set_phase", "no compare-and-set"),  # no "phase = ?" condition
        ("bad.py", "advance", "outside set_state"),  # a phase written outside the compare-and-set
        ("bad.py", "record_fence_without_permit", "literal"),  # 'NO_PERMIT' inserted as a literal
        ("bad.py", "record_permit", "literal"),  # state='FENCED'
        ("bad.py", "record_permit", "outside set_state"),
        ("bad.py", "record_permit", "positional insert"),  # VALUES (?,?,…) with no column list
    ]
    assert ("clean.py", "_set_phase") in {(w.path, w.function) for w in writes}
