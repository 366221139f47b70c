"""The journal's file format (``PRAGMA user_version``): a journal written before the version existed upgrades
in place and keeps every row; steps run in order, once; a file of a newer format is refused unchanged.

``fixtures/journal/v0.sqlite3`` was written by the journal code of commit 1a0d61c through its own API
(``fixtures/journal/make_v0.py`` rebuilds it): one attempt per claim state and per submission phase, keys, a
pending fail, confirmation steps, a hold and streak counters.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from cmbuyer.agent import journal as journal_module
from cmbuyer.agent.journal import SCHEMA_VERSION, Journal, JournalError
from cmbuyer.agent.journal_states import ClaimState, Phase

V0 = Path(__file__).resolve().parent / "fixtures" / "journal" / "v0.sqlite3"
TABLES = ("idem_keys", "claims", "submissions", "post_tap", "meta", "pending_fails")


def _copy_v0(tmp_path: Path) -> Path:
    path = tmp_path / "old.sqlite3"
    shutil.copyfile(V0, path)
    path.chmod(0o600)
    return path


def _raw(path: Path) -> tuple[int, dict[str, list[tuple[object, ...]]]]:
    """``(user_version, {table: rows})`` read with plain sqlite3, not the journal."""
    db = sqlite3.connect(path)
    try:
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        rows = {t: sorted(db.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in TABLES}
    finally:
        db.close()
    return version, rows


def _schema(path: Path) -> list[tuple[str, str]]:
    db = sqlite3.connect(path)
    try:
        return sorted(db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall())
    finally:
        db.close()


def test_a_journal_of_yesterdays_format_upgrades_in_place_and_keeps_every_row(tmp_path: Path) -> None:
    path = _copy_v0(tmp_path)
    version, before = _raw(path)
    assert version == 0 and all(before[t] for t in TABLES)  # the fixture has a row in every table

    j = Journal(path)
    assert _raw(path) == (SCHEMA_VERSION, before)  # stamped, nothing else changed
    assert [(c.attempt_id, c.state) for c in j.claims()] == [
        ("a1", ClaimState.ACTIVE),
        ("a2", ClaimState.FENCED),
        ("a3", ClaimState.FENCED),
        ("a4", ClaimState.FENCED),
        ("a5", ClaimState.FENCED),
        ("a6", ClaimState.FAIL_PENDING),
        ("a7", ClaimState.FAILED_REPORTED),
        ("a8", ClaimState.ABANDONED),
        ("a9", ClaimState.FENCED),
    ]
    first = j.claim("a1")
    assert first is not None and first.task == {"goods_id": "1", "名": "测试"} and first.claim_token == "tok1"
    assert [(s.attempt_id, s.phase, s.observation) for s in j.unreported_submissions()] == [
        ("a2", Phase.TAP_INTENT_RECORDED, None),
        ("a3", Phase.TAPPED, "SUBMITTED"),
        ("a4", Phase.NOT_TAPPED, "UNKNOWN"),
        ("a5", Phase.NO_PERMIT, "UNKNOWN"),
    ]
    assert j.post_tap("a3") == {
        "observation_reason": None,
        "foreground_package": None,
        "confirm_step": "OPEN_ORDERS",
        "order_sn": None,
        "confirm_asset_id": None,
    }
    reported = j.submission("a9")
    assert reported is not None and (reported.phase, reported.order_sn) == (Phase.RESULT_REPORTED, "240101-123")
    assert j.pending_fail("a6") == ("PAGE_TIMEOUT", "no goods page", None)
    assert j.hold() == "PAYMENT_SUSPECTED: fixture" and j.streaks() == (0, 1)
    assert j.key_scopes("claim_request") == ["sess2"] and j.recovery_pending()

    # the upgraded file moves along the transition tables like a new one
    a2_key = j.key("renew", "a2")
    assert j.key_scopes("renew") == ["a2"]  # the journaled key is reused, not replaced
    with pytest.raises(JournalError):
        j.advance("a4", Phase.TAP_INTENT_RECORDED)  # NOT_TAPPED: never a tap intent
    with pytest.raises(JournalError):
        j.advance("a2", Phase.TAP_INTENT_RECORDED)
    j.advance("a2", Phase.TAPPED)
    j.advance("a5", Phase.RESULT_REPORTED)
    j.set_claim_state("a6", ClaimState.FAILED_REPORTED, "PAGE_TIMEOUT")
    j.close()

    j = Journal(path)  # a second open runs no step again
    assert _raw(path)[0] == SCHEMA_VERSION and j.key("renew", "a2") == a2_key
    sub = j.submission("a2")
    assert sub is not None and sub.phase is Phase.TAPPED


def test_the_first_version_is_exactly_yesterdays_tables(tmp_path: Path) -> None:
    Journal(tmp_path / "new.sqlite3").close()
    assert _schema(tmp_path / "new.sqlite3") == _schema(V0)
    assert _raw(tmp_path / "new.sqlite3")[0] == SCHEMA_VERSION


def test_steps_run_in_order_each_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a second step appended, a version-0 file runs both in order; a version-1 file only the second."""
    old = _copy_v0(tmp_path)
    Journal(tmp_path / "v1.sqlite3").close()
    step2 = "CREATE TABLE step2 (n INTEGER NOT NULL); INSERT INTO step2 (n) SELECT count(*) FROM claims"
    monkeypatch.setattr(journal_module, "_UPGRADES", (*journal_module._UPGRADES, step2))
    monkeypatch.setattr(journal_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    for path, claims in ((old, 9), (tmp_path / "v1.sqlite3", 0)):
        Journal(path).close()
        Journal(path).close()  # once: a second open inserts nothing
        db = sqlite3.connect(path)
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
        assert db.execute("SELECT n FROM step2").fetchall() == [(claims,)]  # step 1's tables existed first
        db.close()


def test_a_journal_of_a_newer_format_is_refused_unchanged(tmp_path: Path) -> None:
    path = _copy_v0(tmp_path)
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    before = _raw(path)
    with pytest.raises(JournalError, match="newer"):
        Journal(path)
    assert _raw(path) == before
