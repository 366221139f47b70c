"""Value types shared by the flow, the journal and the TaskSource/ResultSink ports (docs/architecture.md "Agent").

Money is ``Decimal``; times on the wire are strings; tokens are hidden from ``repr``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from cmbuyer.schemas.sku import SkuOptions, legacy_options


def new_key() -> str:
    """A fresh lowercase UUIDv4 idempotency key."""
    return str(uuid.uuid4())


def utc_now_wire() -> str:
    """Current UTC time as ``YYYY-MM-DDTHH:MM:SSZ`` (the wire time of docs/api.md "Conventions")."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Session:
    """One agent run (``session_id`` is stable for the process lifetime)."""

    session_id: str


@dataclass(frozen=True)
class Task:
    id: str
    version: int
    title: str
    product_url: str
    goods_id: str
    # the ordered (dimension, value) pairs as the task names them (docs/api.md "SKU options")
    sku_options: SkuOptions
    quantity: int
    max_total_price: Decimal

    @classmethod
    def from_wire(cls, task: dict[str, Any]) -> Task:
        """The ``task`` object of a claim-next response (``claim_next.response``): every field has
        its wire name; ``max_total_price`` comes as a money string, ``sku_options`` as ``[[dimension,
        value], ...]`` (an older server sends only ``sku_color``/``sku_size``: their special
        case). A missing field raises KeyError."""
        values = {f.name: task[f.name] for f in fields(cls) if f.name != "sku_options"}
        values["max_total_price"] = Decimal(task["max_total_price"])
        given = task.get("sku_options")
        options = (
            tuple((str(d), str(v)) for d, v in given)
            if given is not None
            else legacy_options(task["sku_color"], task["sku_size"])
        )
        return cls(**values, sku_options=options)


@dataclass(frozen=True)
class Claim:
    """The attempt this device holds. ``claim_token`` proves ownership only (not a permit)."""

    task_id: str
    task_version: int
    authorization_id: str
    attempt_id: str
    claim_generation: int
    claim_token: str = field(repr=False)
    session_id: str
    lease_expires_at: str
    authorization_expires_at: str
    # a person must approve what the phone read before the fence (claim-next
    # ``attempt.supervised``; absent on the wire = False) — agent/approval.py
    supervised: bool = False

    @classmethod
    def from_claim_next(cls, body: dict[str, Any], session_id: str) -> Claim:
        """The claim a claim-next 200 body (``claim_next.response``: ``task``, ``authorization``,
        ``attempt``) grants to ``session_id``. ``supervised`` is True only when the attempt says
        ``true`` (absent = False). A missing field raises KeyError."""
        t, a, att = body["task"], body["authorization"], body["attempt"]
        return cls(
            task_id=t["id"],
            task_version=t["version"],
            authorization_id=a["id"],
            attempt_id=att["id"],
            claim_generation=att["claim_generation"],
            claim_token=att["claim_token"],
            session_id=session_id,
            lease_expires_at=att["lease_expires_at"],
            authorization_expires_at=a["expires_at"],
            supervised=att.get("supervised", False) is True,
        )


@dataclass(frozen=True)
class ClaimedPurchase:
    task: Task
    claim: Claim
    server_now: str


@dataclass(frozen=True)
class Lease:
    lease_expires_at: str
    server_now: str


@dataclass(frozen=True)
class TaskEvent:
    """One step event with fixed codes (``common.json#/$defs/step|outcome|reason_code``)."""

    step: str
    outcome: str
    reason_code: str | None = None
    summary: str = ""
    occurred_at: str = field(default_factory=utc_now_wire)


@dataclass(frozen=True)
class ScreenshotAsset:
    kind: str  # common.json#/$defs/evidence_kind
    png: bytes = field(repr=False)
    captured_at: str = field(default_factory=utc_now_wire)


@dataclass(frozen=True)
class AssetRef:
    asset_id: str
    sha256: str


@dataclass(frozen=True)
class AttemptFailure:
    reason_code: str
    summary: str
    evidence_asset_id: str | None = None


@dataclass(frozen=True)
class SubmissionProof:
    """What the gates READ on the screen, sent to submission-fence so the server can re-check and refuse
    (docs/api.md "Fence request"). Never the task's own values.

    ``selected_options`` are the options read there, named by the task's dimensions in the task's order;
    ``gate3_unit_price`` is the unit price on
    the screen that holds the submit control; ``confirm_page_amount`` the total from ``提交订单 ¥<total>``;
    ``payment_mode`` the mode name read from the payment row beside it (e.g. ``微信支付``).
    """

    selected_options: SkuOptions
    gate1_unit_price: Decimal
    gate2_unit_price: Decimal
    gate3_unit_price: Decimal
    quantity_read: int
    confirm_page_amount: Decimal
    submit_control_match_count: int
    payment_mode: str


@dataclass(frozen=True)
class SubmissionResult:
    """The one result report after the tap. ``order_sn`` (the order number read by the read-only
    confirmation) and ``observation_reason`` (common.json ``observation_reason``, e.g.
    ``PAYMENT_SUSPECTED``) are optional and only sent when set."""

    observation: str  # SUBMITTED | EXTERNAL_PAYMENT_HANDOFF | SECURITY_CHALLENGE | UNKNOWN
    evidence_asset_id: str | None = None
    order_sn: str | None = None
    observation_reason: str | None = None


APPROVAL_STATES = ("WAITING", "APPROVED", "REJECTED", "VOID")


@dataclass(frozen=True)
class ApprovalStatus:
    """The server's answer to an approval request or status read (``approval.response.json``):
    ``state`` one of :data:`APPROVAL_STATES`; ``decided_at``/``server_now`` wire times (UTC);
    ``decided_at`` is None while WAITING."""

    approval_id: str
    state: str
    decided_at: str | None
    server_now: str
