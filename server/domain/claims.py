"""Claim rules (docs/api.md "POST /api/v1/tasks/claim-next" and "POST /api/v1/tasks/{task_id}/lease/renew"). Pure: no
I/O, no SQL, no clock reads — rows and times come in as arguments.

- :class:`ClaimPolicy` — what the claim, renew and heartbeat jobs need from the settings;
- :func:`claimable` — the eligibility of an authorization and its task. ``store.authorizations.next_candidate``
  states the same rule as its SQL ``WHERE`` (kept in SQL so the partial index can find the oldest row);
  ``tests/server/claims/test_eligibility_table.py`` proves the two agree on every combination;
- :func:`snapshot_matches` — the fields frozen in an authorization still equal the task's;
- :func:`may_claim` — the heartbeat gate of claim-next (fresh, READY, an allowed app version);
- :func:`claim_is_current` — the "is this the current claim?" predicate of renew, events, fail, the
  approval request and the fence;
- :func:`task_at_claim`, :func:`in_progress_before_fence`, :func:`may_resume`, :func:`renewable` — whether
  the task and authorization behind a claim are still where the claim left them;
- the fixed 409s of the claim paths (:func:`claim_not_current`, :func:`claim_requires_manual`,
  :func:`app_version_not_allowed`).

The row arguments are typed by the protocols of :mod:`cmbuyer.server.domain.rows` (the store's dataclasses
satisfy them), so this module needs nothing from the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from cmbuyer.schemas.sku import legacy_view, options_from_text
from cmbuyer.server.domain import claim_token, lease
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import Conflict
from cmbuyer.server.domain.rows import AuthorizationRow, ClaimRow, ResumableClaim, Snapshot, TaskRow
from cmbuyer.server.domain.states import AttemptState, AuthorizationState, TaskState
from cmbuyer.server.domain.supervision import DEFAULT_SUPERVISED_ORDERS, SupervisionPolicy

# The task fields an authorization freezes at start-purchases; claim, renew and the fence compare them.
SNAPSHOT_FIELDS = ("title", "product_url", "goods_id", "sku_options", "quantity", "max_total_price")
# The lease of an OPEN attempt may be renewed while its task is still being worked on (before the
# fence) or waits for the single result after it; any other combination is not a current claim.
RENEWABLE = frozenset(
    {
        (TaskState.CLAIMED, AuthorizationState.CLAIMED),
        (TaskState.ORDERING, AuthorizationState.CLAIMED),
        (TaskState.SUBMITTING, AuthorizationState.FENCED),
    }
)
# frozen, so one shared default is safe
DEFAULT_SUPERVISION = SupervisionPolicy(DEFAULT_SUPERVISED_ORDERS)


class HeartbeatFacts(Protocol):
    """The device's latest heartbeat as the claim gate reads it (``store.devices.DeviceGate``)."""

    @property
    def last_heartbeat_at(self) -> str | None: ...
    @property
    def reported_state(self) -> str | None: ...
    @property
    def pdd_version(self) -> str | None: ...


class _Secret(Protocol):
    def reveal(self) -> bytes: ...


class ClaimSettings(Protocol):
    """The settings :meth:`ClaimPolicy.from_settings` reads (``cmbuyer.server.config.Settings``)."""

    @property
    def claim_lease_ttl(self) -> int: ...
    @property
    def allowed_app_versions(self) -> tuple[str, ...]: ...
    @property
    def heartbeat_interval(self) -> int: ...
    @property
    def heartbeat_stale_factor(self) -> int: ...
    @property
    def supervised_orders(self) -> int: ...
    def require_secrets(self) -> tuple[_Secret, _Secret]: ...


