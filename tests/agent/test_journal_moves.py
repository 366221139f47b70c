"""Every move of the journal's two state machines, through the journal's public calls on a real SQLite file:
each allowed submission-phase move (``NO_PERMIT`` and ``NOT_TAPPED`` included) and each refused one, and the
same for a claim's state. The allowed moves are listed here by hand, not read from
:mod:`cmbuyer.agent.journal_states`, so a change of the tables must be a change of this file too.

A refused move raises :class:`JournalError` and leaves the row as it was (the compare-and-set checks the pair
before any SQL runs).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.agent.journal import Journal, JournalError
from cmbuyer.agent.journal_states import CLAIM_TRANSITIONS, PHASE_TRANSITIONS, ClaimState, Phase

from .fakes import journal_claim, make_purchase

P, C = Phase, ClaimState
SUBMISSION = "f3c9f507-7473-4fa6-8d71-8786c34c6301"


def _moves(table: dict[Any, tuple[Any, ...]]) -> set[tuple[Any, Any]]:
    """``{from: (to, ...)}`` as the set of (from, to) pairs."""
    return {(src, dst) for src, targets in table.items() for dst in targets}


# The phase moves the journal allows, by the phase they leave. PERMIT_RECEIVED and NO_PERMIT are first phases
# (written by the row's INSERT); no move leads to them.
ALLOWED_PHASE_MOVES = _moves(
    {
        P.PERMIT_RECEIVED: (P.TAP_INTENT_RECORDED, P.NOT_TAPPED, P.RESULT_REPORTED),
        P.TAP_INTENT_RECORDED: (P.TAPPED, P.RESULT_REPORTED),
        P.TAPPED: (P.RESULT_REPORTED,),
        P.NOT_TAPPED: (P.RESULT_REPORTED,),
        P.NO_PERMIT: (P.RESULT_REPORTED,),
    }
)
# The claim moves it allows, by the state they leave.
ALLOWED_CLAIM_MOVES = _moves(
    {
        C.ACTIVE: (C.FENCED, C.FAIL_PENDING),
        C.FAIL_PENDING: (C.FAIL_PENDING, C.FAILED_REPORTED, C.ABANDONED),
        C.FENCED: (C.ABANDONED,),
    }
)


def _journal(tmp_path: Path, bring: Callable[[Journal, str], object] | None = None) -> tuple[Journal, str]:
    """A journal with one ACTIVE claim, then ``bring(journal, attempt_id)`` (a ``_TO_PHASE``/``_TO_STATE`` step)."""
    purchase = make_purchase()
    j = Journal(tmp_path / "m.sqlite3")
    journal_claim(j, purchase.claim, task={"goods_id": "1"})
    if bring is not None:
        bring(j, purchase.claim.attempt_id)
    return j, purchase.claim.attempt_id


# How to bring a fresh claim's submission to each phase with the journal's own calls.
_TO_PHASE: dict[Phase, Callable[[Journal, str], object]] = {
    P.PERMIT_RECEIVED: lambda j, a: j.record_permit(a, SUBMISSION),
    P.TAP_INTENT_RECORDED: lambda j, a: (j.record_permit(a, SUBMISSION), j.advance(a, P.TAP_INTENT_RECORDED)),
    P.TAPPED: lambda j, a: (
        j.record_permit(a, SUBMISSION),
        j.advance(a, P.TAP_INTENT_RECORDED),
        j.advance(a, P.TAPPED),
    ),
    P.RESULT_REPORTED: lambda j, a: (j.record_permit(a, SUBMISSION), j.advance(a, P.RESULT_REPORTED)),
    P.NOT_TAPPED: lambda j, a: (j.record_permit(a, SUBMISSION), j.record_not_tapped(a, "NOT_TAPPED_OBSCURED")),
    P.NO_PERMIT: lambda j, a: j.record_fence_without_permit(a, SUBMISSION),
}


def _move_to(j: Journal, a: str, phase: Phase) -> None:
    """The journal's call that asks for ``phase`` on an existing submission."""
    if phase is P.NOT_TAPPED:
        j.record_not_tapped(a, "NOT_TAPPED_SCREEN_CHANGED")
    elif phase is P.PERMIT_RECEIVED:
        j.record_permit(a, SUBMISSION)
    elif phase is P.NO_PERMIT:
        j.record_fence_without_permit(a, SUBMISSION)
    else:
        j.advance(a, phase)


def test_the_phase_table_holds_exactly_the_listed_moves() -> None:
    assert {(src, dst) for (src, _), dst in PHASE_TRANSITIONS.items()} == ALLOWED_PHASE_MOVES
    assert {(src, dst) for (src, _), dst in CLAIM_TRANSITIONS.items()} == ALLOWED_CLAIM_MOVES


def _assert_refused(j: Journal, a: str, move: Callable[[], object]) -> None:
    """``move`` raises :class:`JournalError` and writes nothing: the claim and its submission are as before."""
    before = (j.claim(a), j.submission(a))
    with pytest.raises(JournalError):
        move()
    assert (j.claim(a), j.submission(a)) == before


@pytest.mark.parametrize("src", list(Phase))
@pytest.mark.parametrize("dst", list(Phase))
def test_every_phase_move(tmp_path: Path, src: Phase, dst: Phase) -> None:
    j, a = _journal(tmp_path, _TO_PHASE[src])
    sub = j.submission(a)
    assert sub is not None and sub.phase is src
    if (src, dst) in ALLOWED_PHASE_MOVES:
        _move_to(j, a, dst)
        after = j.submission(a)
        assert after is not None and after.phase is dst
        if dst is P.NOT_TAPPED:  # decided at once: UNKNOWN with its key
            assert after.observation == "UNKNOWN" and after.result_key
    else:
        _assert_refused(j, a, lambda: _move_to(j, a, dst))


