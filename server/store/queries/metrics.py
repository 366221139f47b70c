"""The SQL behind ``GET /metrics`` (:mod:`cmbuyer.server.web.metrics`): totals read from the
rows themselves, so they survive restarts and agree with the pages. Attempts, submissions and assets are
never deleted, so their counts only grow (Prometheus counters); the rest are gauges.

Each figure is one statement; the largest are one pass over ``attempts`` and ``order_submissions``.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

FAIL_PREFIX = "device_fail:"  # authorizations.close_reason of a device's fail (services/fail_attempt.py)


@dataclass(frozen=True)
class DeviceRow:
    """One device as the metrics see it: name, state, reported state, last heartbeat (wire time), paused."""

    name: str
    state: str
    reported_state: str | None
    last_heartbeat_at: str | None
    paused: bool


@dataclass(frozen=True)
class Snapshot:
    """Totals and current counts at one moment (see the module docstring)."""

    claims: int = 0
    fences: int = 0
    results: dict[str, int] = field(default_factory=dict)  # observation → submissions that reported it
    failures: dict[str, int] = field(default_factory=dict)  # reason code → device fails before the fence
    tasks: dict[str, int] = field(default_factory=dict)  # task state → tasks now
    evidence_bytes: int = 0
    evidence_files: int = 0
    devices: list[DeviceRow] = field(default_factory=list)


def snapshot(conn: sqlite3.Connection) -> Snapshot:
    """Read every figure of the metrics page; ``sqlite3.Error`` propagates."""
    results = dict(
        conn.execute(
            "SELECT observation, COUNT(*) FROM order_submissions WHERE observation IS NOT NULL GROUP BY observation"
        ).fetchall()
    )
    failures = dict(
        conn.execute(
            "SELECT substr(close_reason, ?), COUNT(*) FROM authorizations WHERE close_reason LIKE ? GROUP BY 1",
            (len(FAIL_PREFIX) + 1, FAIL_PREFIX + "%"),
        ).fetchall()
    )
    evidence = conn.execute("SELECT COUNT(*), COALESCE(SUM(byte_size), 0) FROM evidence_assets").fetchone()
    return Snapshot(
        claims=conn.execute("SELECT COUNT(*) FROM attempts").fetchone()[0],
        fences=conn.execute("SELECT COUNT(*) FROM order_submissions").fetchone()[0],
        results=results,
        failures=failures,
        tasks=dict(conn.execute("SELECT state, COUNT(*) FROM tasks GROUP BY state").fetchall()),
        evidence_files=evidence[0],
        evidence_bytes=evidence[1],
        devices=[
            DeviceRow(r[0], r[1], r[2], r[3], r[4] is not None)
            for r in conn.execute(
                "SELECT name, state, reported_state, last_heartbeat_at, paused_at FROM devices ORDER BY name, id"
            )
        ],
    )
