"""SubmissionPermit: the unforgeable right to tap 提交订单 once (docs/architecture.md "Agent").

A permit exists only for a *first* submission-fence response with ``click_permitted: true``. A replay
(``click_permitted: false, reconciliation_required: true``) can never yield one. The constructor
demands a module-private capability object; the only legitimate builder is :func:`_from_fence_response`,
called by ``cmbuyer.agent.client`` after schema validation. Importers of this module are limited to
``client``, ``ports``, ``submit`` and ``flow`` (static check in tests/agent/test_isolation.py).
"""

from __future__ import annotations

from typing import Any

from cmbuyer.agent.model import SubmissionProof
from cmbuyer.schemas import validate


class _Capability:
    __slots__ = ()


_CAPABILITY = _Capability()


class PermitRefused(Exception):
    """The fence response does not grant a click (replay, or malformed)."""


class SubmissionPermit:
    """One-time permission for one submission. Immutable; ``repr`` shows ids only. ``proof`` is the
    fence request's readings the server granted it for: the screen must still read exactly so right
    before the tap (agent/submit.py)."""

    __slots__ = ("_attempt_id", "_proof", "_submission_id", "_task_id")
    _attempt_id: str
    _proof: SubmissionProof
    _submission_id: str
    _task_id: str

    def __init__(
        self, capability: object, *, submission_id: str, attempt_id: str, task_id: str, proof: SubmissionProof
    ) -> None:
        if capability is not _CAPABILITY:
            raise TypeError("SubmissionPermit can only be built from a first fence response")
        object.__setattr__(self, "_submission_id", submission_id)
        object.__setattr__(self, "_attempt_id", attempt_id)
        object.__setattr__(self, "_task_id", task_id)
        object.__setattr__(self, "_proof", proof)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("SubmissionPermit is immutable")

    def __reduce__(self) -> Any:  # no pickling/copying into a second permit
        raise TypeError("SubmissionPermit cannot be serialized")

    @property
    def submission_id(self) -> str:
        return self._submission_id

    @property
    def attempt_id(self) -> str:
        return self._attempt_id

    @property
    def task_id(self) -> str:
        return self._task_id

    @property
    def proof(self) -> SubmissionProof:
        return self._proof

    def __repr__(self) -> str:
        return f"SubmissionPermit(submission_id={self._submission_id!r})"


def _from_fence_response(body: Any, *, attempt_id: str, task_id: str, proof: SubmissionProof) -> SubmissionPermit:
    """Validate a fence response body and build a permit iff it is a first grant; ``proof`` is the body
    of the fence request that got this answer."""
    validate("submission_fence.response", body)
    if body["click_permitted"] is not True or body["reconciliation_required"] is not False:
        raise PermitRefused("fence response does not permit a click (replay or reconciliation)")
    return SubmissionPermit(
        _CAPABILITY, submission_id=body["submission_id"], attempt_id=attempt_id, task_id=task_id, proof=proof
    )
