"""Taking one phone out of rotation (pause) and slowing a phone down (pacing). Pure: the
device row's columns and the time come in as arguments.

Why pacing exists: Pinduoduo's risk control on a shopping account rises with rapid orders, so a team may
space one phone's claims out (``min_claim_interval_seconds``) and cap how many it makes per calendar day
(``max_claims_per_day``). Both are off (None) by default. A day is the Beijing calendar day (UTC+8, no
daylight saving), the day the purchasing team and the admin pages count in.

What a device gets (docs/api.md "POST /api/v1/tasks/claim-next", "Pause and pacing"): a paused or paced
device gets ``204`` (no new work) from claim-next; its open claim, if any, still resumes and runs to its end.
The heartbeat answer says ``"paused": true`` or ``"paced_until": <UTC time>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Protocol

from cmbuyer.schemas import parse_utc_time

#: The purchasing team's calendar: days for ``max_claims_per_day`` start at midnight Beijing time.
BEIJING = timezone(timedelta(hours=8), "UTC+8")
MIN_INTERVAL_RANGE = (1, 86400)  # seconds; the migration's CHECK says the same
MAX_PER_DAY_RANGE = (1, 10000)


class PacingRow(Protocol):
    """The device columns the rules read (``store.devices.DeviceGate`` / ``Device``)."""

    @property
    def paused_at(self) -> str | None: ...
    @property
    def min_claim_interval_seconds(self) -> int | None: ...
    @property
    def max_claims_per_day(self) -> int | None: ...
    @property
    def last_claim_at(self) -> str | None: ...
    @property
    def claims_day(self) -> str | None: ...
    @property
    def claims_on_day(self) -> int: ...


def day_of(when: datetime) -> str:
    """The Beijing calendar day of ``when`` as ``YYYY-MM-DD`` (what ``devices.claims_day`` stores)."""
    return when.astimezone(BEIJING).strftime("%Y-%m-%d")


def day_start(when: datetime) -> datetime:
    """Midnight Beijing time of the day of ``when`` (aware)."""
    local = when.astimezone(BEIJING)
    return local.replace(hour=0, minute=0, second=0, microsecond=0)


def claims_today(row: PacingRow, now: datetime) -> int:
    """How many new claims the device made on the Beijing day of ``now`` (0 when its counter is of another day)."""
    return row.claims_on_day if row.claims_day == day_of(now) else 0


def paced_until(row: PacingRow, now: datetime) -> datetime | None:
    """The time before which the device may not claim again, or None when pacing lets it claim now.

    The later of: the last claim + the minimum interval, and — when today's cap is reached — the next
    Beijing midnight. A value equal to ``now`` is not in the future: the device may claim (the same
    "equal means over" rule as leases).
    """
    until: datetime | None = None
    if row.min_claim_interval_seconds is not None and row.last_claim_at is not None:
        until = parse_utc_time(row.last_claim_at) + timedelta(seconds=row.min_claim_interval_seconds)
    if row.max_claims_per_day is not None and claims_today(row, now) >= row.max_claims_per_day:
        midnight = day_start(now) + timedelta(days=1)
        until = midnight if until is None else max(until, midnight)
    return until if until is not None and until > now else None


@dataclass(frozen=True)
class NoWork:
    """Why claim-next answers 204 although the device could otherwise claim: ``paused`` or ``paced_until``."""

    paused: bool
    paced_until: datetime | None

    def __bool__(self) -> bool:
        return self.paused or self.paced_until is not None


def no_new_work(row: PacingRow, now: datetime) -> NoWork:
    """Whether claim-next may hand the device a new task at ``now``: falsy when it may."""
    return NoWork(row.paused_at is not None, paced_until(row, now))


def check_pacing(min_interval: int | None, max_per_day: int | None) -> None:
    """Validate per-device pacing settings (None = off). Raises ValueError naming the bad one (English; the
    services translate it)."""
    for name, value, (low, high) in (
        ("min_claim_interval_seconds", min_interval, MIN_INTERVAL_RANGE),
        ("max_claims_per_day", max_per_day, MAX_PER_DAY_RANGE),
    ):
        if value is not None and (type(value) is not int or not low <= value <= high):
            raise ValueError(f"{name} must be an integer {low}–{high}, or off")
