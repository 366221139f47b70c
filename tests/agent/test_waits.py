"""The flow's deadlines (agent/waits.py): production's values, refused values, and the value a caller
passes is the one the flow waits for (no module constant bound at import stands in for it)."""

from __future__ import annotations

import math
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from cmbuyer.agent.flow import PurchaseFlow
from cmbuyer.agent.journal import Journal
from cmbuyer.agent.phone.adapter import Deadlines, PhoneAdapter
from cmbuyer.agent.waits import FlowWaits
from tests.agent.packtools import shipped_packs

from .fakes import FakeServer, journal_claim, make_purchase
from .simphone import SimPhone

# a wait's length is measured in wall time: alone (pytest -m serial)
pytestmark = pytest.mark.serial


def test_production_waits_are_the_documented_seconds() -> None:
    # the values of the module constants they replace (capabilities, submit, confirm): no behaviour change
    assert asdict(FlowWaits()) == {
        "screen": 8.0,
        "tap_effect": 2.0,
        "observe": 10.0,
        "confirm": 30.0,
        "order_list": 8.0,
    }


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan, True, "8"])
@pytest.mark.parametrize("name", ["screen", "tap_effect", "observe", "confirm", "order_list"])
def test_a_wait_that_is_not_positive_finite_seconds_is_refused(name: str, bad: object) -> None:
    with pytest.raises(ValueError, match=f"FlowWaits.{name} must be a finite number of seconds > 0"):
        FlowWaits(**{name: bad})  # type: ignore[arg-type]


def test_the_screen_wait_passed_in_is_the_one_the_flow_gives_up_after(tmp_path: Path) -> None:
    """An unknown goods id never shows a product page: the flow stops SCREEN_UNRECOGNIZED after the screen
    wait it was given (0.5 s), far sooner than production's 8 s — the value reaches the wait."""
    purchase = make_purchase(goods_id="999999999999")
    journal = Journal(tmp_path / "j.sqlite3")
    server = FakeServer(purchase, keys=journal)
    journal_claim(journal, purchase.claim)
    sim = SimPhone()
    phone = PhoneAdapter("sim-1", sim, sim, Deadlines(dump=5, shell=5, screenshot=5, tap=5))
    flow = PurchaseFlow(phone=phone, pack=shipped_packs()[0], sink=server, journal=journal, waits=FlowWaits(screen=0.5))
    started = time.monotonic()
    result = flow.run(purchase)
    elapsed = time.monotonic() - started
    assert (result.outcome, result.reason_code) == ("FAILED", "SCREEN_UNRECOGNIZED")
    assert 0.5 <= elapsed < FlowWaits().screen, elapsed