@dataclass(frozen=True)
class ClaimPolicy:
    """What the claim/renew/heartbeat jobs need from the settings (secret bytes kept out of ``repr``).

    ``lease_ttl``, ``heartbeat_interval`` in seconds; ``heartbeat_stale_factor`` a multiplier.
    """

    secret: bytes
    lease_ttl: int
    allowed_app_versions: tuple[str, ...]
    heartbeat_interval: int
    heartbeat_stale_factor: int
    # CMBUYER_SUPERVISED_ORDERS; built without settings it keeps the default: supervised, not off
    supervision: SupervisionPolicy = DEFAULT_SUPERVISION

    def __repr__(self) -> str:
        return (
            f"ClaimPolicy(lease_ttl={self.lease_ttl}, allowed_app_versions={self.allowed_app_versions!r},"
            f" supervision={self.supervision!r})"
        )

    @classmethod
    def from_settings(cls, settings: ClaimSettings) -> ClaimPolicy:
        """Build from validated settings; raises SettingsError when the claim-token secret is missing."""
        secret, _ = settings.require_secrets()
        return cls(
            secret.reveal(),
            settings.claim_lease_ttl,
            settings.allowed_app_versions,
            settings.heartbeat_interval,
            settings.heartbeat_stale_factor,
            SupervisionPolicy(settings.supervised_orders),
        )


def claim_not_current() -> Conflict:
    """The fixed 409 for any claim mismatch (docs/api.md "Status and error codes of these routes"; never says which part
    failed)."""
    return Conflict("claim is not current", code=Code.CLAIM_NOT_CURRENT)


def claim_requires_manual() -> Conflict:
    """The fixed 409 for an open claim that cannot simply be resumed (docs/api.md "claim-next")."""
    return Conflict("the device holds a claim that needs a person", code=Code.CLAIM_REQUIRES_MANUAL)


def app_version_not_allowed() -> Conflict:
    """The fixed 409 when the device's heartbeat does not allow claiming."""
    return Conflict("heartbeat missing, stale, not READY or app version not allowed", code=Code.APP_VERSION_NOT_ALLOWED)


def snapshot_of(row: Snapshot) -> dict[str, Any]:
    """``{field: value}`` of the :data:`SNAPSHOT_FIELDS` of ``row``: what start-purchases freezes from the task
    into its authorization and what claim-next sends as the task (docs/api.md "POST /api/v1/tasks/claim-next").
    Raises nothing."""
    return {f: getattr(row, f) for f in SNAPSHOT_FIELDS}


def wire_snapshot(row: Snapshot) -> dict[str, Any]:
    """The snapshot as claim-next sends it (docs/api.md "SKU options"): :func:`snapshot_of` with
    ``sku_options`` as a list of ``[dimension, value]`` pairs, plus ``sku_color``/``sku_size`` — the
    colour/size special case read back for agents that know only colour/size (both null for any other options)."""
    out = snapshot_of(row)
    options = options_from_text(row.sku_options)
    out["sku_options"] = [list(o) for o in options]
    out["sku_color"], out["sku_size"] = legacy_view(options)
    return out


def snapshot_matches(task: Snapshot, authorization: Snapshot) -> bool:
    """True when every field frozen in the authorization still equals the task's current field
    (``sku_options`` compared as canonical text)."""
    return all(getattr(task, f) == getattr(authorization, f) for f in SNAPSHOT_FIELDS)


def claimable(authorization: AuthorizationRow, task: TaskRow, now: datetime) -> bool:
    """The eligibility of an authorization for claim-next (docs/api.md "POST /api/v1/tasks/claim-next"): ACTIVE,
    ``expires_at`` strictly later than ``now`` (equal = expired), its task PENDING at exactly the snapshot's version,
    and every snapshot field equal to the task's (a drifted snapshot is skipped, never claimed: fail closed).

    The SQL twin is ``store.authorizations.next_candidate``'s ``WHERE``, which also picks the oldest such row.
    """
    return (
        authorization.state == AuthorizationState.ACTIVE
        and lease.is_live(authorization.expires_at, now)
        and task.state == TaskState.PENDING
        and task.version == authorization.task_version
        and snapshot_matches(task, authorization)
    )


def version_allowed(pdd_version: str | None, allowed_app_versions: tuple[str, ...]) -> bool:
    """Exact match of the reported app version name against ``CMBUYER_ALLOWED_APP_VERSIONS``."""
    return pdd_version is not None and pdd_version in allowed_app_versions


