"""docs/state-machines.md "Agent journal" is checked against agent/journal_states.py: the generated tables
between the markers must equal the file's text, and every use-case must say what in the agent causes it.

Regenerate after changing journal_states.py:
``CMBUYER_REGEN_DOCS=1 pytest tests/agent/test_journal_states_doc.py``.
"""

from __future__ import annotations

from cmbuyer.agent.journal_states import CLAIM_TRANSITIONS, PHASE_TRANSITIONS
from tests.state_tables import assert_doc_block, render, used_use_cases

BEGIN, END = "<!-- generated-journal-transitions:begin -->", "<!-- generated-journal-transitions:end -->"

MACHINES = [("Agent journal: claim", CLAIM_TRANSITIONS), ("Agent journal: submission phase", PHASE_TRANSITIONS)]

# use-case → what in the agent causes it. A new use-case fails the test until it is described here.
CAUSES: dict[str, str] = {
    "permit": "the fence answered with a submit permit",
    "fence_replayed": "the fence answered a replay: this claim was fenced before (no permit, no tap)",
    "fail_decided": "the flow decided to report `fail` (before the fence only); a re-send keeps it",
    "fail_delivered": "the server accepted the `fail` report",
    "fail_refused": "the server refused the `fail` report for good: left to a person",
    "result_refused": "the server refused the result report for good: left to a person",
    "tap_intent": "the last look passed: the intent is journaled (fsynced) before the one submit tap",
    "tapped": "the submit tap was sent",
    "not_tapped": "the last look refused the tap (screen changed or obscured); only before the intent",
    "reported": "the result (often `UNKNOWN`) was accepted by the server, or refused for good (then a person)",
}


def test_every_journal_use_case_has_a_cause() -> None:
    assert used_use_cases(MACHINES) == set(CAUSES)


def test_the_doc_shows_the_journal_tables() -> None:
    rendered = render(BEGIN, END, MACHINES, CAUSES)
    assert_doc_block(BEGIN, END, rendered, "CMBUYER_REGEN_DOCS=1 pytest " + __file__)
