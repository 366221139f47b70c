"""Supervised first orders: the server suites here run with ``CMBUYER_SUPERVISED_ORDERS=3`` (the
default) unless a test parametrizes ``supervised_orders``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.server.conftest import DeviceMaker, Maker
from tests.server.submissions.helpers import Claim, claim_http


@pytest.fixture
def supervised_orders() -> str:
    """Supervision on, with the shipped default of 3 confirmed orders per device–pack pair."""
    return "3"


@pytest.fixture
async def other_claimed(server_client: Any, claimed: Claim, make_device: DeviceMaker, make_task: Maker) -> Claim:
    """Another device ("phone-2") with its own claim of another started task, made after :func:`claimed`."""
    make_task(start=True, goods_id="555")
    return await claim_http(server_client, make_device("phone-2"))
