"""Journal phases and start-up recovery: an agent killed at any phase never taps again; it
re-sends a stored result with its key or reports UNKNOWN. Kill points are simulated by
constructing the journal state directly (what a SIGKILL after each commit leaves behind)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cmbuyer.agent.journal import PHASES, Journal, JournalError
from cmbuyer.agent.recovery import recover

from .fakes import FakeServer, journal_claim, make_purchase


def _journal_with_claim(tmp_path: Path):
    purchase = make_purchase()
    j = Journal(tmp_path / "s.sqlite3")
    c = purchase.claim
    journal_claim(j, c, task={"goods_id": "1"})
    return j, purchase


def test_keys_survive_reopen_and_drop(tmp_path: Path) -> None:
    j = Journal(tmp_path / "k.sqlite3")
    k1 = j.key("claim_request", "s")
    j.close()
    j2 = Journal(tmp_path / "k.sqlite3")
    assert j2.key("claim_request", "s") == k1
    j2.drop_key("claim_request", "s")
    assert j2.key("claim_request", "s") != k1
    assert (tmp_path / "k.sqlite3").stat().st_mode & 0o077 == 0


def test_phases_only_move_forward(tmp_path: Path) -> None:
    j, p = _journal_with_claim(tmp_path)
    a = p.claim.attempt_id
    j.record_permit(a, "f3c9f507-7473-4fa6-8d71-8786c34c6301")
    with pytest.raises(JournalError):
        j.record_permit(a, "f3c9f507-7473-4fa6-8d71-8786c34c6301")
    with pytest.raises(JournalError):
        j.advance(a, "TAPPED")
    j.advance(a, "TAP_INTENT_RECORDED")
    with pytest.raises(JournalError):
        j.advance(a, "TAP_INTENT_RECORDED")
    j.advance(a, "TAPPED")
    j.advance(a, "RESULT_REPORTED")


@pytest.mark.parametrize("phase", PHASES[:3])
@pytest.mark.parametrize("decided", [None, "SUBMITTED"])
def test_recovery_after_kill_at_each_phase(tmp_path: Path, phase: str, decided: str | None) -> None:
    j, p = _journal_with_claim(tmp_path)
    a = p.claim.attempt_id
    sid = "f3c9f507-7473-4fa6-8d71-8786c34c6301"
    j.record_permit(a, sid)
    for ph in PHASES[1 : PHASES.index(phase) + 1]:
        j.advance(a, ph)
    key = j.record_observation(a, decided, None) if decided else None
    j.close()

    j = Journal(tmp_path / "s.sqlite3")  # "restart"
    server = FakeServer(p, keys=j)
    recover(j, server)  # recovery has no phone at all: it cannot tap
    (payload,) = server.results.values()
    assert payload["observation"] == (decided or "UNKNOWN")
    if key:
        assert payload["result_key"] == key
    assert j.submission(a).phase == "RESULT_REPORTED"
    recover(j, server)  # idempotent: nothing left to do
    assert len(server.results) == 1


def test_not_tapped_is_decided_at_once_refuses_a_tap_intent_and_recovers_as_no_tap(tmp_path: Path) -> None:
    """The last look before the tap refused it (agent/submit.py): NOT_TAPPED with UNKNOWN and its reason is
    journaled before anything else; from there the journal refuses a tap intent, the screenshot taken
    afterwards joins the stored result, and recovery re-sends exactly that result — never "maybe tapped"."""
    j, p = _journal_with_claim(tmp_path)
    a = p.claim.attempt_id
    j.record_permit(a, "f3c9f507-7473-4fa6-8d71-8786c34c6301")
    key = j.record_not_tapped(a, "NOT_TAPPED_OBSCURED")
    assert j.submission(a).phase == "NOT_TAPPED"
    for phase in ("TAP_INTENT_RECORDED", "TAPPED"):
        with pytest.raises(JournalError):
            j.advance(a, phase)
    with pytest.raises(JournalError):
        j.record_not_tapped(a, "NOT_TAPPED_SCREEN_CHANGED")
    asset = "63c9f507-7473-4fa6-8d71-8786c34c6301"
    assert j.record_observation(a, "UNKNOWN", asset, reason="NOT_TAPPED_OBSCURED") == key
    assert j.record_observation(a, "UNKNOWN", "73c9f507-7473-4fa6-8d71-8786c34c6301") == key  # kept once set
    j.close()

    j = Journal(tmp_path / "s.sqlite3")  # a crash before the report: the restart recovers it
    server = FakeServer(p, keys=j)
    recover(j, server)
    (payload,) = server.results.values()
    assert payload["result_key"] == key and payload["observation"] == "UNKNOWN"
    assert payload["observation_reason"] == "NOT_TAPPED_OBSCURED" and payload["evidence_asset_id"] == asset
    assert j.submission(a).phase == "RESULT_REPORTED"
    assert "NOT_TAPPED_OBSCURED" in (j.hold() or "")  # phone-level: the runner never saw it before the crash


def test_not_tapped_cannot_be_claimed_after_the_tap_intent(tmp_path: Path) -> None:
    j, p = _journal_with_claim(tmp_path)
    a = p.claim.attempt_id
    j.record_permit(a, "f3c9f507-7473-4fa6-8d71-8786c34c6301")
    j.advance(a, "TAP_INTENT_RECORDED")
    with pytest.raises(JournalError):  # the tap may have been sent: nobody may say it was not
        j.record_not_tapped(a, "NOT_TAPPED_SCREEN_CHANGED")
    assert j.submission(a).phase == "TAP_INTENT_RECORDED" and j.submission(a).observation is None


def test_recovery_fails_open_pre_fence_claim(tmp_path: Path) -> None:
    j, p = _journal_with_claim(tmp_path)
    server = FakeServer(p, keys=j)
    recover(j, server)
    assert server.fails[0].reason_code == "INTERNAL_ERROR"
    assert j.claim(p.claim.attempt_id).state == "FAILED_REPORTED"


def test_recovery_holds_when_server_refuses(tmp_path: Path) -> None:
    j, p = _journal_with_claim(tmp_path)
    server = FakeServer(p, keys=j)
    server.task_state = "SUBMITTING"
    recover(j, server)
    assert j.hold() is not None


def test_journal_cli_names_the_state_dir_when_the_journal_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`journal --clear-hold` in the wrong state dir must not look like success: exit 1 and say where the
    agent's journal lives."""
    from cmbuyer.agent.cli import main

    monkeypatch.setenv("CMBUYER_AGENT_STATE_DIR", str(tmp_path / "elsewhere"))
    assert main(["journal", "--device", "sim-9", "--clear-hold"]) == 1
    printed = capsys.readouterr().out
    out = json.loads(printed)
    assert out["exists"] is False and "CMBUYER_AGENT_STATE_DIR" in out["error"]
    assert out["path"] == str(tmp_path / "elsewhere" / "sim-9.sqlite3")
    assert "这里没有这台设备的日志" in printed and "\\u" not in printed  # readable, not \u8fd9… escapes
