"""Load the attempt a device request names and prove it is the current claim — the step renew, events,
fail, the approval request and the fence share (:func:`current_claim`; the fence and the approval request
add the authorization and "not fenced yet" checks of :func:`unfenced_claim`). The rule itself is
:func:`cmbuyer.server.domain.claims.claim_is_current` (docs/api.md "POST /api/v1/tasks/{task_id}/lease/renew": original
device / attempt / generation / token must all match; the lease must be strictly later than the server's now — equal
means expired, no grace). :func:`claim_rows` loads the task and authorization behind the claim."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

from cmbuyer.server.domain.claims import claim_is_current, claim_not_current
from cmbuyer.server.domain.fence import submission_fenced
from cmbuyer.server.store import attempts, authorizations, submissions, tasks
from cmbuyer.server.store.attempts import Attempt
from cmbuyer.server.store.authorizations import Authorization
from cmbuyer.server.store.tasks import Task

__all__ = ["check_unfenced", "claim_rows", "current_claim", "unfenced_claim"]


def current_claim(
    conn: sqlite3.Connection,
    *,
    device_id: str,
    attempt_id: str,
    body: dict[str, Any],
    now: datetime,
    task_id: str | None = None,
    require_lease: bool = True,
) -> Attempt:
    """Return the OPEN attempt ``attempt_id`` held by ``device_id`` whose token and generation are the
    request ``body``'s ``claim_token`` and ``claim_generation``, or raise ``409 claim_not_current`` (also
    for an unknown attempt id).

    ``task_id`` is checked when given; ``require_lease`` demands ``lease_expires_at > now`` (strict). The
    token comparison is constant-time and always runs when the attempt exists, so timing does not reveal
    which field was wrong.
    """
    attempt = attempts.get(conn, attempt_id)
    if attempt is None or not claim_is_current(
        attempt,
        device_id=device_id,
        token=body["claim_token"],
        now=now,
        generation=body["claim_generation"],
        task_id=task_id,
        require_lease=require_lease,
    ):
        raise claim_not_current()
    return attempt


def claim_rows(conn: sqlite3.Connection, attempt: Attempt) -> tuple[Task, Authorization]:
    """The task and the authorization of a current claim's ``attempt``, as they are now; either missing is
    ``409 claim_not_current`` (the same answer as every other claim mismatch, docs/api.md). Whether they are
    still where the claim left them is each caller's rule (:mod:`cmbuyer.server.domain.claims`)."""
    task = tasks.get(conn, attempt.task_id)
    authorization = authorizations.get(conn, attempt.authorization_id)
    if task is None or authorization is None:
        raise claim_not_current()
    return task, authorization


def check_unfenced(conn: sqlite3.Connection, attempt: Attempt) -> None:
    """No submission exists yet for ``attempt`` or its authorization: after the fence only the result
    may speak (docs/api.md). Raises ``409 submission_fenced``."""
    if submissions.for_attempt_or_authorization(conn, attempt.id, attempt.authorization_id) is not None:
        raise submission_fenced()


def unfenced_claim(
    conn: sqlite3.Connection, *, device_id: str, attempt_id: str, body: dict[str, Any], now: datetime
) -> Attempt:
    """The claim check of the fence and of the approval request (docs/api.md "submission-fence",
    "Supervised first orders"): ``attempt_id`` is this device's OPEN attempt of the body's ``task_id`` with
    its ``claim_generation`` and ``claim_token``, leased strictly later than ``now``, and the body's
    ``authorization_id`` is the attempt's (else ``409 claim_not_current``); then :func:`check_unfenced`
    (``409 submission_fenced``)."""
    attempt = current_claim(
        conn, device_id=device_id, attempt_id=attempt_id, body=body, now=now, task_id=body["task_id"]
    )
    if body["authorization_id"] != attempt.authorization_id:
        raise claim_not_current()
    check_unfenced(conn, attempt)
    return attempt
