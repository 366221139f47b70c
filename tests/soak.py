"""Soak loops: their iteration count and their time limit.

A soak test takes its loop count from ``CMBUYER_SOAK_ITERATIONS`` (``make soak`` sets 200) and a
small default otherwise, and carries ``@pytest.mark.slow(seconds_per_iteration=S)``. The suite's
per-test timeout (``timeout`` in pyproject.toml, 300 s) is a bound for one small run; for a slow test
tests/conftest.py raises it to ``base + S × CMBUYER_SOAK_ITERATIONS`` (:func:`timeout_for`), so
``make soak`` fails on a finding or a hang, never because 200 rounds simply take longer than 300 s.
``S`` is a generous per-round upper bound measured on the 2-core VM under load, not an average.
"""

from __future__ import annotations

import os

ENV = "CMBUYER_SOAK_ITERATIONS"
DEFAULT_SECONDS_PER_ITERATION = 10.0


def configured() -> int | None:
    """The positive integer in ``CMBUYER_SOAK_ITERATIONS``, or None when unset/blank/invalid."""
    raw = os.environ.get(ENV, "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def soak_iterations(default: int) -> int:
    """Iteration count for a soak loop: ``CMBUYER_SOAK_ITERATIONS`` (``make soak``) or ``default``."""
    return configured() or default


def soak_scale(default: int, soak: int) -> int:
    """``default`` normally; ``soak`` (or the configured count, if larger) when a count above 1 is
    configured, as by ``make soak`` (for loops whose small default is too small for a soak run)."""
    n = configured()
    return default if n is None or n <= 1 else max(soak, n)


def timeout_for(base: float, seconds_per_iteration: float) -> float:
    """Time limit in seconds of a slow test: ``base`` plus its per-iteration allowance times the
    configured count (``base`` alone when no count is configured: the small default run)."""
    return base + seconds_per_iteration * (configured() or 0)
