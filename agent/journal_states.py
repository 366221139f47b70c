"""The journal's two state machines: a claim's local state and a submission's phase (docs/agent.md "Journal").

Pure (no I/O). Each machine is a table ``{(from, use_case): to}`` like the server's (server/domain/states.py);
the journal writes a state only through its compare-and-set for that table (``Journal._set_claim_state``,
``Journal._set_phase``), which refuses a ``(from, to)`` pair no use-case produces before any SQL runs
(:data:`CLAIM_MOVES`, :data:`PHASE_MOVES`). A row's first state is written by its INSERT (``ACTIVE`` for a
claim, ``PERMIT_RECEIVED`` or ``NO_PERMIT`` for a submission), not by a move.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TypeVar


class ClaimState(StrEnum):
    """A journaled claim: open (``ACTIVE``), past the fence (``FENCED``), a ``fail`` decided but not yet
    delivered (``FAIL_PENDING``), the fail delivered (``FAILED_REPORTED``), or refused by the server and
    left to a person (``ABANDONED``)."""

    ACTIVE = "ACTIVE"
    FENCED = "FENCED"
    FAIL_PENDING = "FAIL_PENDING"
    FAILED_REPORTED = "FAILED_REPORTED"
    ABANDONED = "ABANDONED"


class Phase(StrEnum):
    """A submission's phase: the permit, the tap intent (written before the tap), the tap, the result
    reported; ``NOT_TAPPED`` when the last look refused the tap, ``NO_PERMIT`` for a fence replay."""

    PERMIT_RECEIVED = "PERMIT_RECEIVED"
    TAP_INTENT_RECORDED = "TAP_INTENT_RECORDED"
    TAPPED = "TAPPED"
    RESULT_REPORTED = "RESULT_REPORTED"
    NOT_TAPPED = "NOT_TAPPED"
    NO_PERMIT = "NO_PERMIT"


C = ClaimState
CLAIM_TRANSITIONS: dict[tuple[ClaimState, str], ClaimState] = {
    (C.ACTIVE, "permit"): C.FENCED,
    (C.ACTIVE, "fence_replayed"): C.FENCED,
    (C.ACTIVE, "fail_decided"): C.FAIL_PENDING,
    # a fail decided again (a re-send) keeps FAIL_PENDING and records the newer reason beside it
    (C.FAIL_PENDING, "fail_decided"): C.FAIL_PENDING,
    (C.FAIL_PENDING, "fail_delivered"): C.FAILED_REPORTED,
    (C.FAIL_PENDING, "fail_refused"): C.ABANDONED,
    (C.FENCED, "result_refused"): C.ABANDONED,
}

P = Phase
PHASE_TRANSITIONS: dict[tuple[Phase, str], Phase] = {
    (P.PERMIT_RECEIVED, "tap_intent"): P.TAP_INTENT_RECORDED,  # journaled before the tap is sent
    (P.TAP_INTENT_RECORDED, "tapped"): P.TAPPED,
    (P.PERMIT_RECEIVED, "not_tapped"): P.NOT_TAPPED,  # only before the intent: after it the tap may be out
    # a result (often UNKNOWN) can be reported from any phase short of it, the tap sent or not
    **{
        (s, "reported"): P.RESULT_REPORTED
        for s in (P.PERMIT_RECEIVED, P.TAP_INTENT_RECORDED, P.TAPPED, P.NOT_TAPPED, P.NO_PERMIT)
    },
}
# The phases in which the submit tap may have been sent or is about to be: NOT_TAPPED and NO_PERMIT are
# outside this line, and no move leads from them back onto it.
TAP_LINE = (P.PERMIT_RECEIVED, P.TAP_INTENT_RECORDED, P.TAPPED, P.RESULT_REPORTED)


StateT = TypeVar("StateT", bound=StrEnum)


def moves(table: Mapping[tuple[StateT, str], StateT]) -> frozenset[tuple[str, str]]:
    """The ``(from, to)`` pairs some use-case of ``table`` produces, as plain strings (a state compares as
    its value, so a ``str`` read from the file and an enum member look the same)."""
    return frozenset((str(src), str(dst)) for (src, _), dst in table.items())


CLAIM_MOVES = moves(CLAIM_TRANSITIONS)
PHASE_MOVES = moves(PHASE_TRANSITIONS)
