"""Supervised first orders: the rules, no I/O.

A *pair* is one device running one selector pack (``pack_key``). Until a person has confirmed
``CMBUYER_SUPERVISED_ORDERS`` of the pair's orders as right, every attempt the pair claims is
*supervised*: before the fence the phone sends what it read on the screen holding the submit control
(the *readings*, the 8 values the fence re-checks) and a person approves or rejects them. The fence of a
supervised attempt needs an APPROVED approval request whose readings hash equals the hash of the fence
body's readings, so an approval is bound to one attempt and one set of readings.

Shared by the device side (claim-next, the approval routes, the fence) and the admin side
(approve/reject/verdict/resupervise); docs/api.md "Supervised first orders" and docs/state-machines.md
"Approval request" restate these rules.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from cmbuyer.schemas import MONEY_RE, NO_PACK, PACK_ID_RE
from cmbuyer.schemas.canonical import canonical_json
from cmbuyer.schemas.text import normalize_sku, text_problem
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import InvalidTransition, ValidationFailed
from cmbuyer.server.domain.sku_readings import reported_options
from cmbuyer.server.domain.states import SubmissionState

DEFAULT_SUPERVISED_ORDERS = 3
# How long an agent waits for a person's approval when its request does not say (the agent's own default,
# CMBUYER_AGENT_APPROVAL_TIMEOUT_SECONDS): the task table's countdown.
DEFAULT_APPROVAL_WAIT_SECONDS = 600
# NO_PACK (the heartbeat's "the agent has no pack for the installed app version") is not a pack id; the pack
# id pattern and NO_PACK live in cmbuyer.schemas (the wire format) and are used from there.
PACK_KEY_MAX = 80  # migration 0007: supervision_pairs.pack_key / attempts.pack_key length check
APP_KEY_PREFIX = "app:"

# The readings an approval is bound to: exactly the values the fence re-checks (submission_fence.request.json),
# minus submit_control_match_count (a count of controls, not something a person compares with the task).
READING_KEYS = (
    "selected_options",
    "gate1_unit_price",
    "gate2_unit_price",
    "gate3_unit_price",
    "quantity_read",
    "confirm_page_amount",
    "payment_mode",
)
_MONEY_KEYS = ("gate1_unit_price", "gate2_unit_price", "gate3_unit_price", "confirm_page_amount")


@dataclass(frozen=True)
class SupervisionPolicy:
    """``required_orders`` = ``CMBUYER_SUPERVISED_ORDERS``: confirmed-right orders a pair needs before it
    runs unsupervised; 0 turns supervision off (no attempt is supervised)."""

    required_orders: int

    def __post_init__(self) -> None:
        if type(self.required_orders) is not int or self.required_orders < 0:
            raise ValueError("required_orders must be an integer >= 0")

    @property
    def enabled(self) -> bool:
        """False when the setting is 0."""
        return self.required_orders > 0


def is_supervised(policy: SupervisionPolicy, confirmed_orders: int, held: bool, *, device_off: bool = False) -> bool:
    """Whether a new attempt of a pair with ``confirmed_orders`` confirmed-right orders needs approval.

    Off (``required_orders == 0``) or the device exempted by an admin (``device_off``:
    ``devices.supervision_off``, CLI ``device supervision DEVICE off``) → False. Otherwise True while
    ``confirmed_orders < required_orders`` and for a held pair (a held pair claims nothing anyway, see
    :func:`blocks_claims`; should it ever reach a claim it is watched, never trusted). A pair without a row
    has ``confirmed_orders`` 0.
    """
    if not policy.enabled or device_off:
        return False
    return held or confirmed_orders < policy.required_orders


def blocks_claims(held: bool) -> bool:
    """A held pair (a person marked one of its orders wrong) claims nothing until an admin puts the device
    back under supervision — also when the setting is 0 or the device is exempted: turning supervision off
    does not clear a person's verdict."""
    return held


def pack_key_for(
    claim_pack_id: str | None, heartbeat_pack_id: str | None, version_name: str | None, version_code: int | None
) -> str:
    """The pair's ``pack_key`` (contract "Supervision"; migration 0007):

    1. the pack id the agent sent in claim-next (``claim_pack_id``), else
    2. the pack id of the device's last heartbeat (``devices.pack_id``; NULL for an older agent), else
    3. ``app:<version_name>:<version_code>`` of the Pinduoduo version the heartbeat reported
       (``-`` for a missing code).

    ``NO_PACK`` or a value that is not a pack id counts as absent. Raises ValueError when no key can be
    built (no pack id and no version name) or the key would exceed 80 characters — a caller must stop
    rather than invent a pair.
    """
    for candidate in (claim_pack_id, heartbeat_pack_id):
        if candidate is not None and candidate != NO_PACK and PACK_ID_RE.fullmatch(candidate):
            return candidate
    if not version_name:
        raise ValueError("no pack id and no app version to key the supervision pair on")
    key = f"{APP_KEY_PREFIX}{version_name}:{'-' if version_code is None else version_code}"
    if len(key) > PACK_KEY_MAX:
        raise ValueError("app version too long for a supervision pack key")
    return key


def _bad(key: str) -> ValidationFailed:
    return ValidationFailed(f"readings.{key}", f"reading {key} is missing or malformed")


