"""Rules for what a device reports about its attempt: summaries and evidence assets (docs/api.md "events",
"evidence", "fail", "result", "approval"). Pure: the services load the rows and ask here.

- :func:`check_summary` — the wording rule of every event and fail summary (its text lives in
  ``cmbuyer.schemas.summary`` so the agent applies exactly the same one before sending);
- :func:`may_attach` — a new evidence asset goes to an OPEN attempt of the URL's task held by this device;
- :func:`check_asset` — an evidence asset id named by a fail or a result report is one of the attempt's;
- :func:`check_screenshot` — the screenshot of an approval request is the attempt's gate-3 screenshot;
- :func:`awaits_result`, :func:`may_report_result`, :func:`result_use_case` — the one observation after
  the tap (docs/api.md "result").
"""

from __future__ import annotations

from cmbuyer.schemas.summary import summary_problem
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import Conflict, DomainError, ValidationFailed
from cmbuyer.server.domain.rows import AssetRow, AttemptRow, ReportingAttempt, ResultSlot
from cmbuyer.server.domain.states import AttemptState, SubmissionState

# The evidence kind an approval request must show: the screen holding the submit control.
SCREENSHOT_KIND = "CONFIRM_PAGE_GATE_3"
# The observation reasons that say the device did NOT send the submit tap: its last look before the tap
# refused it (agent/submit.py; docs/api.md "observation_reason"). The task page says so in plain words; the
# wire schema allows them only with UNKNOWN (common.json "no_tap_reason", the same set: a test checks).
NO_TAP_REASONS = frozenset({"SUBMIT_CONTROL_GONE", "NOT_TAPPED_SCREEN_CHANGED", "NOT_TAPPED_OBSCURED"})
# The attempt close reason of the expiry sweeper (services/recovery.py): a fenced attempt whose lease ran
# out without a result. Its late observation is still recorded.
SWEEPER_CLOSE_REASON = "LEASE_EXPIRED_AFTER_FENCE"


class ScreenshotRefused(DomainError):
    """``422 approval_screenshot_invalid``: ``screenshot_asset_id`` is not a ``CONFIRM_PAGE_GATE_3`` evidence
    asset of this attempt (unknown, another attempt's, or another kind)."""

    code = Code.APPROVAL_SCREENSHOT_INVALID
    status = 422


def check_summary(text: str) -> str:
    """Return ``text`` when it is an acceptable summary, else raise ValidationFailed (→ 400).

    The rule itself lives in ``cmbuyer.schemas.summary`` so the agent applies exactly the same one
    before sending (a refused wording would otherwise lose an event or a fail report).
    """
    problem = summary_problem(text)
    if problem is not None:
        raise ValidationFailed("summary", problem)
    return text


def evidence_conflict() -> Conflict:
    """The fixed 409 for an evidence asset id that is unknown or belongs to another attempt."""
    return Conflict("evidence asset does not belong to this attempt", code=Code.EVIDENCE_CONFLICT)


def may_attach(attempt: AttemptRow | None, *, device_id: str, task_id: str) -> bool:
    """True when a first upload may attach to ``attempt``: it exists, is OPEN, is held by ``device_id``
    and belongs to the URL's ``task_id`` (the lease is not looked at: evidence of a claim that is still
    open is worth keeping)."""
    return (
        attempt is not None
        and attempt.device_id == device_id
        and attempt.task_id == task_id
        and attempt.state == AttemptState.OPEN
    )


def check_asset(asset_id: str | None, asset: AssetRow | None, attempt_id: str) -> None:
    """An optional asset id must name an asset of ``attempt_id``: ``asset`` is the row loaded for
    ``asset_id`` (None when unknown). Raises ``409 evidence_conflict``; nothing to check without an id."""
    if asset_id is None:
        return
    if asset is None or asset.attempt_id != attempt_id:
        raise evidence_conflict()


def check_screenshot(asset: AssetRow | None, attempt_id: str) -> None:
    """The approval's screenshot (``asset``, None when unknown) must be a :data:`SCREENSHOT_KIND` asset of
    ``attempt_id``; raises :class:`ScreenshotRefused` (422)."""
    if asset is None or asset.attempt_id != attempt_id or asset.kind != SCREENSHOT_KIND:
        raise ScreenshotRefused("screenshot_asset_id is not a gate-3 screenshot of this attempt")


def awaits_result(submission: ResultSlot) -> bool:
    """True while the submission may still take its one observation: none recorded yet, and FENCED or put
    to RECONCILIATION_REQUIRED by the sweeper (not yet settled by a person). False → ``409 result_conflict``."""
    return submission.observation is None and submission.state in (
        SubmissionState.FENCED,
        SubmissionState.RECONCILIATION_REQUIRED,
    )


def may_report_result(attempt: ReportingAttempt) -> bool:
    """True when the fenced attempt may report: still OPEN, or closed by the sweeper
    (:data:`SWEEPER_CLOSE_REASON`). The lease is not required: the observation is worth having late."""
    return attempt.state == AttemptState.OPEN or attempt.close_reason == SWEEPER_CLOSE_REASON


def result_use_case(observation: str) -> str:
    """The state-machine use-case of an observation: ``SUBMITTED`` → ``result_submitted``; anything else
    needs a person → ``result_needs_reconciliation`` (docs/state-machines.md)."""
    return "result_submitted" if observation == "SUBMITTED" else "result_needs_reconciliation"
