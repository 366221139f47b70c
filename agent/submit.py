"""submit_order_once: the ONLY code that taps 提交订单 (docs/architecture.md "Agent", design §2.1–2.2).

Takes an unforgeable :class:`SubmissionPermit`. Order of effects:
1. the flow journaled PERMIT_RECEIVED when the permit arrived;
2. re-read the confirm page: exactly one submit control (pack selector ∪ generic reader), else no tap;
3. journal TAP_INTENT_RECORDED (committed, fsync'd) — then ONE ``input tap`` (no retry);
4. journal TAPPED; observe the result screen without touching anything
   (:func:`cmbuyer.agent.screens.after_submit.classify`: external cashier or the app's own cashier
   sheet → EXTERNAL_PAYMENT_HANDOFF, a pending-payment order → SUBMITTED, a paid state → UNKNOWN +
   PAYMENT_SUSPECTED, a security challenge, else UNKNOWN + NO_KNOWN_SCREEN). A screenshot is taken
   only while the app itself is in front; of a foreign app only its package is recorded.
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
from cmbuyer.agent.screens.after_submit import Observed, classify
from cmbuyer.agent.screens.pack import Pack

OBSERVE_SECONDS = 10.0  # a deadline, not a wait: the first outcome seen twice in a row ends it
POLL_SECONDS = 0.05


@dataclass(frozen=True)
class SubmitOutcome:
    """What the tap led to. ``reason``: the wire ``observation_reason`` (None when the observation
    says it all); ``package``: the foreign app that was in front (recorded instead of a
    screenshot; ``screenshot`` is then None)."""

    observation: str  # SUBMITTED | EXTERNAL_PAYMENT_HANDOFF | SECURITY_CHALLENGE | UNKNOWN
    tapped: bool
    screenshot: bytes | None
    note: str
    reason: str | None = None
    package: str | None = None


def submit_order_once(
    phone: PhoneAdapter,
    pack: Pack,
    journal: Journal,
    permit: SubmissionPermit,
    *,
    observe_seconds: float = OBSERVE_SECONDS,
) -> SubmitOutcome:
    if not isinstance(permit, SubmissionPermit):
        raise TypeError("a SubmissionPermit is required")
    attempt = permit.attempt_id
    try:
        dump = phone.dump()
        if readers.recognize(dump, pack) != "confirm_order":
            return SubmitOutcome(
                "UNKNOWN", False, _shot(phone), "confirm page gone before the tap", "SUBMIT_CONTROL_GONE"
            )
        pack_nodes = pack.controls["submit"].find(dump)
        targets = {(n.clickable_self_or_ancestor() or n).order: n for n in pack_nodes}
        generic = {n.order for n in safety.submit_controls(dump)}
        if len(targets) != 1 or set(targets) != generic:
            return SubmitOutcome(
                "UNKNOWN", False, _shot(phone), "submit control not unique before tap", "SUBMIT_CONTROL_GONE"
            )
        node = next(iter(targets.values()))
    except AgentError as exc:
        return SubmitOutcome(
            "UNKNOWN", False, _shot(phone), f"pre-tap read failed: {exc.reason_code}", "SUBMIT_CONTROL_GONE"
        )

    journal.advance(attempt, "TAP_INTENT_RECORDED")  # intent before side effect
    try:
        phone.submit_tap_once(dump, node)
    except SubmitTapUnknown:
        return SubmitOutcome("UNKNOWN", True, _shot(phone), "submit tap outcome unknown", "TAP_OUTCOME_UNKNOWN")
    except AgentError as exc:  # denylist refusal etc.: nothing was sent to the phone
        return SubmitOutcome(
            "UNKNOWN", False, _shot(phone), f"submit tap refused: {exc.reason_code}", "SUBMIT_CONTROL_GONE"
        )
    journal.advance(attempt, "TAPPED")
    return _observe(phone, pack, observe_seconds)


def _shot(phone: PhoneAdapter) -> bytes | None:
    """PNG of the screen while the app is in front, else None (never a foreign app's screen)."""
    return phone.app_screenshot_png()


def _look(phone: PhoneAdapter, pack: Pack) -> Observed:
    """One look: a fresh dump (app nodes not required) and the focused package."""
    return classify(*phone.look_after_tap(), pack)


def _observe(phone: PhoneAdapter, pack: Pack, seconds: float) -> SubmitOutcome:
    """Watch (never touch) the screen after the tap until one outcome shows twice in a row; at the
    deadline UNKNOWN with the last look's reason. Screenshot only when the app is in front."""
    deadline = time.monotonic() + seconds
    previous: Observed | None = None
    last: Observed | None = None
    while time.monotonic() < deadline:
        try:
            seen = _look(phone, pack)
        except AgentError:
            previous = None
            time.sleep(0.3)  # a failing dump right after the tap: give the phone a moment
            continue
        last = seen
        if (
            seen.observation is not None
            and previous is not None
            and (seen.observation, seen.reason, seen.package)
            == (previous.observation, previous.reason, previous.package)
        ):
            shot = _shot(phone) if seen.app_in_front else None
            return SubmitOutcome(seen.observation, True, shot, f"observed {seen.what}", seen.reason, seen.package)
        previous = seen
        time.sleep(POLL_SECONDS)
    package = last.package if last is not None else None
    shot = _shot(phone) if last is None or last.app_in_front else None
    what = last.what if last is not None else "no readable dump"
    return SubmitOutcome("UNKNOWN", True, shot, f"no known screen after the tap ({what})", "NO_KNOWN_SCREEN", package)
