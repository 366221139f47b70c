"""The shared "is this the current claim?" rule used by renew, events, evidence, fail and the fence
(spec 002: original device / attempt / generation / token must all match; the lease must be strictly
later than the server's now — equal means expired, no grace)."""

from __future__ import annotations

import sqlite3
from datetime import datetime

from cmbuyer.server.clock import to_wire
from cmbuyer.server.domain import claim_token
from cmbuyer.server.domain.errors import Conflict
from cmbuyer.server.store import attempts
from cmbuyer.server.store.attempts import Attempt


def claim_not_current() -> Conflict:
    """The fixed 409 of spec 002 for any claim mismatch (never says which part failed)."""
    return Conflict("claim is not current", code="claim_not_current")


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
    """Return the OPEN attempt held by ``device_id`` whose token matches, or raise ``claim_not_current``.

    ``generation``/``task_id`` are checked when given; ``require_lease`` demands
    ``lease_expires_at > now`` (strict). The token comparison is constant-time and always runs when the
    attempt exists, so timing does not reveal which field was wrong.
    """
    attempt = attempts.get(conn, attempt_id)
    if attempt is None:
        raise claim_not_current()
    token_ok = claim_token.matches(attempt.token_hash, token)
    ok = (
        token_ok
        and attempt.device_id == device_id
        and attempt.state == "OPEN"
        and (generation is None or attempt.claim_generation == generation)
        and (task_id is None or attempt.task_id == task_id)
        and (not require_lease or attempt.lease_expires_at > to_wire(now))
    )
    if not ok:
        raise claim_not_current()
    return attempt
