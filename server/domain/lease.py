"""Lease and freshness arithmetic (docs/api.md "POST /api/v1/tasks/{task_id}/lease/renew"). Pure functions, no I/O.

Rules:

- Every boundary is exclusive: a lease, an authorization or a heartbeat window that ends exactly at
  ``now`` is over. There is no grace period and nothing is ever revived.
- A new lease (at claim time or on renew) ends at ``min(now + lease_ttl, authorization.expires_at)``:
  a lease never outlives the authorization that backs it.
- Times are compared as aware UTC datetimes parsed from the canonical wire text.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from cmbuyer.schemas import parse_utc_time


def is_live(expires_at: str, now: datetime) -> bool:
    """True when ``expires_at`` (wire text) is strictly later than ``now``; equal means expired."""
    return parse_utc_time(expires_at) > now


def new_expiry(now: datetime, lease_ttl_seconds: int, authorization_expires_at: str) -> datetime:
    """``min(now + lease_ttl, authorization expiry)`` — the lease end given at claim and on renew."""
    if lease_ttl_seconds <= 0:
        raise ValueError("lease TTL must be positive")
    return min(now + timedelta(seconds=lease_ttl_seconds), parse_utc_time(authorization_expires_at))


def heartbeat_fresh(last_heartbeat_at: str | None, now: datetime, interval_seconds: int, stale_factor: int) -> bool:
    """True when the latest heartbeat is younger than ``interval × factor`` (exclusive; missing → False)."""
    if last_heartbeat_at is None:
        return False
    return now < parse_utc_time(last_heartbeat_at) + timedelta(seconds=interval_seconds * stale_factor)
