"""Daemon loop (docs/agent.md "The run loop"): recovery → heartbeat → claim-next → flow, one phone per process.

Loop, until a stop is requested:

1. **Recovery before dispatch** (docs/agent.md "The run loop"): anything the journal still owes the server — a
   submission without ``RESULT_REPORTED``, an attempt left open before the fence, a ``fail`` that was
   not delivered — is settled first (:func:`cmbuyer.agent.recovery.recover`). While anything is still
   owed (server down) the agent does not claim; it retries every poll.
2. **Heartbeat** every ``heartbeat_interval_seconds`` the server reported (and at once when the
   reported state changes). State: ``READY``; ``NO_PACK`` (no selector pack for the running
   versionName+versionCode), ``APP_MISSING``, ``ADB_OFFLINE``, ``NEEDS_PERSON`` (a local hold), or
   ``BUSY`` (sent by a side thread while a flow runs).
3. **Claim** only when the heartbeat said ``app_version_allowed``, a pack exists, no hold is set and
   recovery is clear. An empty answer (204) → sleep ``poll_seconds`` (default 1 s) and poll again;
   after a task → poll again at once.
4. **Hold policy** (:mod:`cmbuyer.agent.holds`): every attempt's ending is counted once in the
   journal — at start-up, an attempt the journal shows open (the process died with it) counts as a
   crash; after a flow, its result. A phone-level reason code or a streak at its limit sets the hold
   at once and heartbeats ``NEEDS_PERSON``; nothing is claimed until ``journal --clear-hold``.

5. **Server refusals and outages** (docs/agent.md "When the server refuses the agent"): a 401 on the
   heartbeat or claim-next (wrong credentials, or the device was revoked) and a server that cannot be
   reached are each logged as one line saying what to check (with the server URL), then retried after
   1, 2, 4 … 60 s (:class:`Backoff`); the same failure again is logged at most once a minute. ``run --once``
   ends at the first such heartbeat failure: exit code 2 for a 401, 1 for an unreachable server.
6. **Pause and pacing**: the heartbeat answer's ``paused`` / ``paced_until`` are logged once
   when they change; claim-next answers 204 meanwhile, and an open claim still runs to its end.

Signals (SIGTERM/SIGINT): the first asks the flow to stop after the current step (the flow checks
between steps; from the fence request to the journaled result it finishes — never stops between
permit and tap) and ends the loop. A second signal raises :class:`StopNow` at once, unless inside
that window, where the runner exits right after the result is journaled.
"""

from __future__ import annotations

import logging
import shlex
import shutil
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from cmbuyer.agent import logfields
from cmbuyer.agent.approval import ApprovalSettings
from cmbuyer.agent.client import HttpDeviceApi, wire_summary
from cmbuyer.agent.errors import (
    AgentError,
    AppVersionNotAllowed,
    ClaimRequiresManual,
    ExitCode,
    PackError,
    ServerUnreachable,
    Unauthorized,
)
from cmbuyer.agent.flow import FlowResult, PurchaseFlow
from cmbuyer.agent.heap import fix_mmap_threshold
from cmbuyer.agent.holds import AttemptEnd, HoldPolicy, Streaks, settle
from cmbuyer.agent.journal import Journal
from cmbuyer.agent.journal_states import ClaimState
from cmbuyer.agent.lease import LeaseKeeper
from cmbuyer.agent.model import Session
from cmbuyer.agent.pack.resolve import resolve
from cmbuyer.agent.phone.adapter import PhoneAdapter
from cmbuyer.agent.recovery import recover
from cmbuyer.agent.screens.packmodel import Pack
from cmbuyer.agent.waits import FlowWaits
from cmbuyer.schemas import enum_values

log = logging.getLogger(__name__)
DEFAULT_HEARTBEAT_SECONDS = 10.0
REASON_CODES = frozenset(enum_values("common", "/$defs/reason_code/enum"))


class StopNow(BaseException):
    """Second signal outside the critical window."""


