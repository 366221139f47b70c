"""In-process fake of the supervision device routes (/work contract "Supervision"), on top of
the rule-enforcing FakeApi of tests/agent/fakes.py.

Why a fake: the real approval routes, the fence's ``approval_required`` check and claim-next's
``attempt.supervised`` are being built on another branch (the server side of supervision) at the same
time as this agent side; the lead adds the real-server end-to-end test at merge. This fake enforces
the contract's rules that matter to the agent, so a test fails when the agent breaks one:

- an approval request is validated against ``approval.request.json`` as the client builds it; the
  attempt must be supervised (else 409 ``not_supervised``), the claim token/generation current, the
  screenshot an evidence asset *of this attempt* of kind ``CONFIRM_PAGE_GATE_3``;
- a second request with other readings voids the earlier approval, the same readings get the same
  live approval back;
- the status route is read-only and answers ``approval.response.json``;
- the fence of a supervised attempt needs an APPROVED approval whose readings equal the fence body's
  (else 409 ``approval_required``, nothing written);
- lease and authorization times are real UTC times (the lease keeper and the wait's deadlines run on
  them); ``lease_ttl`` sets how long each grant/renewal lasts.

The person at the admin drawer is :meth:`decide` (a test thread calls it, or ``decide_after``).
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from cmbuyer.agent.client import approval_readings
from cmbuyer.agent.errors import ApprovalRequired, NotSupervised, ServerRejected
from cmbuyer.agent.model import (
    ApprovalStatus,
    AssetRef,
    Claim,
    ClaimedPurchase,
    Lease,
    ScreenshotAsset,
    SubmissionProof,
)
from cmbuyer.agent.permit import SubmissionPermit
from cmbuyer.schemas import validate

from .fakes import FakeApi, make_purchase


def wire(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def supervised_purchase(
    *, lease_ttl: float = 60.0, authorization_seconds: float = 3600.0, supervised: bool = True, **task: Any
) -> ClaimedPurchase:
    """A claim as claim-next hands it out now: real UTC times, ``attempt.supervised`` as given."""
    base = make_purchase(**task)
    now = datetime.now(UTC)
    claim = replace(
        base.claim,
        lease_expires_at=wire(now + timedelta(seconds=lease_ttl)),
        authorization_expires_at=wire(now + timedelta(seconds=authorization_seconds)),
        supervised=supervised,
    )
    return replace(base, claim=claim, server_now=wire(now))


class SupervisedApi(FakeApi):
    def __init__(self, purchases: list[ClaimedPurchase], keys: Any = None, *, lease_ttl: float = 60.0) -> None:
        super().__init__(purchases, keys)
        self.lease_ttl = lease_ttl
        self.renewals = 0
        self.approvals: dict[str, dict[str, Any]] = {}  # approval_id -> {"readings", "state", "asset", ...}
        self.approval_requests: list[dict[str, Any]] = []  # every request body, as validated
        self.status_reads = 0
        self.fence_bodies: list[dict[str, Any]] = []
        self.assets: dict[str, tuple[str, str]] = {}  # asset_id -> (attempt_id, kind)
        self.on_approval_request: Any = None  # callable(approval_id) after a request is stored
        self._lock = threading.Lock()

    # --- time ---------------------------------------------------------------------------------
    def renew_lease(self, claim: Claim) -> Lease:
        if not self.lease_ok:
            raise ServerRejected(409, "claim_not_current")
        self.renewals += 1
        now = datetime.now(UTC)
        return Lease(wire(now + timedelta(seconds=self.lease_ttl)), wire(now))

    def upload_screenshot(self, claim: Claim, asset: ScreenshotAsset) -> AssetRef:
        ref = super().upload_screenshot(claim, asset)
        self.assets[ref.asset_id] = (claim.attempt_id, asset.kind)
        return ref

    # --- approval routes ------------------------------------------------------------------------
    def _status(self, approval_id: str) -> ApprovalStatus:
        a = self.approvals[approval_id]
        return ApprovalStatus(approval_id, a["state"], a["decided_at"], wire(datetime.now(UTC)))

    def _owner(self, claim: Claim) -> None:
        current = self.purchase.claim
        if (
            claim.attempt_id != current.attempt_id
            or claim.claim_token != current.claim_token
            or claim.claim_generation != current.claim_generation
            or not self.lease_ok
        ):
            raise ServerRejected(409, "claim_not_current")

    def request_approval(self, claim: Claim, proof: SubmissionProof, screenshot_asset_id: str) -> ApprovalStatus:
        self._maybe_down()
        body = {
            "approval_key": str(uuid.uuid4()),
            "task_id": claim.task_id,
            "authorization_id": claim.authorization_id,
            "claim_generation": claim.claim_generation,
            "claim_token": claim.claim_token,
            "screenshot_asset_id": screenshot_asset_id,
            "readings": approval_readings(proof),
        }
        validate("approval.request", body)
        self._owner(claim)
        if not self.purchase.claim.supervised:
            raise NotSupervised(409, "not_supervised")
        if self.assets.get(screenshot_asset_id) != (claim.attempt_id, "CONFIRM_PAGE_GATE_3"):
            raise ServerRejected(422, "approval_screenshot_invalid")
        with self._lock:
            self.approval_requests.append(body)
            for approval_id, a in self.approvals.items():
                if a["attempt_id"] == claim.attempt_id and a["state"] in ("WAITING", "APPROVED"):
                    if a["readings"] == body["readings"]:
                        return self._status(approval_id)
                    a["state"] = "VOID"
            approval_id = str(uuid.uuid4())
            self.approvals[approval_id] = {
                "attempt_id": claim.attempt_id,
                "readings": body["readings"],
                "asset": screenshot_asset_id,
                "state": "WAITING",
                "decided_at": None,
            }
        if self.on_approval_request:
            self.on_approval_request(approval_id)
        return self._status(approval_id)

    def approval_status(self, claim: Claim, approval_id: str) -> ApprovalStatus:
        self._maybe_down()
        validate(
            "approval_status.request",
            {"approval_id": approval_id, "claim_generation": claim.claim_generation, "claim_token": claim.claim_token},
        )
        self._owner(claim)
        if approval_id not in self.approvals or self.approvals[approval_id]["attempt_id"] != claim.attempt_id:
            raise ServerRejected(404, "not_found")
        self.status_reads += 1
        status = self._status(approval_id)
        validate("approval.response", status.__dict__)
        return status

    # --- the person in the drawer -----------------------------------------------------------------
    def decide(self, state: str, approval_id: str | None = None) -> None:
        """Approve/reject the live approval (the admin drawer's 批准 / 驳回), or void it."""
        with self._lock:
            live = [i for i, a in self.approvals.items() if a["state"] == "WAITING"]
            target = approval_id or (live[-1] if live else None)
            assert target is not None, "no approval is waiting"
            self.approvals[target]["state"] = state
            self.approvals[target]["decided_at"] = wire(datetime.now(UTC))

    def decide_after(self, seconds: float, state: str) -> None:
        """Decide ``seconds`` after the approval request arrives (set before the flow runs; an
        ``on_approval_request`` hook already set still runs first)."""
        before = self.on_approval_request

        def on_request(approval_id: str) -> None:
            if before:
                before(approval_id)
            timer = threading.Timer(seconds, self.decide, (state, approval_id))
            timer.daemon = True
            timer.start()

        self.on_approval_request = on_request

    # --- the fence's extra condition ----------------------------------------------------------------
    def create_submission_fence(self, claim: Claim, proof: SubmissionProof) -> SubmissionPermit:
        readings = approval_readings(proof)
        self.fence_bodies.append(readings)
        if self.purchase.claim.supervised and not any(
            a["attempt_id"] == claim.attempt_id and a["state"] == "APPROVED" and a["readings"] == readings
            for a in self.approvals.values()
        ):
            raise ApprovalRequired(409, "approval_required")
        return super().create_submission_fence(claim, proof)
