"""Load the attempt a device request names and prove it is the current claim — the step renew, events,
fail, the approval request and the fence share. The rule itself is
:func:`cmbuyer.server.domain.claims.claim_is_current` (docs/api.md "POST /api/v1/tasks/{task_id}/lease/renew": original
device / attempt / generation / token must all match; the lease must be strictly later than the server's now — equal
means expired, no grace)."""

from __future__ import annotations

import sqlite3
from datetime import datetime

from cmbuyer.server.domain.claims import claim_is_current, claim_not_current
from cmbuyer.server.store import attempts
from cmbuyer.server.store.attempts import Attempt

__all__ = ["current_claim"]


def current_claim(
    conn: sqlite3.Connection,
    *,
    device_id: str,
    attempt_id: str,
    token: str,
    now: datetime,
    generation: int | None = None,
    task_id: str | None = None,
    require_lease: bool = True,
) -> Attempt:
    """Return the OPEN attempt ``attempt_id`` held by ``device_id`` whose token matches, or raise
    ``409 claim_not_current`` (also for an unknown attempt id).

    ``generation``/``task_id`` are checked when given; ``require_lease`` demands
    ``lease_expires_at > now`` (strict). The token comparison is constant-time and always runs when the
    attempt exists, so timing does not reveal which field was wrong.
    """
    attempt = attempts.get(conn, attempt_id)
    if attempt is None or not claim_is_current(
        attempt,
        device_id=device_id,
        token=token,
        now=now,
        generation=generation,
        task_id=task_id,
        require_lease=require_lease,
    ):
        raise claim_not_current()
    return attempt