def canonical_readings(values: Mapping[str, Any]) -> dict[str, Any]:
    """The 8 readings (:data:`READING_KEYS`) in the form the fence compares them (``check_gates`` in
    server/domain/fence.py): the options as ``[[dimension, value], ...]`` normalized (``normalize_sku``;
    a colour/size report as its options, :func:`~cmbuyer.server.domain.sku_readings.reported_options`),
    payment mode NFKC then trimmed, money strings canonical (``12.80``) and kept as text,
    quantity a JSON integer. Other keys of ``values`` (a whole fence body) are ignored.

    Fail closed: a missing key, a value of the wrong type/format, or a text reading holding a bidi,
    invisible or control character (:func:`cmbuyer.schemas.text.text_problem`) raises
    :class:`ValidationFailed` (field ``readings.<key>``), never a default.
    """
    out: dict[str, Any] = {}
    raw = values.get("payment_mode")
    if not isinstance(raw, str) or not normalize_sku(raw).strip():
        raise _bad("payment_mode")
    # a person reads these in the approval drawer: no bidi, invisible or control characters, which would
    # show one value while another is approved (the rule of every stored text); the options'
    # texts are checked by reported_options
    if text_problem(raw) is not None:
        raise _bad("payment_mode")
    options = reported_options(values)
    if options is None:
        raise _bad("selected_options")
    # list pairs: the JSON form, whichever way (options or colour/size) the report named them
    out["selected_options"] = [list(o) for o in options]
    for key in _MONEY_KEYS:
        raw = values.get(key)
        if not isinstance(raw, str) or MONEY_RE.fullmatch(raw) is None:
            raise _bad(key)
        out[key] = raw
    quantity = values.get("quantity_read")
    if type(quantity) is not int or quantity < 1:
        raise _bad("quantity_read")
    out["quantity_read"] = quantity
    out["payment_mode"] = normalize_sku(values["payment_mode"]).strip()
    return out


def parse_readings(readings_json: str) -> dict[str, Any]:
    """The stored readings object (``approval_requests.readings_json``); ``{}`` when it is not a JSON object
    (every value then reads as unreadable and approval is refused — fail closed)."""
    try:
        value = json.loads(readings_json)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def readings_hash(values: Mapping[str, Any]) -> str:
    """SHA-256 hex (64 lowercase characters) of the canonical JSON of :func:`canonical_readings` — what an
    approval stores and what the fence recomputes from its body. Raises like :func:`canonical_readings`."""
    return hashlib.sha256(canonical_json(canonical_readings(values)).encode("utf-8")).hexdigest()


class ApprovalState(StrEnum):
    """Approval request lifecycle (migration 0007 ``approval_requests.state``)."""

    WAITING = "WAITING"
    APPROVED = "APPROVED"
    REJECTED = "REJECTED"
    VOID = "VOID"


# Use-cases: approve/reject (admin, in the task drawer), void (system: the attempt closed, or the phone
# sent other readings for the same attempt). REJECTED and VOID are terminal; an APPROVED request is voided
# when its attempt closes so a stale approval can never be reused.
APPROVAL_TRANSITIONS: dict[tuple[ApprovalState, str], ApprovalState] = {
    (ApprovalState.WAITING, "approve"): ApprovalState.APPROVED,
    (ApprovalState.WAITING, "reject"): ApprovalState.REJECTED,
    (ApprovalState.WAITING, "void"): ApprovalState.VOID,
    (ApprovalState.APPROVED, "void"): ApprovalState.VOID,
}
# The states a live request can be in (at most one per attempt: migration 0007's partial unique index).
LIVE_APPROVAL_STATES = (ApprovalState.WAITING, ApprovalState.APPROVED)


class ApprovalNotWaiting(InvalidTransition):
    """409 ``approval_not_waiting``: approve/reject of a request that is no longer WAITING (already
    decided, or voided because the attempt closed or the phone re-read the screen)."""

    code = Code.APPROVAL_NOT_WAITING


def decide(current: ApprovalState, action: Literal["approve", "reject"]) -> ApprovalState:
    """A person's decision: WAITING → APPROVED (``approve``) or REJECTED (``reject``).

    Raises :class:`ApprovalNotWaiting` when ``current`` is not WAITING, ValueError for another action.
    """
    if action not in ("approve", "reject"):
        raise ValueError("action must be approve or reject")
    try:
        return APPROVAL_TRANSITIONS[(ApprovalState(current), action)]
    except KeyError:
        raise ApprovalNotWaiting(f"approval request is {current}, not WAITING") from None


def void(current: ApprovalState) -> ApprovalState:
    """WAITING/APPROVED → VOID (the attempt closed, or newer readings replaced the request).

    Raises :class:`InvalidTransition` for REJECTED or VOID (nothing to void)."""
    try:
        return APPROVAL_TRANSITIONS[(ApprovalState(current), "void")]
    except KeyError:
        raise InvalidTransition(f"void is not allowed in state {current}") from None


def approval_counts(approval_state: str | None, approval_hash: str | None, fence_hash: str) -> bool:
    """The fence's supervision condition: the attempt's live approval is APPROVED and its readings hash equals
    ``fence_hash`` (the hash of the fence body's readings). None (no live request) → False."""
    return approval_state == ApprovalState.APPROVED and approval_hash is not None and approval_hash == fence_hash


# The verdict on a supervised order. "right" counts an order towards N, so the order must exist (the result
# said so, or a person did); "wrong" can be said of any order whose tap happened — also one that turned out
# not created.
RIGHT_STATES = frozenset({SubmissionState.SUBMITTED, SubmissionState.CREATED})
WRONG_STATES = RIGHT_STATES | {SubmissionState.RECONCILIATION_REQUIRED, SubmissionState.NOT_CREATED}
