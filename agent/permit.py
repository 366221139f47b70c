"""SubmissionPermit: the unforgeable right to tap 提交订单 once (docs/architecture.md "Agent").

A permit exists only for a *first* submission-fence response with ``click_permitted: true``. A replay
(``click_permitted: false, reconciliation_required: true``) can never yield one. The constructor
demands a module-private capability object; the only legitimate builder is :func:`_from_fence_response`,
called by ``cmbuyer.agent.client`` after schema validation. Importers of this module are limited to
``client``, ``ports``, ``submit`` and ``flow`` (static check in tests/agent/test_layers.py).
"""

from __future__ import annotations

from dataclasses import KW_ONLY, InitVar, dataclass
from typing import Any

from cmbuyer.agent.model import SubmissionProof
from cmbuyer.schemas import validate


class _Capability:
    __slots__ = ()


_CAPABILITY = _Capability()


class PermitRefused(Exception):
    """The fence response does not grant a click (replay, or malformed)."""


@dataclass(frozen=True, eq=False, repr=False)
class SubmissionPermit:
    """One-time permission for one submission. Immutable (a frozen dataclass: assigning raises AttributeError);
    equal only to itself; ``repr`` shows ids only; never pickled or copied. ``proof`` is the fence request's
    readings the server granted it for: the screen must still read exactly so right before the tap
    (agent/submit.py). Built only with the module's capability (:func:`_from_fence_response`); anything
    else raises TypeError."""

    capability: InitVar[object]
    _: KW_ONLY
    submission_id: str
    attempt_id: str
    task_id: str
    proof: SubmissionProof

    def __post_init__(self, capability: object) -> None:
        if capability is not _CAPABILITY:
            raise TypeError("SubmissionPermit can only be built from a first fence response")

    def __reduce__(self) -> Any:  # no pickling/copying into a second permit
        raise TypeError("SubmissionPermit cannot be serialized")

    def __repr__(self) -> str:
        return f"SubmissionPermit(submission_id={self.submission_id!r})"


def _from_fence_response(body: Any, *, attempt_id: str, task_id: str, proof: SubmissionProof) -> SubmissionPermit:
    """Validate a fence response body and build a permit iff it is a first grant; ``proof`` is the body
    of the fence request that got this answer."""
    validate("submission_fence.response", body)
    if body["click_permitted"] is not True or body["reconciliation_required"] is not False:
        raise PermitRefused("fence response does not permit a click (replay or reconciliation)")
    return SubmissionPermit(
        _CAPABILITY, submission_id=body["submission_id"], attempt_id=attempt_id, task_id=task_id, proof=proof
    )
