"""In-process fake TaskSource/ResultSink enforcing the device-API rules that matter to the agent.

Why a fake: it makes flow/runner unit tests fast and lets them force server answers (signals at the
fence, outages at chosen calls). The same paths over real HTTP against the real server are in
test_real_server.py, test_kill_restart.py and test_cli_sim.py. This fake
validates every request body against the wire schemas, enforces the one-time fence (a replay of the
same fence_key answers click_permitted=false), idempotency keys (same key → same answer, different
payload → conflict), and records everything the tests assert on.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import replace
from decimal import Decimal
from typing import Any

from cmbuyer.agent import model
from cmbuyer.agent.client import approval_readings, submission_result_request
from cmbuyer.agent.errors import FenceReplayed, ServerRejected, ServerUnreachable
from cmbuyer.agent.journal import Journal
from cmbuyer.agent.permit import PermitRefused, SubmissionPermit, _from_fence_response
from cmbuyer.schemas import validate
from cmbuyer.schemas.sku import legacy_options


def make_purchase(**task_over: Any) -> model.ClaimedPurchase:
    t = {
        "id": str(uuid.uuid4()),
        "version": 3,
        "title": "t",
        "product_url": "https://mobile.yangkeduo.com/goods.html?goods_id=937122477375",
        "goods_id": "937122477375",
        "sku_options": legacy_options("黑色CHA(纯棉)", "M(建议100-115)"),
        "quantity": 2,
        "max_total_price": Decimal("30.00"),
    }
    if "sku_color" in task_over or "sku_size" in task_over:  # the colour/size special case
        color = task_over.pop("sku_color", "黑色CHA(纯棉)")
        t["sku_options"] = legacy_options(color, task_over.pop("sku_size", "M(建议100-115)"))
    t.update(task_over)
    task = model.Task(**t)
    claim = model.Claim(
        task_id=task.id,
        task_version=task.version,
        authorization_id=str(uuid.uuid4()),
        attempt_id=str(uuid.uuid4()),
        claim_generation=1,
        claim_token="ab" * 32,
        session_id=str(uuid.uuid4()),
        lease_expires_at="2099-01-01T00:05:00Z",
        authorization_expires_at="2099-01-01T01:00:00Z",
    )
    return model.ClaimedPurchase(task=task, claim=claim, server_now="2099-01-01T00:00:00Z")


def read_proof(task: model.Task, unit_price: Decimal, **over: Any) -> model.SubmissionProof:
    """The readings a phone takes at the fence for ``task`` when all three gates show ``unit_price``: the
    task's own options and quantity, one submit control, ``微信支付`` and a confirm-page total of
    ``unit_price`` × quantity. ``over`` replaces any of those fields (e.g. a discounted
    ``confirm_page_amount``)."""
    proof = model.SubmissionProof(
        selected_options=task.sku_options,
        gate1_unit_price=unit_price,
        gate2_unit_price=unit_price,
        gate3_unit_price=unit_price,
        quantity_read=task.quantity,
        confirm_page_amount=unit_price * task.quantity,
        submit_control_match_count=1,
        payment_mode="微信支付",
    )
    return replace(proof, **over)


_CLAIM_FIELDS = (
    "attempt_id",
    "task_id",
    "authorization_id",
    "claim_token",
    "session_id",
    "lease_expires_at",
    "authorization_expires_at",
)


def journal_claim(
    journal: Journal,
    claim: model.Claim,
    *,
    task_version: int = 3,
    claim_generation: int = 1,
    task: dict[str, Any] | None = None,
) -> None:
    """Record ``claim`` in ``journal`` as the runner does when claim-next answers (the defaults are
    what :func:`make_purchase` issues: task version 3, generation 1)."""
    fields = {name: getattr(claim, name) for name in _CLAIM_FIELDS}
    journal.record_claim(**fields, task_version=task_version, claim_generation=claim_generation, task=task or {})


class FakeServer:
    def __init__(self, purchase: model.ClaimedPurchase, keys: Any = None) -> None:
        self.purchase = purchase
        self.keys = keys
        self.events: list[model.TaskEvent] = []
        self.evidence: list[tuple[str, str]] = []  # (kind, asset_id)
        self.fails: list[model.AttemptFailure] = []
        self.fences: dict[str, dict[str, Any]] = {}  # fence_key -> response
        self.results: dict[str, dict[str, Any]] = {}  # result_key -> payload
        self.task_state = "CLAIMED"
        self.down = 0  # number of calls to fail with a transport error
        self.lease_ok = True

    def _maybe_down(self) -> None:
        if self.down > 0:
            self.down -= 1
            raise ServerUnreachable("fake server down")

    def claim_next(self, session: model.Session) -> model.ClaimedPurchase | None:
        return self.purchase

    def renew_lease(self, claim: model.Claim) -> model.Lease:
        if not self.lease_ok:
            raise ServerRejected(409, "claim_not_current")
        return model.Lease("2099-01-01T00:05:00Z", "2099-01-01T00:00:00Z")

    def append_events(self, claim: model.Claim, events: list[model.TaskEvent]) -> None:
        self._maybe_down()
        validate(
            "events.request",
            {
                "batch_key": str(uuid.uuid4()),
                "attempt_id": claim.attempt_id,
                "claim_generation": 1,
                "claim_token": claim.claim_token,
                "events": [e.__dict__ for e in events],
            },
        )
        self.events.extend(events)
        if self.task_state == "CLAIMED":
            self.task_state = "ORDERING"

    def upload_screenshot(self, claim: model.Claim, asset: model.ScreenshotAsset) -> model.AssetRef:
        self._maybe_down()
        assert asset.png.startswith(b"\x89PNG\r\n\x1a\n")
        asset_id = str(uuid.uuid4())
        self.evidence.append((asset.kind, asset_id))
        return model.AssetRef(asset_id, hashlib.sha256(asset.png).hexdigest())

    def fail_attempt(self, claim: model.Claim, failure: model.AttemptFailure) -> None:
        self._maybe_down()
        if self.task_state == "SUBMITTING":
            raise ServerRejected(409, "submission_fenced")
        self.fails.append(failure)
        self.task_state = "FAILED"

    def create_submission_fence(self, claim: model.Claim, proof: model.SubmissionProof) -> SubmissionPermit:
        self._maybe_down()
        key = self.keys.key("fence", claim.attempt_id) if self.keys else "k"
        t = self.purchase.task
        payload = {
            "fence_key": key if self.keys else str(uuid.uuid4()),
            "task_id": claim.task_id,
            "expected_task_version": claim.task_version,
            "authorization_id": claim.authorization_id,
            "claim_generation": 1,
            "claim_token": claim.claim_token,
            **approval_readings(proof),
            "submit_control_match_count": proof.submit_control_match_count,
        }
        validate("submission_fence.request", payload)
        # The server's re-check (docs/api.md "Fence refusals", on the values read).
        if (
            dict(proof.selected_options) != dict(t.sku_options)
            or len(proof.selected_options) != len(t.sku_options)
            or proof.quantity_read != t.quantity
            or not proof.gate1_unit_price == proof.gate2_unit_price == proof.gate3_unit_price
            or proof.confirm_page_amount > t.max_total_price
            or proof.confirm_page_amount > proof.gate1_unit_price * proof.quantity_read
            or proof.payment_mode not in ("微信支付", "支付宝")
            or proof.submit_control_match_count != 1
        ):
            raise ServerRejected(409, "fence_refused")
        if key in self.fences:
            body = dict(self.fences[key], click_permitted=False, reconciliation_required=True)
        else:
            body = {
                "submission_id": str(uuid.uuid4()),
                "status": "FENCED",
                "click_permitted": True,
                "reconciliation_required": False,
                "submit_text": "提交订单",
            }
            self.fences[key] = body
            self.task_state = "SUBMITTING"
        try:
            return _from_fence_response(body, attempt_id=claim.attempt_id, task_id=claim.task_id, proof=proof)
        except PermitRefused as exc:
            raise FenceReplayed(body["submission_id"]) from exc

    def report_submission_result(self, permit: SubmissionPermit, result: model.SubmissionResult) -> None:
        key = self.keys.key("result", permit.attempt_id) if self.keys else str(uuid.uuid4())
        self.report_recovered_result(
            submission_id=permit.submission_id,
            attempt_id=permit.attempt_id,
            claim_token="ab" * 32,
            result=result,
            result_key=key,
        )

    def report_recovered_result(
        self, *, submission_id: str, attempt_id: str, claim_token: str, result: model.SubmissionResult, result_key: str
    ) -> None:
        self._maybe_down()
        payload = submission_result_request(
            result_key=result_key, attempt_id=attempt_id, claim_token=claim_token, result=result
        )
        validate("submission_result.request", payload)
        if result_key in self.results:
            if self.results[result_key] != payload:
                raise ServerRejected(409, "idempotency_conflict")
            return
        if self.results:
            raise ServerRejected(409, "result_conflict")
        self.results[result_key] = payload
        self.task_state = "WAITING_PAYMENT" if result.observation == "SUBMITTED" else "RECONCILIATION_REQUIRED"


class FakeApi(FakeServer):
    """FakeServer plus what the runner needs: heartbeat and a claim queue (claim-next answers each
    queued purchase once, then 204/None). Records every heartbeat state and claim-next call."""

    def __init__(
        self, purchases: list[model.ClaimedPurchase], keys: Any = None, *, allowed: bool = True, interval: int = 10
    ) -> None:
        super().__init__(purchases[0] if purchases else make_purchase(), keys)
        self.queue = list(purchases)
        self.allowed = allowed
        self.interval = interval
        self.heartbeat_states: list[str] = []
        self.heartbeat_holds: list[dict[str, Any] | None] = []  # the hold each heartbeat reported
        self.claim_calls = 0
        self.claim_pack_ids: list[str | None] = []  # the pack_id sent with each claim-next
        self.claimed: list[model.ClaimedPurchase] = []
        self.on_claim: Any = None  # callable(purchase) after a claim is handed out
        self.fail_keys: list[str] = []

    def heartbeat(
        self, *, state: str, hold: dict[str, Any] | None = None, retries: int | None = None, **device: Any
    ) -> dict[str, Any]:
        """HttpDeviceApi.heartbeat's keywords (``device``: the phone's fields, ``pack_id``), checked against the
        request schema as the client would send them (None for an optional field: left out)."""
        self._maybe_down()
        self.heartbeat_holds.append(hold)
        sent = {k: v for k, v in device.items() if v is not None or k not in ("pack_id", "screen")}
        validate(
            "heartbeat.request", {"device_id": str(uuid.uuid4()), "client_version": "0.1.0", **sent, "state": state}
        )
        self.heartbeat_states.append(state)
        return {
            "device_id": str(uuid.uuid4()),
            "app_version_allowed": self.allowed,
            "server_now": "2099-01-01T00:00:00Z",
            "heartbeat_interval_seconds": self.interval,
        }

    def claim_next(self, session: model.Session, *, pack_id: str | None = None) -> model.ClaimedPurchase | None:
        self._maybe_down()
        self.claim_calls += 1
        self.claim_pack_ids.append(pack_id)
        if self.keys is not None:
            self.keys.key("claim_request", session.session_id)
        if not self.queue:
            if self.keys is not None:
                self.keys.drop_key("claim_request", session.session_id)
            return None
        purchase = self.queue.pop(0)
        self.purchase = purchase
        self.task_state = "CLAIMED"
        self.fences.clear()
        self.results.clear()
        self.claimed.append(purchase)
        if self.on_claim:
            self.on_claim(purchase)
        return purchase

    def forget_claim_request(self, session: model.Session) -> None:
        if self.keys is not None:
            self.keys.drop_key("claim_request", session.session_id)

    def fail_attempt(self, claim: model.Claim, failure: model.AttemptFailure) -> None:
        if self.keys is not None:
            self.fail_keys.append(self.keys.key("fail", claim.attempt_id))
        super().fail_attempt(claim, failure)

    on_event: Any = None  # callable(TaskEvent) before an event batch is accepted
    on_fence: Any = None  # callable() before the fence is granted

    def append_events(self, claim: model.Claim, events: list[model.TaskEvent]) -> None:
        for e in events:
            if self.on_event:
                self.on_event(e)
        super().append_events(claim, events)

    def create_submission_fence(self, claim: model.Claim, proof: model.SubmissionProof) -> SubmissionPermit:
        if self.on_fence:
            self.on_fence()
        return super().create_submission_fence(claim, proof)
