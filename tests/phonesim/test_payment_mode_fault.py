"""The ``payment_mode_change`` fault (docs/phonesim.md): a run-time switch of the order sheet's payment row,
used by the agent's supervised-wait tests (tests/agent/test_approval.py) to change the screen while the
phone waits for a person."""

from __future__ import annotations

import pytest

from cmbuyer.phonesim.faults import validate_fault
from cmbuyer.phonesim.order_sheet import payment_rows, submit_prefix
from cmbuyer.phonesim.server import PhoneSim


def test_payment_mode_change_switches_the_row_from_when_it_fires() -> None:
    sim = PhoneSim("order_sheet")
    phone = sim.phone("sim-1")
    assert payment_rows(phone.app)[0][1] == "微信支付" and submit_prefix(phone.app) == "提交订单"
    phone.inject("payment_mode_change", mode="pay_later", when={"after_dumps": 1})
    assert payment_rows(phone.app)[0][1] == "微信支付"
    phone.dump()  # the first dump is served with the old row and arms the switch for the next one
    phone.dump()
    assert payment_rows(phone.app)[0][1] == "先用后付" and submit_prefix(phone.app) == "0元下单"
    assert [e["fault"] for e in phone.journal.entries("fault")] == ["payment_mode_change"]


def test_payment_mode_change_needs_a_known_mode() -> None:
    with pytest.raises(ValueError, match=r"payment_mode_change\.mode"):
        validate_fault({"kind": "payment_mode_change", "mode": "cash"})
    with pytest.raises(ValueError, match="missing"):
        validate_fault({"kind": "payment_mode_change"})
