"""The flow through the REAL uiautomator2 3.7.1 + adbutils 2.12.0 against the phone simulator's adb
server (cmbuyer.phonesim.testing.running_sim). The server side is the rule-enforcing fake
(tests/agent/fakes.py); the same path against the real server is in test_real_server.py."""

from __future__ import annotations

from pathlib import Path

from cmbuyer.agent.flow import PurchaseFlow
from cmbuyer.agent.journal import Journal
from cmbuyer.agent.phone.adapter import PhoneAdapter
from cmbuyer.agent.waits import FlowWaits
from cmbuyer.phonesim.testing import adbutils_leaks_ignored, running_sim
from tests.agent.packtools import shipped_packs

from .fakes import FakeServer, journal_claim, make_purchase

WAITS = FlowWaits(screen=5.0, observe=5.0)  # a real uiautomator2 round trip per dump: more than the model's 2 s


def test_happy_path_real_uiautomator2(tmp_path: Path) -> None:
    with adbutils_leaks_ignored(), running_sim() as sim:
        phone = PhoneAdapter.connect("sim-1")
        assert phone.app_version() is not None
        purchase = make_purchase()
        journal = Journal(tmp_path / "j.sqlite3")
        server = FakeServer(purchase, keys=journal)
        c = purchase.claim
        journal_claim(journal, c)
        flow = PurchaseFlow(phone=phone, pack=shipped_packs()[0], sink=server, journal=journal, waits=WAITS)
        result = flow.run(purchase)
        assert result.outcome == "SUBMITTED", server.fails
        sim.journal("sim-1").assert_single_submit_tap()
        sim.journal("sim-1").assert_no_payment_taps()
        assert [k for k, _ in server.evidence][:3] == ["SKU_PANEL_GATE_1", "QUANTITY_GATE_2", "CONFIRM_PAGE_GATE_3"]
        assert len(sim.phone("sim-1").orders) == 1