def test_no_permit_is_journaled_with_unknown_decided_and_the_claim_fenced(tmp_path: Path) -> None:
    j, a = _journal(tmp_path)
    key = j.record_fence_without_permit(a, SUBMISSION)
    sub, claim = j.submission(a), j.claim(a)
    assert sub is not None and claim is not None
    assert (sub.phase, sub.observation, sub.result_key) == (P.NO_PERMIT, "UNKNOWN", key)
    assert (claim.state, claim.reason) == (C.FENCED, "fence replay: no permit")
    assert j.recovery_pending()
    j.advance(a, P.RESULT_REPORTED)
    assert not j.recovery_pending()


def test_an_unknown_phase_is_refused(tmp_path: Path) -> None:
    j, a = _journal(tmp_path)
    j.record_permit(a, SUBMISSION)
    with pytest.raises(JournalError):
        j.advance(a, "CLICKED")
    with pytest.raises(JournalError):  # no submission at all
        j.advance("no-such-attempt", P.RESULT_REPORTED)


def test_the_commit_hook_sees_moves_from_the_tap_line_only(tmp_path: Path) -> None:
    """As before the tables: ``NOT_TAPPED``/``NO_PERMIT`` → ``RESULT_REPORTED`` call no hook (the crash
    tests stop the process at the tap line's points)."""
    seen: list[str] = []
    j, a = _journal(tmp_path)
    j.commit_hook = seen.append
    j.record_permit(a, SUBMISSION)
    j.advance(a, P.TAP_INTENT_RECORDED)
    j.advance(a, P.TAPPED)
    j.advance(a, P.RESULT_REPORTED)
    assert seen == ["PERMIT_RECEIVED", "TAP_INTENT_RECORDED", "TAPPED", "RESULT_REPORTED"]
    j2 = Journal(tmp_path / "n.sqlite3", commit_hook=seen.append)
    purchase = make_purchase()
    journal_claim(j2, purchase.claim)
    seen.clear()
    j2.record_fence_without_permit(purchase.claim.attempt_id, SUBMISSION)
    j2.advance(purchase.claim.attempt_id, P.RESULT_REPORTED)
    assert seen == []


# How to bring a fresh claim to each state with the journal's own calls.
_TO_STATE: dict[ClaimState, Callable[[Journal, str], object]] = {
    C.ACTIVE: lambda j, a: None,
    C.FENCED: lambda j, a: j.record_permit(a, SUBMISSION),
    C.FAIL_PENDING: lambda j, a: j.record_fail_intent(a, "PAGE_TIMEOUT", "s", None),
    C.FAILED_REPORTED: lambda j, a: (
        j.record_fail_intent(a, "PAGE_TIMEOUT", "s", None),
        j.set_claim_state(a, C.FAILED_REPORTED, "PAGE_TIMEOUT"),
    ),
    C.ABANDONED: lambda j, a: (
        j.record_fail_intent(a, "PAGE_TIMEOUT", "s", None),
        j.set_claim_state(a, C.ABANDONED, "refused"),
    ),
}


@pytest.mark.parametrize(("src", "dst"), list(itertools.product(ClaimState, ClaimState)))
def test_every_claim_move(tmp_path: Path, src: ClaimState, dst: ClaimState) -> None:
    j, a = _journal(tmp_path, _TO_STATE[src])
    before = j.claim(a)
    assert before is not None and before.state is src
    if (src, dst) not in ALLOWED_CLAIM_MOVES:
        _assert_refused(j, a, lambda: j.set_claim_state(a, dst, "why"))
        return
    j.set_claim_state(a, dst, "why")
    after = j.claim(a)
    assert after is not None and (after.state, after.reason) == (dst, "why")


def test_the_claim_calls_move_along_the_table(tmp_path: Path) -> None:
    """The calls that move a claim as a side effect: a permit fences only an ACTIVE claim (after a fail is
    decided, no permit is journaled: nothing written); a fail decided keeps a fenced or settled claim's state."""
    j, a = _journal(tmp_path)
    assert j.record_fail_intent(a, "PAGE_TIMEOUT", "first", None) == ("PAGE_TIMEOUT", "first", None)
    assert j.record_fail_intent(a, "OUT_OF_STOCK", "second", "ev") == ("PAGE_TIMEOUT", "first", None)
    claim = j.claim(a)
    assert claim is not None and (claim.state, claim.reason) == (C.FAIL_PENDING, "OUT_OF_STOCK")
    with pytest.raises(JournalError):
        j.record_permit(a, SUBMISSION)
    assert j.submission(a) is None and j.claim(a) == claim
    with pytest.raises(JournalError):
        j.record_fence_without_permit(a, SUBMISSION)
    assert j.submission(a) is None and j.claim(a) == claim

    j2 = Journal(tmp_path / "f.sqlite3")
    purchase = make_purchase()
    journal_claim(j2, purchase.claim)
    b = purchase.claim.attempt_id
    j2.record_permit(b, SUBMISSION)
    j2.record_fail_intent(b, "PAGE_TIMEOUT", "after the fence", None)
    fenced = j2.claim(b)
    assert fenced is not None and fenced.state is C.FENCED
    with pytest.raises(JournalError):  # no claim journaled
        j2.set_claim_state("no-such-attempt", C.ABANDONED)
