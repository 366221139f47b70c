"""When the phone stops, not the queue: the hold policy.

One home for two rules:

1. **Scope of every reason code.** :data:`REASON_SCOPES` classifies every code of
   ``common.json#/$defs/reason_code`` and every ``observation_reason`` (tests/agent/test_holds.py
   checks completeness against the schema):

   - ``TASK``    — this goods/SKU/price cannot be bought as the task says (out of stock, over the cap,
     a value missing, …). The attempt fails; the phone goes on with the next task.
   - ``PHONE``   — the phone or its account needs a person (unsafe payment mode, risk wall, update
     prompt, an unknown screen or popup, a suspected payment, …). The attempt fails **and** the agent
     sets its hold: heartbeat ``NEEDS_PERSON``, no claims until ``cmbuyer-agent journal --clear-hold``.
   - ``ATTEMPT`` — this attempt broke for a passing reason (server unreachable, adb glitch, a bad
     dump, a stop request). No hold by itself; the streak rule below catches a repeating one.

   A code the table does not know is treated as ``PHONE`` (fail closed).

2. **Streaks** (consecutive attempts, persisted in the journal so they survive restarts):

   - *crash loop*: ``crash_loop_limit`` (default 2) consecutive attempts ended by ``INTERNAL_ERROR``
     or by the process dying with the attempt open → hold ``REPEATED_FAILURES`` (crash loop);
   - *repeated failures*: ``failure_limit`` (default 3) consecutive attempts that failed before the
     fence, whatever the reason (``SHUTDOWN`` — a stop a person asked for — does not count) → hold
     ``REPEATED_FAILURES``.

   An attempt that passed the fence ends the pre-fence streak; any attempt not ended by
   ``INTERNAL_ERROR``/crash ends the crash streak; an order created (``SUBMITTED`` or
   ``EXTERNAL_PAYMENT_HANDOFF``) and ``--clear-hold`` reset both.

Pure functions: the runner calls :func:`settle`, the journal stores the result atomically.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class Scope(StrEnum):
    """Who must change for the next attempt to succeed (see the module docstring)."""

    TASK = "task"
    PHONE = "phone"
    ATTEMPT = "attempt"


T, P, A = Scope.TASK, Scope.PHONE, Scope.ATTEMPT
REASON_SCOPES: Mapping[str, Scope] = {
    # --- reason_code: the goods, SKU or price of this task ---------------------------------
    "WRONG_GOODS": T,
    "SKU_VALUE_MISSING": T,
    "SKU_AMBIGUOUS": T,
    "SKU_NOT_SELECTED": T,
    "SKU_DIMENSION_UNNAMED": T,
    "SKU_SELECTION_UNREADABLE": T,
    "SKU_MISMATCH_ON_CONFIRM": T,
    "UNIT_PRICE_UNREADABLE": T,
    "UNIT_PRICE_AMBIGUOUS": T,
    "PRICE_CHANGED": T,
    "PRICE_OVER_CAP": T,
    "QUANTITY_MISMATCH": T,
    "QUANTITY_CAPPED_BY_STOCK": T,
    "QUANTITY_UNREADABLE": T,
    "OUT_OF_STOCK": T,
    "CONFIRM_AMOUNT_UNREADABLE": T,
    "TOTAL_ABOVE_ITEMS": T,
    "FENCE_REFUSED": T,  # the server's re-check refused what the screen showed for this task
    "REJECTED_BY_REVIEWER": T,  # a person refused what the phone read for this task
    # --- reason_code: the phone, its app or its account --------------------------------------
    "WRONG_PACKAGE": P,
    "APP_VERSION_UNSUPPORTED": P,
    "NO_SELECTOR_PACK": P,
    "SCREEN_UNRECOGNIZED": P,
    "POPUP_UNHANDLED": P,
    "RISK_WALL": P,
    "SECURITY_CHALLENGE": P,
    "APP_UPDATE_PROMPT": P,
    "PAYMENT_MODE_UNSAFE": P,
    "PAYMENT_CONTROL_BLOCKED": P,
    "PAYMENT_SUSPECTED": P,
    "SUBMIT_CONTROL_COUNT": P,  # the confirm page is not what the pack describes
    "LEASE_LOST": P,
    "LEASE_TOO_SHORT": P,  # the flow has always held on these (a person reconciles)
    "REPEATED_FAILURES": P,
    # --- reason_code: this attempt only --------------------------------------------------------
    "DUMP_EMPTY": A,
    "DUMP_INVALID": A,
    "DUMP_UNSTABLE": A,
    "ADB_ERROR": A,
    "PHONE_TIMEOUT": A,
    "SERVER_UNREACHABLE": A,
    "SHUTDOWN": A,
    "INTERNAL_ERROR": A,
    "APPROVAL_TIMEOUT": A,
    "SCREEN_CHANGED_WHILE_WAITING": A,  # a supervised wait ended
    # --- observation_reason (after the tap) ------------------------------------------------------
    "SECURITY_CHALLENGE_AFTER_TAP": P,
    "NO_KNOWN_SCREEN": P,
    "SUBMIT_CONTROL_GONE": A,
    # the last look refused the tap after the fence: each one has sent a task to reconciliation,
    # and a cause that keeps coming back after gate 3 (a payment row that flips, a popup on a timer) would
    # do that to every task in the queue, so a person looks at the phone first
    "NOT_TAPPED_SCREEN_CHANGED": P,
    "NOT_TAPPED_OBSCURED": P,
    "TAP_OUTCOME_UNKNOWN": A,
}
del T, P, A

ORDER_CREATED = frozenset({"SUBMITTED", "EXTERNAL_PAYMENT_HANDOFF"})
HOLD_CODE = "REPEATED_FAILURES"
CRASH_REASON = "INTERNAL_ERROR"
NOT_A_FAILURE = frozenset({"SHUTDOWN"})  # a stop a person asked for breaks no streak and adds none

DEFAULT_CRASH_LOOP_LIMIT = 2
DEFAULT_FAILURE_LIMIT = 3


def scope_of(code: str | None) -> Scope | None:
    """The scope of a reason code; None for no code; unknown codes are ``PHONE`` (fail closed)."""
    if code is None:
        return None
    return REASON_SCOPES.get(code, Scope.PHONE)


@dataclass(frozen=True)
class HoldPolicy:
    """The two streak limits (each ≥ 1). Sources (agent/settings.py): ``--crash-loop-limit`` /
    ``--failure-limit``, else ``CMBUYER_AGENT_CRASH_LOOP_LIMIT`` / ``CMBUYER_AGENT_FAILURE_LIMIT``, else 2 and 3."""

    crash_loop_limit: int = DEFAULT_CRASH_LOOP_LIMIT
    failure_limit: int = DEFAULT_FAILURE_LIMIT

    def __post_init__(self) -> None:
        for name in ("crash_loop_limit", "failure_limit"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} 必须是 >= 1 的整数")


@dataclass(frozen=True)
class AttemptEnd:
    """How one attempt ended, as the runner saw it.

    ``fenced``: the attempt reached the fence (a permit or a fence replay) — not a pre-fence failure.
    ``outcome``: FlowResult.outcome, or ``"CRASHED"`` when the journal shows the attempt was open
    when the process died. ``reason_code``: the flow's reason (a reason_code or an
    observation_reason), or None."""

    outcome: str
    reason_code: str | None
    fenced: bool

    @property
    def crashed(self) -> bool:
        return self.outcome == "CRASHED" or self.reason_code == CRASH_REASON


@dataclass(frozen=True)
class Streaks:
    """Consecutive crash/INTERNAL_ERROR endings and consecutive pre-fence failures."""

    crashes: int = 0
    failures: int = 0


def settle(streaks: Streaks, end: AttemptEnd, policy: HoldPolicy) -> tuple[Streaks, str | None]:
    """The streaks after ``end`` and the hold to set (a one-line reason starting with its code), or
    None. A phone-level code holds at once; a streak at its limit holds with ``REPEATED_FAILURES``."""
    if end.outcome in ORDER_CREATED and scope_of(end.reason_code) is not Scope.PHONE:
        return Streaks(), None
    if end.reason_code in NOT_A_FAILURE and not end.fenced:
        return streaks, None
    crashes = streaks.crashes + 1 if end.crashed else 0
    failures = 0 if end.fenced else streaks.failures + 1
    after = Streaks(crashes, failures)
    if scope_of(end.reason_code) is Scope.PHONE:
        return after, (f"{end.reason_code}: 手机级别的停止；下一个任务之前需要有人检查手机")
    if crashes >= policy.crash_loop_limit:
        return after, (f"{HOLD_CODE}: 反复崩溃（crash loop）—— 连续 {crashes} 次尝试以 INTERNAL_ERROR 或进程崩溃结束")
    if failures >= policy.failure_limit:
        return after, (
            f"{HOLD_CODE}: 连续 {failures} 次尝试在提交围栏之前失败（最后一次：{end.reason_code or end.outcome}）"
        )
    return after, None
