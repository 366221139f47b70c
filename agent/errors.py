"""Typed agent errors; each carries a fixed reason code from ``common.json#/$defs/reason_code``.

The reason code is what goes on the wire (``fail``/events); ``summary`` is a short, non-sensitive
English phrase (never page text, tokens, addresses — docs/api.md "POST /api/v1/tasks/{id}/events").

Also here: the server's device error codes as the agent knows them (:data:`SERVER_CODES`, read from
``device_error.response.json`` — the enum the server's own catalogue is checked against) and what each
refusal means for the flow; and :class:`ExitCode`, the exit status of every ``cmbuyer-agent`` command.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from typing import TypeVar

from cmbuyer.schemas import enum_values

T = TypeVar("T")


class ExitCode(IntEnum):
    """Exit status of every ``cmbuyer-agent`` command (docs/agent.md "Exit codes"). The numbers are fixed:
    systemd units and scripts key on them."""

    OK = 0
    FAILED = 1  # the command ran and found a failure: a stop, a failed check, a changed file, a FAIL
    USAGE = 2  # it could not run: arguments, settings, credentials, unreadable input, a pack that does not load
    IDLE = 3  # ``run --once`` with nothing it may claim with (no selector pack, app missing)
    INTERRUPTED = 130  # stopped by a second signal / Ctrl-C (128 + SIGINT)


class AgentError(Exception):
    """Base of every error the flow turns into a safe stop.

    ``reason_code``: one of the wire reason codes; ``summary``: <=200 chars, no ``<>`` or control chars.
    """

    reason_code = "INTERNAL_ERROR"

    def __init__(self, summary: str = "", reason_code: str | None = None) -> None:
        super().__init__(summary or self.__class__.__name__)
        if reason_code is not None:
            self.reason_code = reason_code
        self.summary = _clean_summary(summary or self.__class__.__name__)


def _clean_summary(text: str) -> str:
    cleaned = "".join(ch for ch in text if ch >= " " and ch not in "<>\x7f")
    return cleaned[:200]


# --- screen / dump ---------------------------------------------------------------------------
class DumpError(AgentError):
    """The hierarchy dump cannot be used (docs/architecture.md "Agent": a failure, never "element absent")."""

    reason_code = "DUMP_INVALID"


class DumpEmpty(DumpError):
    """``<hierarchy rotation="0" />`` or an empty string (uiautomator2's silent fallback)."""

    reason_code = "DUMP_EMPTY"


class DumpInvalid(DumpError):
    """Unparsable XML, a DTD/entity declaration, oversize input, or a root that is not <hierarchy>."""

    reason_code = "DUMP_INVALID"


class DumpNoAppNodes(DumpError):
    """The dump has no node of the app package (app left the foreground, launcher/system UI only)."""

    reason_code = "WRONG_PACKAGE"


class DumpUnstable(DumpError):
    """Consecutive dumps never agreed on the relevant readings."""

    reason_code = "DUMP_UNSTABLE"


class MoneyError(AgentError):
    reason_code = "UNIT_PRICE_UNREADABLE"


class MoneyAmbiguous(MoneyError):
    """More than one price candidate in one text/reading (more than one → stop, never a guess)."""

    reason_code = "UNIT_PRICE_AMBIGUOUS"


class ScreenError(AgentError):
    reason_code = "SCREEN_UNRECOGNIZED"


class PackError(AgentError):
    """A selector pack is missing, invalid, or does not match the running app version."""

    reason_code = "NO_SELECTOR_PACK"


# --- phone ---------------------------------------------------------------------------------
class PhoneError(AgentError):
    reason_code = "ADB_ERROR"


class AdbUnreachable(PhoneError):
    """The adb server does not accept connections (we never start a local adb)."""


class PhoneTimeout(PhoneError):
    reason_code = "PHONE_TIMEOUT"


class PaymentControlBlocked(PhoneError):
    """A tap target, its text/desc, an ancestor or a node under the tap point is on the denylist."""

    reason_code = "PAYMENT_CONTROL_BLOCKED"


class SubmitControlGuarded(PhoneError):
    """A generic tap aimed at the submit control; only ``submit.py`` may tap it (docs/architecture.md "Agent")."""

    reason_code = "INTERNAL_ERROR"


class SubmitTapUnknown(PhoneError):
    """The single submit tap raised or timed out: whether it landed is unknown → ``UNKNOWN``."""


# --- flow / server -------------------------------------------------------------------------
class FlowStop(AgentError):
    """A gate or step refused to continue; ``reason_code`` says why."""


class ShutdownRequested(AgentError):
    reason_code = "SHUTDOWN"


class LeaseLost(AgentError):
    reason_code = "LEASE_LOST"


class ServerError(AgentError):
    """The device API answered with an error body or not at all."""

    reason_code = "SERVER_UNREACHABLE"

    def __init__(
        self, summary: str = "", *, status: int | None = None, error: str | None = None, final: bool = False
    ) -> None:
        super().__init__(summary)
        self.status = status
        self.error = error
        self.final = final


class FenceReplayed(ServerError):
    """The fence answered with a replay (click_permitted=false): never tap; report UNKNOWN. Raised by
    :meth:`cmbuyer.agent.ports.ResultSink.create_submission_fence` (the fence committed: no permit)."""

    reason_code = "FENCE_REFUSED"

    def __init__(self, submission_id: str) -> None:
        super().__init__("fence replayed without a click permit", final=True)
        self.submission_id = submission_id


class ServerUnreachable(ServerError):
    """Transport failure after the bounded retries (same idempotency keys each time). ``summary`` names the call
    (``heartbeat：无法连接服务器 URL（…）``); ``cause`` is the same without the call's name, for a line that names
    the call itself (the runner's ``心跳：…``)."""

    def __init__(self, summary: str = "", *, cause: str = "") -> None:
        super().__init__(summary)
        self.cause = cause or summary


class ServerRejected(ServerError):
    """A 4xx with a flat ``{"error": code}`` body: final, never retried."""

    def __init__(self, status: int, error: str | None) -> None:
        super().__init__(f"server rejected: {status} {error}", status=status, error=error, final=True)
        self.reason_code = _REJECTION_REASONS.get(error or "", "INTERNAL_ERROR")


# --- the server's refusals ---------------------------------------------------------------------
#: Every device error code the server may answer ``{"error": code}`` with: the enum of
#: ``device_error.response.json`` (the server's catalogue, server/domain/codes.py, is tested against it).
SERVER_CODES: frozenset[str] = frozenset(enum_values("device_error.response", "/properties/error/enum"))


def by_server_code(table: Mapping[str, T]) -> dict[str, T]:
    """``table`` keyed by device error codes, each checked against :data:`SERVER_CODES` at import: a
    code the schema does not list (a typo, a renamed code) stops the agent from starting instead of
    turning that refusal into INTERNAL_ERROR later. Raises ValueError naming the unknown codes."""
    unknown = sorted(set(table) - SERVER_CODES)
    if unknown:
        raise ValueError(f"not codes of device_error.response.json: {', '.join(unknown)}")
    return dict(table)


# the reason code a final 4xx stops the flow with; a code not listed here (or a newer server's code the
# schema does not list yet) is INTERNAL_ERROR
_REJECTION_REASONS = by_server_code(
    {
        "fence_refused": "FENCE_REFUSED",
        "submission_fenced": "FENCE_REFUSED",
        "version_conflict": "FENCE_REFUSED",
        "invalid_state": "FENCE_REFUSED",
        "claim_not_current": "LEASE_LOST",
        "claim_requires_manual": "LEASE_LOST",
        "app_version_not_allowed": "APP_VERSION_UNSUPPORTED",
        # the fence of a supervised attempt without a matching APPROVED approval; nothing written
        "approval_required": "FENCE_REFUSED",
        # the claim said "supervised" and the approval route says it is not: a disagreement, never a guess
        "not_supervised": "INTERNAL_ERROR",
    }
)


class Unauthorized(ServerRejected):
    """401 on any device request: the server does not accept this device id and token (a wrong or mistyped
    credentials file, or the device was revoked). Nothing a retry changes; the runner backs off and says what
    to check (docs/agent.md "When the server refuses the agent")."""

    HINT = "服务器拒绝了设备凭据（401）：请检查 --credentials-file，或这台设备已被撤销"

    def __init__(self, status: int = 401, error: str | None = None) -> None:
        super().__init__(status, error)
        self.summary = self.HINT


class ClaimRequiresManual(ServerRejected):
    """409 claim_requires_manual: stop claiming until a person acts (docs/api.md "POST /api/v1/tasks/claim-next")."""


class AppVersionNotAllowed(ServerRejected):
    """409 app_version_not_allowed on claim-next, or heartbeat ``app_version_allowed=false``."""


class ApprovalRequired(ServerRejected):
    """409 approval_required at the fence: the attempt is supervised and has no APPROVED approval whose
    readings equal the fence body's. Nothing was written; never a permit, never a tap."""


class NotSupervised(ServerRejected):
    """409 not_supervised on the approval route: the server does not consider this attempt supervised
    although claim-next said it is. The flow stops before the fence (fail closed)."""