def may_claim(gate: HeartbeatFacts, now: datetime, policy: ClaimPolicy) -> bool:
    """The heartbeat gate of claim-next: fresh (younger than interval × factor), READY, and an allowed app
    version according to the *current* configuration (not the flag stored at heartbeat time)."""
    return ready_for_claims(
        gate,
        now,
        heartbeat_interval=policy.heartbeat_interval,
        heartbeat_stale_factor=policy.heartbeat_stale_factor,
        allowed_app_versions=policy.allowed_app_versions,
    )


def ready_for_claims(
    gate: HeartbeatFacts,
    now: datetime,
    *,
    heartbeat_interval: int,
    heartbeat_stale_factor: int,
    allowed_app_versions: tuple[str, ...],
) -> bool:
    """The heartbeat gate of :func:`may_claim` from the settings it reads (no secret needed): also what
    the start confirmation counts as "a phone READY now"."""
    return (
        lease.heartbeat_fresh(gate.last_heartbeat_at, now, heartbeat_interval, heartbeat_stale_factor)
        and gate.reported_state == "READY"
        and version_allowed(gate.pdd_version, allowed_app_versions)
    )


def claim_is_current(
    attempt: ClaimRow,
    *,
    device_id: str,
    token: str,
    now: datetime,
    generation: int | None = None,
    task_id: str | None = None,
    require_lease: bool = True,
) -> bool:
    """True when ``attempt`` is the OPEN claim held by ``device_id`` whose token matches ``token``.

    ``generation``/``task_id`` are checked when given; ``require_lease`` demands ``lease_expires_at > now``
    (strict: equal means expired, no grace). The token comparison is constant-time and always runs, so
    timing does not reveal which field was wrong (docs/api.md).
    """
    token_ok = claim_token.matches(attempt.token_hash, token)
    return (
        token_ok
        and attempt.device_id == device_id
        and attempt.state == AttemptState.OPEN
        and (generation is None or attempt.claim_generation == generation)
        and (task_id is None or attempt.task_id == task_id)
        and (not require_lease or lease.is_live(attempt.lease_expires_at, now))
    )


def task_at_claim(task: TaskRow, claimed_task_version: int) -> bool:
    """True when the task is where a claim at ``claimed_task_version`` left it: CLAIMED at that version, or
    ORDERING one version later (the attempt's first event batch moved it, docs/api.md)."""
    return (task.state == TaskState.CLAIMED and task.version == claimed_task_version) or (
        task.state == TaskState.ORDERING and task.version == claimed_task_version + 1
    )


def in_progress_before_fence(task: TaskRow, authorization: AuthorizationRow) -> bool:
    """True while a claim is worked on and not yet fenced: task CLAIMED or ORDERING, authorization CLAIMED
    (fail and the approval request need it; the lease is each caller's own question)."""
    return task.state in (TaskState.CLAIMED, TaskState.ORDERING) and authorization.state == AuthorizationState.CLAIMED


def may_resume(
    attempt: ResumableClaim, task: TaskRow, authorization: AuthorizationRow, *, session_id: str, now: datetime
) -> bool:
    """claim-next's resume rule for the device's open claim (docs/api.md): the same agent session, the lease and
    the authorization both strictly later than ``now``, the task where the claim left it
    (:func:`task_at_claim`), the authorization CLAIMED with an unchanged snapshot, and the claim made at the
    version right after the snapshot's. False means ``409 claim_requires_manual``: never a second attempt,
    never a transfer."""
    return (
        attempt.session_id == session_id
        and lease.is_live(attempt.lease_expires_at, now)
        and task_at_claim(task, attempt.claimed_task_version)
        and authorization.state == AuthorizationState.CLAIMED
        and lease.is_live(authorization.expires_at, now)
        and snapshot_matches(task, authorization)
        and authorization.task_version + 1 == attempt.claimed_task_version
    )


def renewable(task: TaskRow, authorization: AuthorizationRow, claimed_task_version: int, now: datetime) -> bool:
    """The renew rule for a current claim (docs/api.md "lease/renew"): task and authorization in a
    :data:`RENEWABLE` pair, the authorization strictly later than ``now`` (nothing expired is revived), its
    snapshot unchanged, and the task not behind the claim's version."""
    return (
        (task.state, authorization.state) in RENEWABLE
        and lease.is_live(authorization.expires_at, now)
        and snapshot_matches(task, authorization)
        and task.version >= claimed_task_version
    )
