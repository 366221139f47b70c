"""TaskSource / ResultSink protocols (docs/architecture.md "Agent"). The flow depends on these, never on HTTP.

The one implementation is :class:`cmbuyer.agent.client.HttpDeviceApi`; tests use in-process fakes
that enforce the same rules.
"""

from __future__ import annotations

from typing import Protocol

from cmbuyer.agent import model  # the wire values every port speaks in
from cmbuyer.agent.permit import SubmissionPermit


class TaskSource(Protocol):
    def claim_next(self, session: model.Session) -> model.ClaimedPurchase | None: ...

    def renew_lease(self, claim: model.Claim) -> model.Lease: ...


class ResultSink(Protocol):
    """What the flow reports to. The approval pair is used only for a supervised claim
    (:class:`cmbuyer.agent.approval.ApprovalApi`)."""

    def append_events(self, claim: model.Claim, events: list[model.TaskEvent]) -> None: ...

    def upload_screenshot(self, claim: model.Claim, asset: model.ScreenshotAsset) -> model.AssetRef: ...

    def fail_attempt(self, claim: model.Claim, failure: model.AttemptFailure) -> None: ...

    def create_submission_fence(self, claim: model.Claim, proof: model.SubmissionProof) -> SubmissionPermit:
        """The permit of a first fence grant; raises :class:`~cmbuyer.agent.errors.FenceReplayed` for a
        replayed fence (never a permit) and other :class:`~cmbuyer.agent.errors.AgentError`s."""
        ...

    def report_submission_result(self, permit: SubmissionPermit, result: model.SubmissionResult) -> None: ...

    def report_recovered_result(
        self, *, submission_id: str, attempt_id: str, claim_token: str, result: model.SubmissionResult, result_key: str
    ) -> None: ...

    def request_approval(
        self, claim: model.Claim, proof: model.SubmissionProof, screenshot_asset_id: str
    ) -> model.ApprovalStatus: ...

    def approval_status(self, claim: model.Claim, approval_id: str) -> model.ApprovalStatus: ...


class KeyStore(Protocol):
    """Where idempotency keys are persisted before each request (the journal)."""

    def key(self, purpose: str, scope: str = "") -> str: ...

    def drop_key(self, purpose: str, scope: str = "") -> None: ...
