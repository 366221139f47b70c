"""Times as people read them: canonical UTC wire text shown in Beijing time (UTC+8, no DST), on the admin
pages, in exports and on the command line. Pure: no I/O."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

BEIJING = timezone(timedelta(hours=8), "UTC+8")
_UTC_TEXT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?Z", re.ASCII)


def beijing_time(value: str | None) -> str:
    """Canonical UTC text → ``YYYY-MM-DD HH:MM:SS`` in Beijing time (UTC+8, no DST); "" for None."""
    if not value:
        return ""
    try:
        when = datetime.strptime(value[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return value
    return when.astimezone(BEIJING).strftime("%Y-%m-%d %H:%M:%S")


def audit_value(value: object) -> str:
    """One audit-detail value for people: canonical UTC times in Beijing time, None as "-"."""
    if value is None:
        return "-"
    if isinstance(value, str) and _UTC_TEXT.fullmatch(value):
        return beijing_time(value)
    return str(value)
