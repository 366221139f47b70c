"""The supervised wait before the fence (docs/agent.md "Supervised orders").

A device–pack pair is *supervised* until a person has confirmed enough of its orders (the server
decides at claim time and says so in claim-next's ``attempt.supervised``). On a supervised attempt the
flow, after every gate passed and right before it asks for the fence, calls :func:`wait_for_approval`:

1. the outbox is drained, so the step events and the gate-3 screenshot (``CONFIRM_PAGE_GATE_3``) are
   stored on the server and the screenshot's asset id is known;
2. one approval request carries that asset id and the readings the fence body will carry (the same
   8 values, ``client.approval_readings``); its ``approval_key`` is journaled like every other key;
3. then, every ``CMBUYER_AGENT_APPROVAL_POLL_SECONDS`` (default 3): the screen that holds the submit
   control is read again with the READ_CONFIRM_PAGE reader and the payment-mode gate, together with
   the app's clickable controls (a pop-up over the page adds its own), and the approval's state is
   read (read-only route). The lease keeper keeps renewing the lease on its own
   thread all along.

Nothing here taps — no control, no dismissal, no swipe: the phone is only dumped (the only phone call
is :meth:`PhoneAdapter.read_stable`; tests/agent/test_approval.py checks this on the source).

It returns only when a person APPROVED and a last read of the screen still equals what was read at
gate 3; the flow then asks for the fence exactly as without supervision (the server checks the
approval again there). Otherwise it raises, and the flow stops before the fence as for any gate:

- ``REJECTED_BY_REVIEWER`` — a person rejected the readings;
- ``SCREEN_CHANGED_WHILE_WAITING`` — a reading differs from gate 3's, a control appeared or went
  (a pop-up, a dialog), the screen is not the one with the submit control any more, or it cannot be
  read (fail closed);
- ``APPROVAL_TIMEOUT`` — the wait exceeded ``CMBUYER_AGENT_APPROVAL_TIMEOUT_SECONDS`` (default 600),
  or the lease or the authorization would end within the fence margin;
- ``SERVER_UNREACHABLE`` — also when a status answer names another approval than the one requested;
- ``LEASE_LOST`` — the lease keeper lost the lease (a renewal was refused), or the server reports the
  approval ``VOID``: it voids a live approval when the attempt closes under the phone (cancelled, reset,
  swept) — the claim is gone, as with a refused renewal — or when other readings were sent for the
  attempt, which this agent never does; ``SHUTDOWN`` — a stop was
  requested (SIGTERM): the wait wakes at once and stops; phone (adb) and server errors keep their own
  codes.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from cmbuyer.agent import capabilities as cap
from cmbuyer.agent import gates
from cmbuyer.agent.errors import AgentError, FlowStop, LeaseLost, PhoneError, ServerError, ShutdownRequested
from cmbuyer.agent.lease import LeaseKeeper
from cmbuyer.agent.model import ApprovalStatus, Claim, SubmissionProof
from cmbuyer.agent.outbox import Outbox
from cmbuyer.agent.phone.adapter import PhoneAdapter
from cmbuyer.agent.screens.dump import Dump
from cmbuyer.agent.screens.packmodel import Pack
from cmbuyer.schemas import parse_utc_time

DEFAULT_TIMEOUT_SECONDS = 600.0
DEFAULT_POLL_SECONDS = 3.0
GATE3_KIND = "CONFIRM_PAGE_GATE_3"
WAITING_LINE = "等待有人在管理页面的任务详情里批准"
PROGRESS_EVERY_SECONDS = 30.0  # how often the progress line repeats while waiting


@dataclass(frozen=True)
class ApprovalSettings:
    """How long the agent waits for a person and how often it looks (seconds, finite, > 0; the poll
    interval not longer than the timeout). Sources: ``CMBUYER_AGENT_APPROVAL_TIMEOUT_SECONDS`` and
    ``CMBUYER_AGENT_APPROVAL_POLL_SECONDS`` (agent/settings.py), else 600 and 3."""

    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    poll_seconds: float = DEFAULT_POLL_SECONDS

    def __post_init__(self) -> None:
        for name in ("timeout_seconds", "poll_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a number of seconds > 0")
        if self.poll_seconds > self.timeout_seconds:
            raise ValueError("the approval poll interval must not be longer than the approval timeout")


class ApprovalApi(Protocol):
    """The two device routes of the wait (implemented by :class:`cmbuyer.agent.client.HttpDeviceApi`)."""

    def request_approval(self, claim: Claim, proof: SubmissionProof, screenshot_asset_id: str) -> ApprovalStatus: ...

    def approval_status(self, claim: Claim, approval_id: str) -> ApprovalStatus: ...


@dataclass
class WaitContext:
    """What the wait needs from the flow. ``event(step, outcome, reason_code, summary)`` queues a task
    event (the flow's outbox); ``settings`` the wait's timeout and poll interval (the CLI's, through the
    runner and the flow); ``clock`` is monotonic seconds."""

    phone: PhoneAdapter
    pack: Pack
    api: ApprovalApi
    outbox: Outbox
    stop: threading.Event
    lease: LeaseKeeper | None
    event: Callable[..., None]
    progress: Callable[[str], None]
    fence_margin: float
    settings: ApprovalSettings = field(default_factory=ApprovalSettings)
    clock: Callable[[], float] = time.monotonic


class _Deadlines:
    """The three ends of the wait on the agent's monotonic clock: the configured timeout, the lease
    (the lease keeper's own view) and the authorization (``authorization_expires_at`` against the
    ``server_now`` of the latest approval answer, counted from when that request was sent — the
    request's travel time only makes it earlier)."""

    def __init__(self, ctx: WaitContext, claim: Claim, timeout: float) -> None:
        self._ctx = ctx
        self._auth_expires = parse_utc_time(claim.authorization_expires_at)
        self.started = ctx.clock()
        self.timeout = timeout
        self._auth_ends: float | None = None

    def seen(self, status: ApprovalStatus, sent_at: float) -> None:
        left = (self._auth_expires - parse_utc_time(status.server_now)).total_seconds()
        self._auth_ends = sent_at + left

    def elapsed(self) -> float:
        return self._ctx.clock() - self.started

    def check(self) -> None:
        """Raise SHUTDOWN / LEASE_LOST / APPROVAL_TIMEOUT when the wait must end now."""
        ctx = self._ctx
        if ctx.stop.is_set():
            raise ShutdownRequested("stop requested while waiting for approval")
        if ctx.lease is not None:
            if ctx.lease.lost:
                raise LeaseLost("lease lost while waiting for approval")
            if ctx.lease.remaining() < ctx.fence_margin:
                raise FlowStop(
                    "the lease would end within the fence margin while waiting for approval", "APPROVAL_TIMEOUT"
                )
        if self._auth_ends is not None and self._auth_ends - ctx.clock() < ctx.fence_margin:
            raise FlowStop(
                "the authorization would end within the fence margin while waiting for approval", "APPROVAL_TIMEOUT"
            )
        if self.elapsed() >= self.timeout:
            raise FlowStop(f"no decision within {self.timeout:g} s", "APPROVAL_TIMEOUT")
        ctx.outbox.raise_if_failed()

    def sleep_for(self, poll: float) -> float:
        return max(0.0, min(poll, self.timeout - self.elapsed()))


def _controls(dump: Dump) -> tuple[tuple[object, ...], ...]:
    """The app's clickable nodes as read (text, flags, bounds): a pop-up, a dialog or a sheet that
    opens over the screen adds its own buttons even when it hides none of the readings."""
    return tuple(n.signature() for n in dump.app_nodes() if n.clickable)


def _read_screen(
    ctx: WaitContext, at_gate3: cap.ConfirmReading, proof: SubmissionProof, wanted: dict[str, str]
) -> tuple[tuple[object, ...], ...]:
    """Read the screen holding the submit control again (fresh dumps, the READ_CONFIRM_PAGE reader,
    the payment-mode gate). Anything that differs from gate 3's reading or cannot be read raises
    SCREEN_CHANGED_WHILE_WAITING; adb errors keep their own code (the phone, not the screen).
    Returns the app's clickable controls (compared by the caller from one read to the next)."""
    try:
        (now, controls), _ = ctx.phone.read_stable(
            lambda d: (cap.confirm_reading(d, ctx.pack, wanted), _controls(d)), new_dump=True
        )
        mode = gates.payment_gate(now.payment.problems, now.payment.mode)
    except PhoneError:
        raise
    except AgentError as exc:
        raise FlowStop(
            f"screen unreadable while waiting for approval ({exc.reason_code})", "SCREEN_CHANGED_WHILE_WAITING"
        ) from exc
    if now != at_gate3 or mode != proof.payment_mode:
        raise FlowStop("a reading changed while waiting for approval", "SCREEN_CHANGED_WHILE_WAITING")
    return controls


def _same_screen(
    ctx: WaitContext,
    at_gate3: cap.ConfirmReading,
    proof: SubmissionProof,
    wanted: dict[str, str],
    controls: tuple[tuple[object, ...], ...],
) -> None:
    if _read_screen(ctx, at_gate3, proof, wanted) != controls:
        raise FlowStop("something opened over the screen while waiting for approval", "SCREEN_CHANGED_WHILE_WAITING")


def _same_approval(status: ApprovalStatus, approval_id: str) -> ApprovalStatus:
    """``status`` when it answers for ``approval_id``; an answer about another approval is no decision
    on this one (fail closed: SERVER_UNREACHABLE, as for any answer that breaks the contract)."""
    if status.approval_id != approval_id:
        raise ServerError("approval status: the answer names another approval")
    return status


def wait_for_approval(
    ctx: WaitContext, claim: Claim, proof: SubmissionProof, reading: cap.ConfirmReading, wanted: dict[str, str]
) -> ApprovalStatus:
    """Wait until a person approves ``proof`` (the fence body's readings, read as ``reading`` on the
    screen holding the submit control; ``wanted`` the task's ``{dimension: value}``). Returns the APPROVED
    status; raises :class:`~cmbuyer.agent.errors.AgentError` with the reason code of the module
    docstring otherwise. Never taps."""
    settings = ctx.settings
    # The approval names the gate-3 screenshot: it (and every event before it) must be stored first.
    ctx.outbox.drain()
    asset_id = ctx.outbox.asset_id(GATE3_KIND)
    if asset_id is None:
        raise FlowStop("the gate 3 screenshot was not stored", "INTERNAL_ERROR")
    deadlines = _Deadlines(ctx, claim, settings.timeout_seconds)
    deadlines.check()
    # The first read: the readings are still gate 3's, and the controls on screen now are the ones
    # every later read must find again.
    controls = _read_screen(ctx, reading, proof, wanted)
    sent_at = ctx.clock()
    status = ctx.api.request_approval(claim, proof, asset_id)
    deadlines.seen(status, sent_at)
    ctx.event("APPROVAL_REQUEST", "OK", None, "approval requested with the gate 3 screenshot")
    ctx.event("APPROVAL_WAIT", "STARTED", None, WAITING_LINE)
    ctx.progress(WAITING_LINE)
    next_line = PROGRESS_EVERY_SECONDS
    try:
        while status.state == "WAITING":
            deadlines.check()
            if ctx.stop.wait(deadlines.sleep_for(settings.poll_seconds)):
                raise ShutdownRequested("stop requested while waiting for approval")
            deadlines.check()
            _same_screen(ctx, reading, proof, wanted, controls)
            sent_at = ctx.clock()
            status = _same_approval(ctx.api.approval_status(claim, status.approval_id), status.approval_id)
            deadlines.seen(status, sent_at)
            if deadlines.elapsed() >= next_line and status.state == "WAITING":
                ctx.progress(
                    f"{WAITING_LINE}（已等 {deadlines.elapsed():.0f} 秒，最多 {settings.timeout_seconds:g} 秒）"
                )
                next_line += PROGRESS_EVERY_SECONDS
        if status.state == "REJECTED":
            raise FlowStop("a person rejected what the phone read", "REJECTED_BY_REVIEWER")
        if status.state != "APPROVED":  # VOID (the schema allows nothing else)
            raise LeaseLost("the server voided the approval: the attempt is no longer this phone's claim")
        # Approved: the screen must still show what the person approved, and the lease and the
        # authorization must leave room for the fence (the decision may come late in the wait).
        _same_screen(ctx, reading, proof, wanted, controls)
        if ctx.stop.is_set():
            raise ShutdownRequested("stop requested while waiting for approval")
        if ctx.lease is not None and ctx.lease.lost:
            raise LeaseLost("lease lost while waiting for approval")
        deadlines.timeout = math.inf  # the decision came in time; only the lease/authorization remain
        deadlines.check()
    except AgentError as exc:
        ctx.event("APPROVAL_WAIT", "FAILED", exc.reason_code, exc.summary)
        raise
    ctx.event("APPROVAL_WAIT", "OK", None, "approved by a person")
    ctx.progress("已有人批准：申请提交围栏")
    return status