def hold_report(journal: Journal) -> dict[str, Any] | None:
    """The heartbeat's ``hold``: the journal's hold line, its leading reason code when it names
    one, and the attempt the hold was set on; None when not held. ``run`` and ``doctor`` both send it (a
    heartbeat without it tells the server the hold is over)."""
    text = journal.hold()
    if text is None:
        return None
    code = text.split(":", 1)[0].strip()  # "CODE: …" (agent/holds.py): an ASCII colon after the code
    return {
        "code": code if code in REASON_CODES else None,
        "reason": wire_summary(text[:200], "暂停接单：需要有人检查手机"),
        "attempt_id": journal.hold_attempt(),
    }


def agent_program() -> str:
    """``cmbuyer-agent`` when it is on the PATH, else the script beside this Python (quoted for a shell)."""
    if shutil.which("cmbuyer-agent"):
        return "cmbuyer-agent"
    beside = Path(sys.executable).parent / "cmbuyer-agent"
    return shlex.quote(str(beside)) if beside.exists() else "cmbuyer-agent"


class Backoff:
    """Waits after a server failure that a retry will not fix soon (401, unreachable): 1, 2, 4 … up to
    ``cap`` seconds, back to the start after a success. ``note`` decides what to log: a new kind of failure
    is logged at once, the same one again only when ``log_every`` seconds passed since it was last logged, so
    a revoked agent writes a handful of lines per minute, not one per poll."""

    def __init__(self, first: float = 1.0, cap: float = 60.0, log_every: float = 60.0) -> None:
        self.first, self.cap, self.log_every = first, cap, log_every
        self.delay = 0.0  # 0 = no failure in a row
        self._last_kind: str | None = None
        self._last_logged = 0.0

    def failed(self, kind: str, now: float) -> tuple[float, bool]:
        """Count one failure of ``kind`` at monotonic ``now``: returns (seconds to wait, whether to log it)."""
        self.delay = self.first if self.delay == 0 else min(self.cap, self.delay * 2)
        log_it = kind != self._last_kind or now - self._last_logged >= self.log_every
        if log_it:
            self._last_kind, self._last_logged = kind, now
        return self.delay, log_it

    def succeeded(self) -> bool:
        """Reset; True when there was a failure before (the caller may say the server is back)."""
        was = self.delay > 0
        self.delay, self._last_kind = 0.0, None
        return was


# the server calls the loop names in its lines, as a person reads them (the "心跳：状态 READY" lines use the same)
_CALLS = {"heartbeat": "心跳", "claim-next": "领取任务"}


@dataclass
class RunnerConfig:
    serial: str
    poll_seconds: float = 1.0  # idle sleep between empty claim-next polls
    once: bool = False  # run at most one task (tests, manual runs)
    holds: HoldPolicy = field(default_factory=HoldPolicy)  # streak limits (CLI flags / env)
    pack_dir: Path | None = None  # operator selector packs (--pack-dir / CMBUYER_AGENT_PACK_DIR)
    waits: FlowWaits = field(default_factory=FlowWaits)  # the flow's deadlines; production's by default
    buy_path: str = "single"  # CMBUYER_AGENT_BUY_PATH
    approval: ApprovalSettings = field(default_factory=ApprovalSettings)  # CMBUYER_AGENT_APPROVAL_*


@dataclass(frozen=True)
class Status:
    pack: Pack | None
    state: str
    version_name: str | None
    version_code: int | None

    @property
    def pack_id(self) -> str | None:
        """What the heartbeat reports as ``pack_id``: the pack in use, ``NO_PACK`` when the installed
        version has none, None (field left out: unknown) when the app version itself is unknown."""
        if self.pack is not None:
            return self.pack.id
        return "NO_PACK" if self.state == "NO_PACK" else None


