"""The purchase flow orchestrator (docs/agent.md "The run loop").

claim → open product → buy button (the pack's buy path) → the layout is recognized from the sheet that
opens (SKU sheet or order sheet) → select options (scrolling inside their lists) → gate 1 (+screenshot)
→ quantity → gate 2 (+screenshot) → [SKU sheet: confirm control → confirm page] → read the screen
holding the submit control → payment-mode gate → gate 3 (+screenshot) → [supervised attempt: wait
for a person's approval, re-reading the screen, never tapping — agent/approval.py] → lease check →
submission-fence with the values read → journal PERMIT_RECEIVED → submit_order_once → journal
observation (+ foreign package, never its screenshot) → optional read-only confirmation
(agent/confirm.py: order number + ORDER_CONFIRMATION screenshot) → result (observation_reason,
order_sn) → RESULT_REPORTED.

Before the fence any failure backs out with system BACK, uploads a FAILURE screenshot and calls
``fail`` with its reason code. After the permit nothing retries a tap; every doubt is ``UNKNOWN``.
This is the only module besides ``client``/``ports``/``submit`` that imports ``permit``.

Step events and the gate screenshots go through an :class:`~cmbuyer.agent.outbox.Outbox` (in
order, on a background thread): the phone goes on with the next step while they are sent, a send
failure stops the flow at its next step, and the fence is requested only after the outbox has
drained — every event and all three gate screenshots acknowledged by the server.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from cmbuyer.agent import approval, confirm, gates, logfields
from cmbuyer.agent import capabilities as cap
from cmbuyer.agent.errors import AgentError, FenceReplayed, ShutdownRequested
from cmbuyer.agent.journal import Journal, JournalError
from cmbuyer.agent.journal_states import Phase
from cmbuyer.agent.lease import LeaseKeeper
from cmbuyer.agent.model import (
    AttemptFailure,
    Claim,
    ClaimedPurchase,
    ScreenshotAsset,
    SubmissionResult,
    TaskEvent,
    new_key,
    utc_now_wire,
)
from cmbuyer.agent.outbox import Outbox
from cmbuyer.agent.permit import SubmissionPermit
from cmbuyer.agent.phone.adapter import PhoneAdapter
from cmbuyer.agent.ports import ResultSink
from cmbuyer.agent.prefence import PrefenceEngine, PrefenceOrder
from cmbuyer.agent.recovery import send_fail
from cmbuyer.agent.screens.packmodel import Pack
from cmbuyer.agent.submit import submit_order_once
from cmbuyer.agent.waits import FlowWaits

log = logging.getLogger(__name__)
FENCE_LEASE_MARGIN = 5.0  # seconds of lease we want left when asking for the fence


@dataclass(frozen=True)
class FlowResult:
    outcome: str  # FAILED | SUBMITTED | EXTERNAL_PAYMENT_HANDOFF | SECURITY_CHALLENGE | UNKNOWN
    reason_code: str | None
    tapped: bool


class PurchaseFlow:
    """One claimed purchase on one phone (module docstring). ``waits``: the flow's deadlines (production's
    are ``FlowWaits()``, the runner passes its config's); ``fence_margin``: seconds of lease wanted at the
    fence request; ``buy_path``: ``single``/``group`` (the CLI's ``CMBUYER_AGENT_BUY_PATH``); ``approval_settings``:
    the supervised wait's timeout and poll interval (the CLI's ``CMBUYER_AGENT_APPROVAL_*``; defaults when None)."""

    def __init__(
        self,
        *,
        phone: PhoneAdapter,
        pack: Pack,
        sink: ResultSink,
        journal: Journal,
        waits: FlowWaits,
        stop: threading.Event | None = None,
        lease: LeaseKeeper | None = None,
        progress: Callable[[str], None] | None = None,
        fence_margin: float = FENCE_LEASE_MARGIN,
        buy_path: str = "single",
        approval_settings: approval.ApprovalSettings | None = None,
    ) -> None:
        self.phone = phone
        self.buy_path = buy_path
        self.approval_settings = approval_settings or approval.ApprovalSettings()
        self.pack = pack
        self.sink = sink
        self.journal = journal
        self.waits = waits
        self.stop = stop or threading.Event()
        self.lease = lease
        self.progress = progress or (lambda line: None)
        self.fence_margin = fence_margin
        self.in_critical_section = threading.Event()
        # the gates' screenshots go through phone.gate_screenshot (the outbox observer below): let the
        # gates' stable reads take them between their two dumps
        phone.gate_shots_between_dumps = True
        self._outbox: Outbox | None = None

    # --- events & evidence (best effort before the fence is NOT ok: server down → stop) -------
    def _event(self, claim: Claim, step: str, outcome: str, reason: str | None = None, summary: str = "") -> None:
        with logfields.step(step, reason):  # JSON log lines: the event's step and reason code as fields
            self.progress(f"{step} {outcome}{' ' + reason if reason else ''}")
        event = TaskEvent(step, outcome, reason, summary[:200])
        if self._outbox is not None:
            self._outbox.events([event])
        else:
            self.sink.append_events(claim, [event])

    def _gate_evidence(self, kind: str) -> None:
        """Capture the gate screenshot now (before the next tap); encode + upload on the outbox."""
        assert self._outbox is not None
        captured_at = utc_now_wire()
        # black outside the app's windows (status bar, notification shade, navigation bar)
        self._outbox.upload(kind, self.phone.gate_screenshot(), captured_at)

    def _evidence(self, claim: Claim, kind: str) -> str | None:
        """Upload a screenshot taken only while the app itself is in front (a stop can leave a
        foreign app, e.g. a cashier, in front: the evidence rules (docs/api.md "POST /api/v1/tasks/{id}/evidence")
        refuse photographing it) → asset id or None."""
        png = self.phone.app_screenshot_png()
        if png is None:
            return None
        return self.sink.upload_screenshot(claim, ScreenshotAsset(kind, png)).asset_id

    def _checkpoint(self, claim: Claim) -> None:
        """Between steps: honour SIGTERM, a lost lease and a failed send (only before the fence)."""
        if self.stop.is_set():
            raise ShutdownRequested("stop requested")
        if self.lease is not None and self.lease.lost:
            raise AgentError("lease lost", "LEASE_LOST")
        if self._outbox is not None:
            self._outbox.raise_if_failed()

    # --- the flow -----------------------------------------------------------------------------
    def run(self, purchase: ClaimedPurchase) -> FlowResult:
        self._outbox = Outbox(self.sink, purchase.claim)
        normal = False
        try:
            result = self._run(purchase)
            normal = True
            return result
        finally:
            outbox, self._outbox = self._outbox, None
            if outbox is not None:  # empty by now unless we are leaving on an exception (stop now)
                outbox.close(drop=not normal)

    def _run(self, purchase: ClaimedPurchase) -> FlowResult:
        """Everything before the fence runs in the shared engine (agent/prefence.py, on every layout
        the pack declares: docs/agent.md "Layouts"), reporting to this flow's outbox; then the fence carries what
        was read on the screen holding the submit control."""
        claim, task = purchase.claim, purchase.task
        engine = PrefenceEngine(
            phone=self.phone,
            pack=self.pack,
            observer=_OutboxObserver(self, claim),
            buy_path=self.buy_path,
            waits=self.waits,
        )
        order = PrefenceOrder(task.goods_id, task.sku_options, task.quantity, task.max_total_price)
        try:
            outcome = engine.run(order)
            proof = outcome.proof
            # Gate 3 passed, its screenshot is queued, the proof (values read on the screen) is final;
            # nothing has asked the server for anything yet.
            if claim.supervised:  # a person approves these readings first (agent/approval.py)
                assert self._outbox is not None  # run() opened it for this purchase
                approval.wait_for_approval(
                    approval.WaitContext(
                        phone=self.phone,
                        pack=self.pack,
                        api=self.sink,
                        outbox=self._outbox,
                        stop=self.stop,
                        lease=self.lease,
                        event=lambda *e: self._event(claim, *e),
                        progress=self.progress,
                        fence_margin=self.fence_margin,
                        settings=self.approval_settings,
                    ),
                    claim,
                    proof,
                    outcome.reading,
                    gates.wanted_options(task.sku_options),
                )
            self._event(claim, "FENCE", "STARTED")
            # Everything sent so far — the step events and the three gate screenshots — must be
            # acknowledged by the server before the fence is requested (raises the first failure).
            assert self._outbox is not None
            self._outbox.drain()
            self._checkpoint(claim)
            if self.lease is not None:
                self.lease.ensure(self.fence_margin)
            # From the fence request on, a stop request waits until the tap is done and reported.
            self.in_critical_section.set()
            permit = self.sink.create_submission_fence(claim, proof)
        except AgentError as exc:
            self.in_critical_section.clear()
            return self._fail_before_fence(claim, exc)
        return self._submit(claim, permit, _Expected(proof.confirm_page_amount, task.title))

    def _fail_before_fence(self, claim: Claim, exc: AgentError) -> FlowResult:
        if isinstance(exc, FenceReplayed):  # the fence committed: no permit, no tap
            return self._fence_replayed(claim, exc.submission_id)
        reason = exc.reason_code
        log.info("stopping before the fence: %s", reason)
        with logfields.step(None, reason):
            self.progress(f"在提交围栏前停止：{reason}")
        try:
            cap.back_out(self.phone, self.pack)
        except AgentError:
            pass
        # What was queued before the stop is delivered (or dropped after a send failure) before
        # the fail closes the attempt; from here on everything is sent inline.
        outbox, self._outbox = self._outbox, None
        if outbox is not None:
            pending = outbox.close()
            if pending is not None and not isinstance(pending, AgentError):
                raise pending
        evidence = None
        try:
            evidence = self._evidence(claim, "FAILURE")
        except AgentError:
            pass
        try:
            self.sink.append_events(claim, [TaskEvent("BACK_OUT", "OK", reason, "backed out before fence")])
        except AgentError:
            pass
        lease_lost = reason in ("LEASE_LOST", "LEASE_TOO_SHORT") or (self.lease is not None and self.lease.lost)
        note = send_fail(self.journal, self.sink, claim, AttemptFailure(reason, exc.summary, evidence))
        self.progress(note)
        if lease_lost:
            self.journal.set_hold("下单途中租约丢失：下一次领取前需要有人处理")
        return FlowResult("FAILED", reason, False)

    def _fence_replayed(self, claim: Claim, submission_id: str) -> FlowResult:
        """A replayed fence (our first answer was lost in transit): the fence exists on the server,
        we hold no permit, we never tap. Journal it (NO_PERMIT, UNKNOWN decided), then report."""
        self.progress("围栏请求得到的是重放应答：没有点击许可，不点击；上报 UNKNOWN")
        key = self.journal.record_fence_without_permit(claim.attempt_id, submission_id)
        try:
            self.sink.report_recovered_result(
                submission_id=submission_id,
                attempt_id=claim.attempt_id,
                claim_token=claim.claim_token,
                result=SubmissionResult("UNKNOWN", None),
                result_key=key,
            )
            self.journal.advance(claim.attempt_id, Phase.RESULT_REPORTED)
        except AgentError as err:
            log.warning("UNKNOWN not reported yet (%s); recovery will re-send it", err.reason_code)
        return FlowResult("UNKNOWN", "FENCE_REFUSED", False)

    def _submit(self, claim: Claim, permit: SubmissionPermit, expected: _Expected) -> FlowResult:
        try:
            return self._submit_journaled(claim, permit, expected)
        except JournalError:
            # The journal cannot record the permit/phase: never tap (or tap no more), tell the
            # server UNKNOWN with a key we cannot persist, and stop the agent (fail closed).
            log.error("journal failed inside the submit window; reporting UNKNOWN and stopping")
            self.progress("取得围栏后本地日志出错（JOURNAL FAILED）：上报 UNKNOWN，停止代理")
            try:
                self.sink.report_recovered_result(
                    submission_id=permit.submission_id,
                    attempt_id=claim.attempt_id,
                    claim_token=claim.claim_token,
                    result=SubmissionResult("UNKNOWN", None),
                    result_key=new_key(),
                )
            except AgentError as err:
                log.error(
                    "UNKNOWN not delivered (%s): the server's sweeper moves the fenced task to "
                    "reconciliation when the lease ends",
                    err.reason_code,
                )
            raise
        finally:
            self.in_critical_section.clear()

    def _submit_journaled(self, claim: Claim, permit: SubmissionPermit, expected: _Expected) -> FlowResult:
        """Permit → one tap → observation (journaled) → optional read-only confirmation (each step
        journaled) → one result report carrying observation_reason and order_sn. A crash anywhere
        after TAP_INTENT_RECORDED is recovered by reporting the journaled result; nothing taps
        submit again."""
        self.journal.record_permit(claim.attempt_id, permit.submission_id)
        self.progress("围栏成功（FENCE OK）：已收到点击许可")
        outcome = submit_order_once(self.phone, self.pack, self.journal, permit, observe_seconds=self.waits.observe)
        seen = outcome.observation + (f" {outcome.reason}" if outcome.reason else "")
        if outcome.package:  # a foreign app was in front: its package instead of a screenshot
            seen += f"; in front: {outcome.package}"
        events = [
            TaskEvent("SUBMIT_TAP", "OK" if outcome.tapped else "FAILED", None, outcome.note[:200]),
            TaskEvent("OBSERVE_RESULT", "OK", None, seen[:200]),
        ]
        outbox = self._outbox
        if outbox is not None:
            outbox.events(events)  # sent while the observation screenshot uploads (best effort)
        evidence = self._upload_after_tap(claim, "POST_SUBMIT_OBSERVATION", outcome.screenshot)
        self.journal.record_observation(
            claim.attempt_id, outcome.observation, evidence, reason=outcome.reason, foreground_package=outcome.package
        )
        order_sn = self._confirm(claim, outcome.observation, expected)
        if outbox is not None:
            try:
                outbox.drain()
            except AgentError:
                pass
        else:
            try:
                self.sink.append_events(claim, events)
            except AgentError:
                pass
        try:
            self.sink.report_submission_result(
                permit,
                SubmissionResult(outcome.observation, evidence, observation_reason=outcome.reason, order_sn=order_sn),
            )
            self.journal.advance(claim.attempt_id, Phase.RESULT_REPORTED)
        except AgentError as exc:
            log.warning("result not reported yet (%s); recovery will re-send it", exc.reason_code)
        self.progress(f"RESULT {outcome.observation}" + (f" {outcome.reason}" if outcome.reason else ""))
        # The observation reason goes to the runner's hold policy (agent/holds.py): a phone-level
        # one (PAYMENT_SUSPECTED, NO_KNOWN_SCREEN, SECURITY_CHALLENGE_AFTER_TAP) holds the phone.
        return FlowResult(outcome.observation, outcome.reason, outcome.tapped)

    def _upload_after_tap(self, claim: Claim, kind: str, png: bytes | None) -> str | None:
        """Best-effort upload after the fence: a failure leaves the result without this evidence."""
        if not png:
            return None
        try:
            return self.sink.upload_screenshot(claim, ScreenshotAsset(kind, png)).asset_id
        except AgentError:
            return None

    def _event_after_tap(self, claim: Claim, event: TaskEvent) -> None:
        with logfields.step(event.step, event.reason_code):
            self.progress(f"{event.step} {event.outcome}: {event.summary}")
        if self._outbox is not None:
            self._outbox.events([event])
            return
        try:
            self.sink.append_events(claim, [event])
        except AgentError:
            pass

    def _confirm(self, claim: Claim, observation: str, expected: _Expected) -> str | None:
        """The pack's read-only confirmation (agent/confirm.py), when it applies. Returns the
        order number to report (None when not run, not found or ambiguous); the observation is
        never changed by it."""
        if not confirm.wanted(self.pack, observation):
            return None
        self._event_after_tap(
            claim, TaskEvent("CONFIRM_ORDER_READONLY", "STARTED", None, "read-only order confirmation")
        )

        def should_stop() -> bool:
            return self.stop.is_set() or (self.lease is not None and self.lease.lost)

        result = confirm.confirm_order_readonly(
            self.phone,
            self.pack,
            self.journal,
            claim.attempt_id,
            amount=expected.amount,
            title=expected.title,
            should_stop=should_stop,
            progress=self.progress,
            waits=self.waits,
            taken=self.journal.order_sns_taken(claim.attempt_id),
        )
        asset = self._upload_after_tap(claim, "ORDER_CONFIRMATION", result.screenshot)
        self.journal.record_confirmation(claim.attempt_id, result.order_sn, asset, read=result.read)
        summary = result.note + (f"; order {result.order_sn}" if result.order_sn else "")
        self._event_after_tap(
            claim, TaskEvent("CONFIRM_ORDER_READONLY", "OK" if result.read else "FAILED", None, summary[:200])
        )
        return result.order_sn


@dataclass(frozen=True)
class _Expected:
    """What the read-only confirmation matches the order list against: the gate-3 total read on
    the submit screen and the goods title when known."""

    amount: Decimal | None
    title: str | None


class _OutboxObserver:
    """The engine's observer for the real flow: events and gate screenshots go to the flow's outbox
    (in order, off the phone's critical path); the checkpoint honours stop, lease and send failures."""

    def __init__(self, flow: PurchaseFlow, claim: Claim) -> None:
        self._flow = flow
        self._claim = claim

    def event(self, step: str, outcome: str, reason: str | None = None, summary: str = "") -> None:
        self._flow._event(self._claim, step, outcome, reason, summary)

    def gate_evidence(self, kind: str, read: dict[str, Any]) -> None:
        self._flow._gate_evidence(kind)  # the server re-reads nothing from `read`: the fence proves it

    def checkpoint(self) -> None:
        self._flow._checkpoint(self._claim)
