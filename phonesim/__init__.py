"""cmbuyer.phonesim — a simulated Pinduoduo phone behind a real adb protocol.

Tests and the demo drive it through the real uiautomator2 and adbutils code. Main entry
points: :class:`PhoneSim` (in-process), :class:`SimProcess` (subprocess),
:func:`cmbuyer.phonesim.testing.running_sim`, the ``cmbuyer-phonesim`` CLI. See docs/phonesim.md.
"""

from .journal import (
    assert_no_payment_taps,
    assert_order_counts,
    assert_single_submit_tap,
    order_counts,
    read_journal,
)
from .phone import Phone
from .process import SimProcess
from .scenario import Scenario, ScenarioError, load_scenario
from .server import PhoneSim

__all__ = [
    "Phone",
    "PhoneSim",
    "Scenario",
    "ScenarioError",
    "SimProcess",
    "assert_no_payment_taps",
    "assert_order_counts",
    "assert_single_submit_tap",
    "load_scenario",
    "order_counts",
    "read_journal",
]
