"""The opening of every device write transaction (design §2.5, docs/api.md "Device authentication",
"Linearization with revocation").

1. :func:`begin` — the transaction's first business statement: a conditional UPDATE that takes
   SQLite's write position and proves the device is still ACTIVE there (rowcount 1). A revocation
   committed before this point makes it fail with :class:`DeviceNotActive` (→ empty 401) and the
   request writes nothing. Only after it may a job read or replay request records, answer EMPTY or a
   conflict, or write business facts.
2. :func:`replay_scoped` — the idempotency lookup of design §4: a key belongs to the device that first
   used it and remembers its endpoint; the same key used by another device, on another endpoint or with
   another payload is ``409 idempotency_conflict``. Nothing is stored for a refused request, which is why
   ``device_requests`` can key its rows by the request key alone (migration 0005).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import CmbuyerError, Conflict
from cmbuyer.server.store import device_requests, devices
from cmbuyer.server.store.devices import DeviceGate
from cmbuyer.server.tx.common import payload_hash
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


def idempotency_conflict() -> Conflict:
    """The fixed 409 for a key reused with another payload, endpoint or device."""
    return Conflict("idempotency key reused with a different request", code=Code.IDEMPOTENCY_CONFLICT)


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
