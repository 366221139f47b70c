"""The rows the domain rules read, as :class:`typing.Protocol` classes: the store's dataclasses satisfy
them, so the rules need nothing from the store. Each row kind's members are listed once and the narrower
views extend each other; a rule takes the narrowest one that names what it reads.

Read-only properties, not plain attributes: the store's rows are frozen dataclasses.
"""

from __future__ import annotations

from typing import Protocol


class Stateful(Protocol):
    """Any row with a lifecycle ``state`` (docs/state-machines.md)."""

    @property
    def state(self) -> str: ...


class Snapshot(Protocol):
    """The ``SNAPSHOT_FIELDS`` of a task or of the authorization that froze them (docs/api.md
    "POST /api/v1/tasks/claim-next")."""

    @property
    def title(self) -> str: ...
    @property
    def product_url(self) -> str: ...
    @property
    def goods_id(self) -> str: ...
    @property
    def sku_options(self) -> str: ...
    @property
    def quantity(self) -> int: ...
    @property
    def max_total_price(self) -> str: ...


class TaskRow(Snapshot, Stateful, Protocol):
    """A task (``store.tasks.Task``)."""

    @property
    def version(self) -> int: ...


class FencedAuthorization(Snapshot, Stateful, Protocol):
    """An authorization as the fence reads it (``expires_at`` is wire text)."""

    @property
    def expires_at(self) -> str: ...


class AuthorizationRow(FencedAuthorization, Protocol):
    """An authorization as the claim rules read it (``store.authorizations.Authorization``)."""

    @property
    def task_version(self) -> int: ...


class AttemptRow(Stateful, Protocol):
    """An attempt as far as who holds it and for which task (``store.attempts.Attempt``)."""

    @property
    def device_id(self) -> str: ...
    @property
    def task_id(self) -> str: ...


class ClaimRow(AttemptRow, Protocol):
    """An attempt's claim as the "is it current?" rule reads it: generation, token hash and lease."""

    @property
    def claim_generation(self) -> int: ...
    @property
    def token_hash(self) -> bytes: ...
    @property
    def lease_expires_at(self) -> str: ...


class StoredClaim(ClaimRow, Protocol):
    """Everything a claim token is derived from (the token itself is never stored)."""

    @property
    def id(self) -> str: ...
    @property
    def authorization_id(self) -> str: ...
    @property
    def nonce(self) -> bytes: ...


class ResumableClaim(Protocol):
    """An attempt as claim-next's resume rule reads it."""

    @property
    def session_id(self) -> str: ...
    @property
    def lease_expires_at(self) -> str: ...
    @property
    def claimed_task_version(self) -> int: ...


class ReportingAttempt(Stateful, Protocol):
    """An attempt as the result rule reads it."""

    @property
    def close_reason(self) -> str | None: ...


class ResultSlot(Stateful, Protocol):
    """A submission as the result rule reads it."""

    @property
    def observation(self) -> str | None: ...


class AssetRow(Protocol):
    """An evidence asset (``store.evidence.Asset``)."""

    @property
    def attempt_id(self) -> str: ...
    @property
    def kind(self) -> str: ...