class Runner:
    def __init__(
        self,
        cfg: RunnerConfig,
        phone: PhoneAdapter,
        api: HttpDeviceApi,
        journal: Journal,
        progress: Callable[[str], None],
    ) -> None:
        self.cfg = cfg
        self.phone = phone
        self.api = api
        self.journal = journal
        self.progress = progress
        self.stop = threading.Event()
        # A claim-next key left in the journal means the process died between the server's answer
        # and journaling the claim: the server holds an attempt for that session. Reusing the
        # session re-sends the same key, so the server replays that claim (and the agent resumes or
        # fails it) instead of refusing every claim as ``claim_requires_manual`` for a new session.
        # (Journaling a claim drops its key in the same transaction, so a key here is never one of a
        # claim the journal already holds; one session may journal many claims before that.)
        pending = journal.key_scopes("claim_request")
        self.session = Session(pending[-1] if pending else str(uuid.uuid4()))
        self._flow: PurchaseFlow | None = None
        self._signals = 0
        self._android: str | None = None
        self._hb_interval = DEFAULT_HEARTBEAT_SECONDS
        self._hb_next = 0.0  # monotonic time of the next due heartbeat
        self._hb_state: str | None = None
        self._hb_allowed = False
        self.supervision_hold = False  # the last heartbeat said the device–pack pair is held
        self.paused = False  # the last heartbeat said an administrator paused the device
        self.paced_until: str | None = None  # the last heartbeat's paced_until
        self.backoff = Backoff()
        self.refused = False  # the last heartbeat or claim-next got 401
        self._screen_done: str | None = None  # the last screenshot request answered
        self._screen_answer: dict[str, str] | None = None  # a refused one, sent with the next heartbeat
        self.last_status: Status | None = None
        self._pack_note: str | None = None  # the last pack resolution logged (logged on change only)
        self.heartbeats = 0  # sent (tests)
        self.claims = 0  # claims that ran a flow (tests)

    # --- signals ------------------------------------------------------------------------------
    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        self.stop.set()
        if self._signals >= 2:
            flow = self._flow
            if flow is not None and flow.in_critical_section.is_set():
                self.progress("第二次信号来时正处于提交窗口：提交一结束就退出")
                return
            raise StopNow()
        self.progress("收到停止请求：做完当前步骤后停止")

    # --- phone status -------------------------------------------------------------------------
    def _status(self) -> Status:
        try:
            version = self.phone.app_version()
        except AgentError as exc:
            self.progress(f"手机：{exc.reason_code} {exc.summary}")
            return Status(None, "ADB_OFFLINE", None, None)
        if version is None:
            return Status(None, "APP_MISSING", None, None)
        # every loop (cheap: cached per file, pack/resolve.py rule 4), so a pack written, fixed or broken
        # while the agent runs takes effect at the next loop; logged once per change
        try:
            found = resolve(version.name, version.code, self.cfg.pack_dir, check_permissions=True)
        except PackError as exc:
            self._note_pack(f"NO_PACK: {exc}")
            return Status(None, "NO_PACK", version.name, version.code)
        self._note_pack(f"识别包 {found.describe()}")
        return Status(found.pack, "READY", version.name, version.code)

    def _note_pack(self, note: str) -> None:
        if note != self._pack_note:
            self._pack_note = note
            self.progress(note)

    def _android_release(self) -> str:
        if self._android is None:
            try:
                self._android = self.phone.android_release()
            except AgentError:
                return "unknown"
        return self._android

    def _heartbeat(self, status: Status, state: str) -> dict[str, Any] | None:
        screen = self._screen_answer
        try:
            hb = self.api.heartbeat(
                adb_serial=self.cfg.serial,
                android_release=self._android_release(),
                pdd_version=status.version_name,
                pdd_version_code=status.version_code,
                state=state,
                pack_id=status.pack_id,
                hold=self._hold_report(),
                screen=screen,
                retries=0,  # the back-off below is the retry: a down server is reported at once, not after ~7 s
            )
        except AgentError as exc:
            self._hb_allowed = False
            self._hb_next = time.monotonic() + self._server_failed("heartbeat", exc)
            return None
        self._server_ok()
        if screen is not None and self._screen_answer is screen:
            self._screen_answer = None
        self.heartbeats += 1
        self._hb_interval = float(hb["heartbeat_interval_seconds"])
        self._hb_next = time.monotonic() + self._hb_interval
        if hb["app_version_allowed"] != self._hb_allowed or state != self._hb_state:
            if not hb["app_version_allowed"]:
                self.progress(f"服务器不允许拼多多版本 {status.version_name}：不领取任务")
            self.progress(f"心跳：状态 {state}")
        self._hb_state = state
        self._hb_allowed = bool(hb["app_version_allowed"])
        held = hb.get("supervision_hold") is True  # claim-next answers no task while held
        if held and not self.supervision_hold:
            self.progress(
                "服务器：这台手机与其识别包的组合已暂停（一笔监督下单被标为有误）：管理员在设备页面点"
                "“重新人工监督”之前不领任务"
            )
        self.supervision_hold = held
        self._note_pause(hb)
        self._note_release(hb)
        request = hb.get("screenshot_request")
        if isinstance(request, str) and request != self._screen_done:
            self._answer_screen(request)
        return hb

    # --- holds and screens from the admin pages -----------------------------------
    def _hold_report(self) -> dict[str, Any] | None:
        return hold_report(self.journal)

    def _how_to_clear(self) -> str:
        """How a person lets the phone work again, with a phone-host command that runs as printed: the
        journal's state dir and the program's path spelled out."""
        state_dir = shlex.quote(str(self.journal.path.parent.resolve()))
        command = (
            f"CMBUYER_AGENT_STATE_DIR={state_dir} {agent_program()} journal --device "
            f"{shlex.quote(self.cfg.serial)} --clear-hold"
        )
        return f"有人检查过手机后：在设备页面点“释放”，或在这台主机上运行：{command}"

    def _note_release(self, hb: dict[str, Any]) -> None:
        released = hb.get("hold_released")
        if not isinstance(released, dict) or self.journal.hold() is None:
            return
        self.journal.clear_hold()  # what `cmbuyer-agent journal --clear-hold` does on the phone host
        self.progress(
            f"暂停接单（HOLD）已在服务器上由 {released['by']} 于 {released['at']} 释放：{released['note']}；"
            "重新领取任务"
        )
        self._hb_next = 0.0  # say READY at once

    def _answer_screen(self, request_id: str) -> None:
        """One fresh screenshot for the devices page — only while Pinduoduo itself is in front; otherwise the
        package in front goes back with the next heartbeat and no image is taken."""
        png = self.phone.app_screenshot_png()
        if png is None:
            try:
                package = self.phone.focused_package() or "unknown"
            except AgentError:
                package = "unknown"
            self._screen_answer = {"request_id": request_id, "foreground_package": package}
            self._screen_done = request_id
            self._hb_next = 0.0
            self.progress(f"服务器要求截屏：前台是 {package}，所以不截图；已告知服务器")
            return
        try:
            self.api.upload_device_screen(request_id, png)
        except AgentError as exc:
            self.progress(f"服务器要求截屏：上传失败（{exc.reason_code}）；下次心跳时再试")
            return
        self._screen_done = request_id
        self.progress("服务器要求截屏：已发送一张新截图")

    def _note_pause(self, hb: dict[str, Any]) -> None:
        paused = hb.get("paused") is True
        if paused != self.paused:
            self.progress(
                "服务器：管理员暂停了这台手机的领取：恢复之前不领新任务（设备页面或 `cmbuyer-server device resume`）"
                if paused
                else "服务器：这台手机已恢复领取：重新领取任务"
            )
        self.paused = paused
        paced = hb.get("paced_until")
        paced = paced if isinstance(paced, str) else None
        if paced != self.paced_until and paced is not None:
            self.progress(f"服务器：这台手机的领取节奏：下一次领取不早于 {paced}")
        self.paced_until = paced

    # --- server failures ----------------------------------------------------------------------
    def _server_failed(self, what: str, exc: AgentError) -> float:
        """Log a failed heartbeat/claim-next the way a person can act on it and return the back-off wait."""
        self.refused = isinstance(exc, Unauthorized)
        label = _CALLS.get(what, what)
        if isinstance(exc, Unauthorized | ServerUnreachable):
            wait, log_it = self.backoff.failed(type(exc).__name__, time.monotonic())
            if log_it:
                cause = exc.cause if isinstance(exc, ServerUnreachable) else exc.summary
                # --once ends right after this line (run()): no retry to promise
                then = (
                    "；--once：不重试"
                    if self.cfg.once
                    else f"；{wait:g} 秒后重试（间隔逐步延长到 {self.backoff.cap:g} 秒）"
                )
                self.progress(f"{label}：{cause}{then}")
            return wait
        self.progress(f"{label}失败：{exc.reason_code} {exc.summary}")
        return self.cfg.poll_seconds

    def _server_ok(self) -> None:
        self.refused = False
        if self.backoff.succeeded():
            self.progress("服务器：已恢复应答")

    # --- recovery -----------------------------------------------------------------------------
    def _recover(self) -> bool:
        """Settle what the journal owes the server; True when nothing is owed any more."""
        if not self.journal.recovery_pending():
            return True
        for note in recover(self.journal, self.api):
            self.progress(f"恢复：{note}")
        return not self.journal.recovery_pending()

    # --- hold policy --------------------------------------------------------------------------
    def _settle(self, attempt_id: str, end: AttemptEnd) -> str | None:
        """Count one attempt's ending in the journal (once); returns the hold it set, if any."""

        def decide(crashes: int, failures: int) -> tuple[int, int, str | None]:
            after, hold = settle(Streaks(crashes, failures), end, self.cfg.holds)
            return after.crashes, after.failures, hold

        hold = self.journal.settle_attempt(attempt_id, decide)
        if hold is not None:
            self.progress(f"暂停接单（HOLD）：{hold}；{self._how_to_clear()}")
        return hold

    def _count_crashes(self) -> None:
        """Before recovery settles them: attempts the journal shows open were cut by a process death
        (crash, SIGKILL, power loss) — each counts as a crash ending, once."""
        for row in self.journal.claims(ClaimState.ACTIVE):
            self._settle(row.attempt_id, AttemptEnd("CRASHED", None, fenced=False))
        for sub in self.journal.unreported_submissions():
            if sub.observation is None:
                self._settle(sub.attempt_id, AttemptEnd("CRASHED", None, fenced=True))

    def _after_flow(self, attempt_id: str, result: FlowResult) -> None:
        end = AttemptEnd(result.outcome, result.reason_code, fenced=result.outcome != "FAILED")
        if self._settle(attempt_id, end) is not None and self.last_status is not None:
            self._heartbeat(self.last_status, "NEEDS_PERSON")  # visible on the server at once

    # --- loop ---------------------------------------------------------------------------------
    def run(self) -> int:
        fix_mmap_threshold()  # screenshots' pixel blocks go back to the system when freed (agent/heap.py)
        self._count_crashes()
        held = self.journal.hold()
        if held:  # a restarted agent must say why it stays idle, not only heartbeat NEEDS_PERSON
            self.progress(f"暂停接单（HOLD，启动前就有）：{held}；{self._how_to_clear()}")
        clear = self._recover()
        while not self.stop.is_set():
            status = self.last_status = self._status()
            hold = self.journal.hold()
            state = "NEEDS_PERSON" if hold and status.state == "READY" else status.state
            if time.monotonic() >= self._hb_next or (state != self._hb_state and not self.backoff.delay):
                self._heartbeat(status, state)
            if self.cfg.once and self.backoff.delay and not self._hb_allowed:
                # --once does not wait for a server that refuses or cannot be reached: the line saying what
                # to check is out; 2 = the credentials (it could not run), 1 = the server
                return ExitCode.USAGE if self.refused else ExitCode.FAILED
            if not clear:
                clear = self._recover()
            if self.stop.is_set():
                break
            can_claim = clear and state == "READY" and self._hb_allowed and self._hb_state == "READY"
            if can_claim:
                assert status.pack is not None
                ran = self._claim_and_run(status.pack)
                if ran:
                    if self.cfg.once:
                        return ExitCode.OK
                    clear = self._recover()
                    continue
            elif self.cfg.once and state in ("NO_PACK", "APP_MISSING") and self._hb_state == state:
                if state == "NO_PACK":
                    self.progress(
                        f"没有适配拼多多版本 {status.version_name} ({status.version_code}) 的识别包：不领取任务"
                    )
                return ExitCode.IDLE
            self.stop.wait(self.cfg.poll_seconds)
        return ExitCode.OK

    def _claim_and_run(self, pack: Pack) -> bool:
        try:
            purchase = self.api.claim_next(self.session, pack_id=pack.id)  # supervision pairs
        except ClaimRequiresManual:
            self.progress("服务器：领取需要人工处理（claim_requires_manual）")
            return False
        except AppVersionNotAllowed:
            self.progress("服务器：现在不能领取（拼多多版本、心跳或状态）")
            self._hb_next = 0.0  # heartbeat again before the next claim
            return False
        except (Unauthorized, ServerUnreachable) as exc:
            wait = self._server_failed("claim-next", exc)
            self._hb_allowed = False  # no claim before a heartbeat gets through again
            self._hb_next = max(self._hb_next, time.monotonic() + wait)
            return False
        except AgentError as exc:
            self._server_failed("claim-next", exc)
            return False
        if purchase is None:
            return False
        c = purchase.claim
        t = purchase.task
        self.journal.record_claim(
            attempt_id=c.attempt_id,
            task_id=c.task_id,
            task_version=c.task_version,
            authorization_id=c.authorization_id,
            claim_generation=c.claim_generation,
            claim_token=c.claim_token,
            session_id=c.session_id,
            lease_expires_at=c.lease_expires_at,
            authorization_expires_at=c.authorization_expires_at,
            task={
                "goods_id": t.goods_id,
                "sku_options": [list(o) for o in t.sku_options],
                "quantity": t.quantity,
                "max_total_price": str(t.max_total_price),
            },
        )
        self.api.forget_claim_request(self.session)
        self.claims += 1
        self.progress(f"已领取任务 {t.id}（尝试 {c.attempt_id}）")
        lease = LeaseKeeper(
            self.api,
            c,
            purchase.server_now,
            on_renewed=lambda cl: self.journal.update_lease(cl.attempt_id, cl.lease_expires_at),
        ).start()
        busy = _BusyHeartbeat(self, self._hb_interval).start()
        flow = PurchaseFlow(
            phone=self.phone,
            pack=pack,
            sink=self.api,
            journal=self.journal,
            waits=self.cfg.waits,
            stop=self.stop,
            lease=lease,
            progress=self.progress,
            buy_path=self.cfg.buy_path,
            approval_settings=self.cfg.approval,
        )
        self._flow = flow
        with logfields.claim(t.id, c.attempt_id):  # JSON log lines of this attempt carry both ids
            try:
                result = flow.run(purchase)
            finally:
                busy.stop()
                lease.stop()
                self._flow = None
                self._hb_next = 0.0  # report READY (or NEEDS_PERSON) right after the flow
            with logfields.step(None, result.reason_code):
                self.progress(f"任务 {t.id}：{result.outcome} {result.reason_code or ''}".rstrip())
            self._after_flow(c.attempt_id, result)
        if self._signals >= 2:
            raise StopNow()
        return True


class _BusyHeartbeat:
    """While a flow runs, heartbeat ``BUSY`` every interval from a side thread (the flow itself may
    take longer than the server's stale limit). Heartbeats carry no idempotency key and touch no
    journal row, so this thread shares nothing with the flow but the HTTP client (one request each)."""

    def __init__(self, runner: Runner, interval: float) -> None:
        self._runner = runner
        self._interval = max(0.5, interval)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> _BusyHeartbeat:
        self._thread = threading.Thread(target=self._run, name="busy-heartbeat", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        r = self._runner
        while not self._stop.wait(self._interval):
            try:
                last = r.last_status
                r.api.heartbeat(
                    adb_serial=r.cfg.serial,
                    android_release=r._android or "unknown",
                    pdd_version=last.version_name if last else None,
                    pdd_version_code=last.version_code if last else None,
                    state="BUSY",
                    pack_id=last.pack_id if last else None,
                )
                r._hb_state = "BUSY"
            except AgentError as exc:
                log.info("采购中的心跳失败：%s", exc.reason_code)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
