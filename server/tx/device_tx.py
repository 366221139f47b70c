"""The opening of every device write transaction (docs/architecture.md "Safety rules" 5, docs/api.md "Device
authentication",
"Linearization with revocation").

1. :func:`begin` — the transaction's first business statement: a conditional UPDATE that takes
   SQLite's write position and proves the device is still ACTIVE there (rowcount 1). A revocation
   committed before this point makes it fail with :class:`DeviceNotActive` (→ empty 401) and the
   request writes nothing. Only after it may a job read or replay request records, answer EMPTY or a
   conflict, or write business facts.
2. :func:`replay_scoped` — the idempotency lookup of docs/api.md "Conventions": a key belongs to the device that first
   used it and remembers its endpoint; the same key used by another device, on another endpoint or with
   another payload is ``409 idempotency_conflict``. Nothing is stored for a refused request, which is why
   ``device_requests`` can key its rows by the request key alone (migration 0005).

:func:`open_write` (:func:`open_claim_write` for a request carrying a claim token) runs step 1 and returns a
:class:`DeviceWrite`, which names the request (device, key,
endpoint, comparison payload) once for the steps every idempotent device write repeats: the replay
lookup, the current-claim check, the audit row and the stored answer.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import CmbuyerError, DomainError, refusal
from cmbuyer.server.store import device_requests, devices
from cmbuyer.server.store.attempts import Attempt
from cmbuyer.server.store.devices import DeviceGate
from cmbuyer.server.tx import audit as audit_tx
from cmbuyer.server.tx import idempotency
from cmbuyer.server.tx.claim_check import current_claim
from cmbuyer.server.tx.common import Actor, canonical_json, payload_hash
from cmbuyer.server.tx.idempotency import Stored


class DeviceNotActive(CmbuyerError):
    """The device was revoked (or is unknown) at the write position: answer the empty 401."""


def begin(conn: sqlite3.Connection, device_id: str) -> DeviceGate:
    """Run the conditional "device still ACTIVE" UPDATE; returns the device's latest heartbeat facts.

    Raises :class:`DeviceNotActive` when the UPDATE matched no row.
    """
    gate = devices.confirm_active(conn, device_id)
    if gate is None:
        raise DeviceNotActive()
    return gate


def idempotency_conflict() -> DomainError:
    """The fixed 409 for a key reused with another payload, endpoint or device."""
    return refusal(Code.IDEMPOTENCY_CONFLICT).because("device_request")


def replay_scoped(conn: sqlite3.Connection, device_id: str, key: str, endpoint: str, payload: Any) -> Stored | None:
    """The stored outcome of ``(device, key)`` when it was the same request, None for a new key.

    Raises ``idempotency_conflict`` when the key is stored for another device, another endpoint or a
    payload with a different canonical hash. One indexed statement.
    """
    own: Stored | None = None
    for rec in device_requests.for_key(conn, key):
        if rec.device_id != device_id or rec.endpoint != endpoint or rec.request_hash != payload_hash(payload):
            raise idempotency_conflict()
        own = Stored(rec.status, rec.response_json, rec.attempt_id)
    return own


@dataclass(frozen=True)
class DeviceWrite:
    """One idempotent device write inside its transaction, after :func:`begin` (see :func:`open_write`).

    ``key`` is the request's idempotency key (``batch_key``, ``fence_key`` …), ``endpoint`` the endpoint
    name stored with it and ``payload`` the comparison form (docs/api.md "Conventions"); ``gate`` is what :func:`begin`
    returned (the device's latest heartbeat facts).
    """

    conn: sqlite3.Connection
    device_id: str
    key: str
    endpoint: str
    payload: Any
    gate: DeviceGate

    @property
    def actor(self) -> Actor:
        """The device as the actor of this request's audit rows and voided approvals."""
        return Actor("device", self.device_id)

    def replay(self) -> Stored | None:
        """:func:`replay_scoped` for this request: the stored answer of the same request, None for a new key;
        raises ``409 idempotency_conflict`` for a key reused otherwise."""
        return replay_scoped(self.conn, self.device_id, self.key, self.endpoint, self.payload)

    def claim(
        self,
        body: dict[str, Any],
        *,
        attempt_id: str,
        now: datetime,
        task_id: str | None = None,
        require_lease: bool,
    ) -> Attempt:
        """This device's current claim named by ``attempt_id`` and the body's ``claim_token`` and
        ``claim_generation`` (:func:`cmbuyer.server.tx.claim_check.current_claim`, docs/api.md); raises
        ``409 claim_not_current``."""
        return current_claim(
            self.conn,
            device_id=self.device_id,
            attempt_id=attempt_id,
            body=body,
            now=now,
            task_id=task_id,
            require_lease=require_lease,
        )

    def audit(self, attempt: Attempt, action: str, *, at: str, detail: dict[str, Any], subject: str = "task") -> None:
        """Append the request's audit row about the claim ``attempt``: actor this device, ``request_id`` the
        request's key, ``generation`` the claim's; the subject is the attempt's task, or with
        ``subject="attempt"`` the attempt itself."""
        audit_tx.record(
            self.conn,
            self.actor,
            action,
            subject,
            attempt.task_id if subject == "task" else attempt.id,
            at=at,
            request_id=self.key,
            generation=attempt.claim_generation,
            detail=detail,
        )

    def remember(self, body: Any | None, *, at: str, attempt_id: str | None = None, status: int = 200) -> Stored:
        """Store the answer ``body`` (None is a 204) under the request's key and return it as it will be
        sent, encoded with ``canonical_json`` (:func:`cmbuyer.server.tx.idempotency.remember`)."""
        return self.remember_text(
            None if body is None else canonical_json(body), at=at, attempt_id=attempt_id, status=status
        )

    def remember_text(self, text: str | None, *, at: str, attempt_id: str | None = None, status: int = 200) -> Stored:
        """:meth:`remember` for a body the caller has already encoded with ``canonical_json``."""
        return idempotency.remember(
            self.conn,
            self.device_id,
            self.key,
            self.endpoint,
            self.payload,
            status=status,
            text=text,
            at=at,
            attempt_id=attempt_id,
        )


def open_write(conn: sqlite3.Connection, device_id: str, *, key: str, endpoint: str, payload: Any) -> DeviceWrite:
    """:func:`begin` (the first statement of the transaction), then the request as a :class:`DeviceWrite`.

    Raises :class:`DeviceNotActive` (→ empty 401). The caller looks up the replay next (:meth:`DeviceWrite.replay`).
    """
    return DeviceWrite(conn, device_id, key, endpoint, payload, begin(conn, device_id))


def open_claim_write(
    conn: sqlite3.Connection, device_id: str, body: dict[str, Any], *, key: str, endpoint: str, **url_ids: str
) -> DeviceWrite:
    """:func:`open_write` for a request that carries a claim token: the comparison payload is
    :func:`cmbuyer.server.tx.idempotency.claim_request_form` of ``body`` and the URL's ``url_ids`` (never the
    plain token; docs/api.md "Conventions"). Raises :class:`DeviceNotActive` (→ empty 401)."""
    return open_write(
        conn, device_id, key=key, endpoint=endpoint, payload=idempotency.claim_request_form(body, **url_ids)
    )
