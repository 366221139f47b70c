"""submit_order_once: the ONLY code that taps 提交订单 (docs/architecture.md "Agent" and "Safety rules" 1–2).

Takes an unforgeable :class:`SubmissionPermit` (it carries the fence request's readings). Order of effects:
1. the flow journaled PERMIT_RECEIVED when the permit arrived;
2. the last look (:func:`_last_look`): one fresh dump must still be the screen holding exactly one
   submit control, give the same gate-3 readings and payment mode as the fence request, pass the
   denylist at the tap point, and have the submit control on top there (hit test across windows and
   drawing order). Else no tap: NOT_TAPPED journaled at once with UNKNOWN and the reason
   (``SUBMIT_CONTROL_GONE`` / ``NOT_TAPPED_SCREEN_CHANGED`` / ``NOT_TAPPED_OBSCURED``);
3. journal TAP_INTENT_RECORDED (committed, fsync'd) — then ONE ``input tap`` at the point checked, a
   single adb shell command (no retry; never uiautomator2's JSON-RPC click, which its client re-sends);
4. journal TAPPED; observe the result screen without touching anything
   (:func:`cmbuyer.agent.screens.after_submit.classify`: external cashier or the app's own cashier
   sheet → EXTERNAL_PAYMENT_HANDOFF, a pending-payment order → SUBMITTED, a paid state → UNKNOWN +
   PAYMENT_SUSPECTED, a security challenge, else UNKNOWN + NO_KNOWN_SCREEN). A screenshot is taken
   only while the app itself is in front; of a foreign app only its package is recorded.
Any error from the tap itself → UNKNOWN. Never a second tap, whatever happens.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

from cmbuyer.agent import capabilities as cap
from cmbuyer.agent import gates
from cmbuyer.agent.errors import AgentError, DumpError, FlowStop, PhoneError, SubmitTapUnknown
from cmbuyer.agent.journal import Journal
from cmbuyer.agent.journal_states import Phase
from cmbuyer.agent.permit import SubmissionPermit
from cmbuyer.agent.phone.adapter import PhoneAdapter, SubmitTapPlan
from cmbuyer.agent.screens import hit, readers, safety
from cmbuyer.agent.screens.after_submit import Observed, classify
from cmbuyer.agent.screens.packmodel import Pack

log = logging.getLogger(__name__)
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
    observe_seconds: float,
) -> SubmitOutcome:
    """Tap the submit control once for ``permit`` (PERMIT_RECEIVED already journaled by the flow) and
    observe what follows, at most ``observe_seconds`` (:attr:`cmbuyer.agent.waits.FlowWaits.observe`: a
    deadline, not a wait — the first outcome seen twice in a row ends it); see the module docstring for
    the order of effects. Never raises for a
    refused or failed tap (the outcome says so); JournalError propagates (the flow stops the agent)."""
    if not isinstance(permit, SubmissionPermit):
        raise TypeError("a SubmissionPermit is required")
    attempt = permit.attempt_id
    started = time.monotonic()
    check = _last_look(phone, pack, permit)
    if isinstance(check, _Refusal):
        # journaled before anything else (screenshot, events, report): no tap was sent, and from here
        # the journal refuses a tap intent for this attempt; recovery re-sends exactly this result
        journal.record_not_tapped(attempt, check.reason)
        return SubmitOutcome("UNKNOWN", False, _shot(phone), check.note, check.reason)
    journal.advance(attempt, Phase.TAP_INTENT_RECORDED)  # intent before side effect
    try:
        phone.submit_tap_once(check)
    except SubmitTapUnknown:
        return SubmitOutcome("UNKNOWN", True, _shot(phone), "submit tap outcome unknown", "TAP_OUTCOME_UNKNOWN")
    window = f"tap sent {(time.monotonic() - started) * 1000:.0f} ms after the last dump began"
    journal.advance(attempt, Phase.TAPPED)
    log.info("%s", window)
    outcome = _observe(phone, pack, observe_seconds)
    return replace(outcome, note=f"{window}; {outcome.note}")


@dataclass(frozen=True)
class _Refusal:
    """The last look refused the tap: ``reason`` (wire ``observation_reason``) and a short English note."""

    reason: str
    note: str


def _last_look(phone: PhoneAdapter, pack: Pack, permit: SubmissionPermit) -> SubmitTapPlan | _Refusal:
    """One fresh dump, and on it, in order (docs/agent.md "The last moment before the tap"):

    1. the dump reads and is still the screen holding the submit control → else ``SUBMIT_CONTROL_GONE``;
    2. the gate-3 reader (:func:`cmbuyer.agent.capabilities.confirm_reading`, the one READ_CONFIRM_PAGE
       uses) and the payment-mode gate give exactly the readings the fence request carried
       (``permit.proof``: each dimension, unit price, quantity, total, one submit control, payment
       mode) → else ``NOT_TAPPED_SCREEN_CHANGED``;
    3. the pack's submit selector and the generic reader name the same one control, and the payment
       denylist at the tap point passes → else ``SUBMIT_CONTROL_GONE``;
    4. a hit test at the tap point finds the submit control (or a node inside it) on top, across all
       windows and in drawing order (:mod:`cmbuyer.agent.screens.hit`) → else ``NOT_TAPPED_OBSCURED``.

    Returns the tap plan (the point checked is the point tapped) or the refusal."""
    proof = permit.proof
    try:
        dump = phone.dump()
        if readers.recognize(dump, pack) != "confirm_order":
            return _Refusal("SUBMIT_CONTROL_GONE", "confirm page gone before the tap")
        # the fence request's options are keyed by the task's dimension names
        now = cap.confirm_reading(dump, pack, gates.wanted_options(proof.selected_options))
    except (DumpError, PhoneError) as exc:  # no readable dump: whether the control is there is unknown
        return _Refusal("SUBMIT_CONTROL_GONE", f"pre-tap read failed: {exc.reason_code}")
    except AgentError as exc:  # the gate-3 reader refused the screen (a sold-out option, other dimensions)
        return _Refusal("NOT_TAPPED_SCREEN_CHANGED", f"pre-tap reading failed: {exc.reason_code}")
    try:
        mode: str | None = gates.payment_gate(now.payment.problems, now.payment.mode)
    except FlowStop:
        mode = None
    changed = gates.fenced_differences(now.gate3, mode, proof)
    if changed:
        return _Refusal("NOT_TAPPED_SCREEN_CHANGED", "changed since the fence: " + ", ".join(changed))
    try:
        targets = {(n.clickable_self_or_ancestor() or n).order: n for n in pack.controls["submit"].find(dump)}
        if len(targets) != 1 or set(targets) != {n.order for n in safety.submit_controls(dump)}:
            return _Refusal("SUBMIT_CONTROL_GONE", "submit control not unique before tap")
        plan = phone.plan_submit_tap(dump, next(iter(targets.values())))
    except AgentError as exc:  # denylist refusal etc.: nothing is sent to the phone
        return _Refusal("SUBMIT_CONTROL_GONE", f"submit tap refused: {exc.reason_code}")
    verdict = hit.hit_test(dump, plan.target, plan.point)
    if not verdict.clear:
        return _Refusal("NOT_TAPPED_OBSCURED", f"tap point covered: {verdict.why}")
    return plan


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
        if seen.observation is not None and seen.app_in_front:
            # the outcome may be seen again by the next look: its screenshot between the two.
            # The shot itself spaces the two looks (70-100 ms on a phone), so no poll pause is added:
            # the pause only keeps a screen that is still loading from being dumped back to back.
            phone.shoot_before_next_look()
            continue
        time.sleep(POLL_SECONDS)
    package = last.package if last is not None else None
    shot = _shot(phone) if last is None or last.app_in_front else None
    what = last.what if last is not None else "no readable dump"
    return SubmitOutcome("UNKNOWN", True, shot, f"no known screen after the tap ({what})", "NO_KNOWN_SCREEN", package)
