"""The injectable UTC clock every time decision goes through (a virtual clock: tests move time by hand).

Times are aware ``datetime`` in UTC. On the wire and in SQLite they are the canonical string
``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (always six fraction digits, so string order is time order and the
lease renew CAS (docs/api.md "POST /api/v1/tasks/{task_id}/lease/renew") can compare the exact text).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol

from cmbuyer.schemas import parse_utc_time


class Clock(Protocol):
    """Anything with ``now() -> aware UTC datetime``."""

    def now(self) -> datetime: ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        """Current time, aware UTC."""
        return datetime.now(UTC)


class ManualClock:
    """A clock tests move by hand, to hit boundaries such as ``now == expires_at`` exactly."""

    def __init__(self, start: datetime | str = "2026-08-04T09:00:00.000000Z") -> None:
        self._now = parse_utc_time(start) if isinstance(start, str) else start.astimezone(UTC)

    def now(self) -> datetime:
        """The current manual time."""
        return self._now

    def set(self, when: datetime | str) -> None:
        """Jump to ``when`` (datetime or wire string)."""
        self._now = parse_utc_time(when) if isinstance(when, str) else when.astimezone(UTC)

    def advance(self, seconds: float) -> None:
        """Move forward by ``seconds``."""
        self._now += timedelta(seconds=seconds)


def to_wire(when: datetime) -> str:
    """Canonical storage/wire text of an aware datetime: ``2026-08-04T09:05:00.000000Z``."""
    # isoformat with fixed microseconds always ends in "+00:00" for UTC; it is C code, ~2× strftime.
    if when.tzinfo is not UTC:
        when = when.astimezone(UTC)
    return when.isoformat(timespec="microseconds")[:-6] + "Z"


def from_wire(text: str) -> datetime:
    """Inverse of :func:`to_wire`; accepts any canonical wire form. Raises ``ValueError``."""
    return parse_utc_time(text)
