"""``POST /api/v1/tasks/{id}/lease/renew`` as one write-transaction job (docs/api.md).

Order: conditional "device still ACTIVE" UPDATE → idempotency lookup of ``renew_request_id`` (same
request → the stored answer, no second CAS) → the claim must be current: the OPEN attempt of the URL's
task held by this device, session, generation and token (constant-time compare), lease and
authorization both strictly later than now (equal = expired, nothing revived), task/authorization
consistent → ``expected_lease_expires_at`` must equal the stored lease text exactly → CAS to
``min(now + lease_ttl, authorization.expires_at)`` + request record + audit row. Every refusal is the
same ``409 claim_not_current``; renewing never changes the token, the generation, the task version or
any business state.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

from cmbuyer.server.clock import to_wire
from cmbuyer.server.domain import lease
from cmbuyer.server.domain.claims import ClaimPolicy, claim_not_current, renewable
from cmbuyer.server.store import attempts as attempt_store
from cmbuyer.server.tx import device_tx
from cmbuyer.server.tx.claim_check import claim_rows
from cmbuyer.server.tx.idempotency import Stored

ENDPOINT = "lease-renew"


def renew_lease(
    conn: sqlite3.Connection, *, device_id: str, task_id: str, body: dict[str, Any], now: datetime, policy: ClaimPolicy
) -> Stored:
    """Renew the lease of the device's current claim; returns the 200 response to send.

    ``body`` is a schema-valid renew request. Raises :class:`device_tx.DeviceNotActive` (→ 401) or
    Conflict ``idempotency_conflict`` / ``claim_not_current`` (→ 409).
    """
    req = device_tx.open_claim_write(
        conn, device_id, body, key=body["renew_request_id"], endpoint=ENDPOINT, task_id=task_id
    )
    stored = req.replay()
    if stored is not None:
        return stored
    attempt = req.claim(body, attempt_id=body["attempt_id"], now=now, task_id=task_id, require_lease=True)
    if attempt.session_id != body["session_id"] or attempt.lease_expires_at != body["expected_lease_expires_at"]:
        raise claim_not_current()
    task, authorization = claim_rows(conn, attempt)
    if not renewable(task, authorization, attempt.claimed_task_version, now):
        raise claim_not_current()
    at = to_wire(now)
    new_end = to_wire(lease.new_expiry(now, policy.lease_ttl, authorization.expires_at))
    if not attempt_store.set_lease(conn, attempt.id, expected=attempt.lease_expires_at, new=new_end):
        raise claim_not_current()
    response = {
        "task_id": attempt.task_id,
        "attempt_id": attempt.id,
        "claim_generation": attempt.claim_generation,
        "lease_expires_at": new_end,
        "server_now": at,
    }
    result = req.remember(response, at=at, attempt_id=attempt.id)
    req.audit(
        attempt,
        "attempt.lease_renew",
        at=at,
        detail={
            "attempt_id": attempt.id,
            "previous_lease_expires_at": attempt.lease_expires_at,
            "lease_expires_at": new_end,
        },
    )
    return result
