"""Supervised first orders: the server suites here run with ``CMBUYER_SUPERVISED_ORDERS=3`` (the
default) unless a test parametrizes ``supervised_orders``."""

from __future__ import annotations

import pytest


@pytest.fixture
def supervised_orders() -> str:
    """Supervision on, with the shipped default of 3 confirmed orders per device–pack pair."""
    return "3"
