"""TaskSource / ResultSink protocols (docs/architecture.md "Agent"). The flow depends on these, never on HTTP.

The one implementation is :class:`cmbuyer.agent.client.HttpDeviceApi`; tests use in-process fakes
that enforce the same rules.
"""

from __future__ import annotations

from typing import Protocol

from cmbuyer.agent.model import (
    ApprovalStatus,
    AssetRef,
    AttemptFailure,
    Claim,
    ClaimedPurchase,
    Lease,
    ScreenshotAsset,
    Session,
    SubmissionProof,
    SubmissionResult,
    TaskEvent,
)
from cmbuyer.agent.permit import SubmissionPermit


class TaskSource(Protocol):
    def claim_next(self, session: Session) -> ClaimedPurchase | None: ...

    def renew_lease(self, claim: Claim) -> Lease: ...


class ResultSink(Protocol):
    """What the flow reports to. The approval pair is used only for a supervised claim
    (:class:`cmbuyer.agent.approval.ApprovalApi`)."""

    def append_events(self, claim: Claim, events: list[TaskEvent]) -> None: ...

    def upload_screenshot(self, claim: Claim, asset: ScreenshotAsset) -> AssetRef: ...

    def fail_attempt(self, claim: Claim, failure: AttemptFailure) -> None: ...

    def create_submission_fence(self, claim: Claim, proof: SubmissionProof) -> SubmissionPermit: ...

    def report_submission_result(self, permit: SubmissionPermit, result: SubmissionResult) -> None: ...

    def report_recovered_result(
        self, *, submission_id: str, attempt_id: str, claim_token: str, result: SubmissionResult, result_key: str
    ) -> None: ...

    def request_approval(self, claim: Claim, proof: SubmissionProof, screenshot_asset_id: str) -> ApprovalStatus: ...

    def approval_status(self, claim: Claim, approval_id: str) -> ApprovalStatus: ...


class KeyStore(Protocol):
    """Where idempotency keys are persisted before each request (the journal)."""

    def key(self, purpose: str, scope: str = "") -> str: ...

    def drop_key(self, purpose: str, scope: str = "") -> None: ...
