"""submit_order_once: the ONLY code that taps 提交订单 (spec 002 §三, design §2.1–2.2).

Takes an unforgeable :class:`SubmissionPermit`. Order of effects:
1. the flow journaled PERMIT_RECEIVED when the permit arrived;
2. re-read the confirm page: exactly one submit control (pack selector ∪ generic reader), else no tap;
3. journal TAP_INTENT_RECORDED (committed, fsync'd) — then ONE ``input tap`` (no retry);
4. journal TAPPED; observe the result screen (order created / payment handoff / security challenge /
   unknown) with a screenshot.
Any error from the tap itself → UNKNOWN. Never a second tap, whatever happens.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from cmbuyer.agent.errors import AgentError, SubmitTapUnknown
from cmbuyer.agent.journal import Journal
from cmbuyer.agent.permit import SubmissionPermit
from cmbuyer.agent.phone.adapter import PhoneAdapter
from cmbuyer.agent.screens import readers, safety
from cmbuyer.agent.screens.pack import Pack

OBSERVE_SECONDS = 10.0  # a deadline, not a wait: the first outcome seen twice in a row ends it
POLL_SECONDS = 0.05
_OBSERVATIONS = {"order_created": "SUBMITTED", "payment": "EXTERNAL_PAYMENT_HANDOFF",
                 "security_challenge": "SECURITY_CHALLENGE"}


@dataclass(frozen=True)
class SubmitOutcome:
    observation: str  # SUBMITTED | EXTERNAL_PAYMENT_HANDOFF | SECURITY_CHALLENGE | UNKNOWN
    tapped: bool
    screenshot: bytes | None
    note: str


def submit_order_once(phone: PhoneAdapter, pack: Pack, journal: Journal, permit: SubmissionPermit,
                      *, observe_seconds: float = OBSERVE_SECONDS) -> SubmitOutcome:
    if not isinstance(permit, SubmissionPermit):
        raise TypeError("a SubmissionPermit is required")
    attempt = permit.attempt_id
    try:
        dump = phone.dump()
        if readers.recognize(dump, pack) != "confirm_order":
            return SubmitOutcome("UNKNOWN", False, _shot(phone), "confirm page gone before the tap")
        pack_nodes = pack.controls["submit"].find(dump)
        targets = {(n.clickable_self_or_ancestor() or n).order: n for n in pack_nodes}
        generic = {n.order for n in safety.submit_controls(dump)}
        if len(targets) != 1 or set(targets) != generic:
            return SubmitOutcome("UNKNOWN", False, _shot(phone), "submit control not unique before tap")
        node = next(iter(targets.values()))
    except AgentError as exc:
        return SubmitOutcome("UNKNOWN", False, _shot(phone), f"pre-tap read failed: {exc.reason_code}")

    journal.advance(attempt, "TAP_INTENT_RECORDED")  # intent before side effect
    try:
        phone.submit_tap_once(dump, node)
    except SubmitTapUnknown:
        return SubmitOutcome("UNKNOWN", True, _shot(phone), "submit tap outcome unknown")
    except AgentError as exc:  # denylist refusal etc.: nothing was sent to the phone
        return SubmitOutcome("UNKNOWN", False, _shot(phone), f"submit tap refused: {exc.reason_code}")
    journal.advance(attempt, "TAPPED")
    return _observe(phone, pack, observe_seconds)


def _shot(phone: PhoneAdapter) -> bytes | None:
    try:
        return phone.screenshot_png()
    except AgentError:
        return None


def _observe(phone: PhoneAdapter, pack: Pack, seconds: float) -> SubmitOutcome:
    """Watch (never touch) the screen after the tap until a known outcome shows twice in a row."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            # the tap forgot every earlier dump; polls after the first need a new one
            screen, _ = phone.read_stable(lambda d: readers.recognize(d, pack), attempts=3, new_dump=True)
        except AgentError:
            time.sleep(0.3)  # a failing dump right after the tap: give the phone a moment
            continue
        if screen in _OBSERVATIONS:
            return SubmitOutcome(_OBSERVATIONS[screen], True, _shot(phone), f"observed {screen}")
        time.sleep(POLL_SECONDS)
    return SubmitOutcome("UNKNOWN", True, _shot(phone), "no known screen after the tap")
