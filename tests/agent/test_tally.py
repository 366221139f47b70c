"""The per-task tap tally (tests/tally.py) can see a double tap.

Two tasks, each on its own goods, against the real server and the simulator through the real
uiautomator2/adbutils: one is bought, one stops before its fence (over its cap). The tally passes.
Then deliberate rogue submit taps are made on the simulated phone — through the simulator's own tap
path, the one ``input tap`` reaches, so they land in its journal with their goods id and create
orders: one on the task that never got a fence, one more on the bought task. The per-task tally
fails for each; the old "orders ≤ tasks" check stays blind to the first.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cmbuyer.agent.client import HttpDeviceApi
from cmbuyer.agent.journal import Journal
from cmbuyer.agent.phone.adapter import PhoneAdapter
from cmbuyer.agent.runner import Runner, RunnerConfig
from cmbuyer.phonesim.journal import order_counts
from cmbuyer.phonesim.phone import Phone
from cmbuyer.phonesim.testing import adbutils_leaks_ignored, running_sim
from tests.server.conftest import GOODS_URL
from tests.tally import fences, goods_per_task, tally

from .realserver import RealServer
from .test_flow_sim import _default

BASE_GOODS = "937122477375"
COLOR, SIZE = "黑色CHA(纯棉)", "M(建议100-115)"


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[RealServer]:
    with RealServer(tmp_path) as server:
        yield server


def _tap(phone: Phone, role: str, text: str | None = None) -> None:
    """Tap the centre of the one node with ``role`` (carrying ``text`` itself or below it)."""
    nodes = [
        n
        for root in phone.windows()
        for n in root.walk()
        if n.role == role and (text is None or any(m.text == text for m in n.walk()))
    ]
    assert len(nodes) == 1, (role, text, len(nodes))
    x, y = nodes[0].center
    phone.tap(x, y, "input_tap")


def rogue_submit(phone: Phone, goods_id: str) -> None:
    """What a buggy agent would do: open the goods, pick the SKU and tap 提交订单 — no fence."""
    with phone.lock:
        phone.app.open_url(GOODS_URL.format(goods_id=goods_id))
    _tap(phone, "buy", "单独购买")
    _tap(phone, "option", COLOR)
    _tap(phone, "option", SIZE)
    _tap(phone, "sku_confirm")
    _tap(phone, "submit")


def test_the_tally_fails_on_a_rogue_tap_that_orders_le_tasks_cannot_see(tmp_path: Path, srv: RealServer) -> None:
    scenario = _default()
    bought_goods, stopped_goods = goods_per_task(scenario, [BASE_GOODS, BASE_GOODS])
    bought = srv.add_task(goods_id=bought_goods, color=COLOR, size=SIZE, quantity=1, max_total_price="30.00")
    stopped = srv.add_task(goods_id=stopped_goods, color=COLOR, size=SIZE, quantity=1, max_total_price="5.00")
    goods_of = {bought.id: bought_goods, stopped.id: stopped_goods}
    with adbutils_leaks_ignored(), running_sim(scenario) as sim:
        creds = srv.add_device()
        journal = Journal(tmp_path / "agent" / "sim-1.sqlite3")
        api = HttpDeviceApi(srv.url, creds, journal, backoff=0.2)
        for _ in range(2):
            Runner(
                RunnerConfig("sim-1", poll_seconds=0.05, once=True),
                PhoneAdapter.connect("sim-1"),
                api,
                journal,
                lambda line: None,
            ).run()
        assert (srv.state(bought.id), srv.state(stopped.id)) == ("WAITING_PAYMENT", "FAILED")
        phone = sim.phone("sim-1")

        def check() -> list[str]:
            return tally(phone.journal.entries(), goods_of, fences(srv.settings.db_path, goods_of))  # type: ignore[union-attr]

        assert check() == []

        rogue_submit(phone, stopped_goods)  # a tap on a task that never reached its fence
        assert sum(order_counts(phone.journal.entries()).values()) <= 2  # the old tally: blind
        assert check() == [
            f"task {stopped.id}: 1 submit taps for 0 fenced submissions",
            f"task {stopped.id}: a submit tap outside a fence",
            f"task {stopped.id}: 1 orders for 0 fenced submissions",
        ]

        rogue_submit(phone, bought_goods)  # a second tap on the bought task's fence
        assert f"task {bought.id}: 2 submit taps for 1 fenced submissions" in check()
        assert f"task {bought.id}: 2 orders for 1 fenced submissions" in check()


def test_the_tally_refuses_tasks_that_share_a_goods_id() -> None:
    assert tally([], {"a": "1", "b": "1"}, {}) == [
        "tasks share a goods id: a double tap could hide behind another task"
    ]


def test_a_tap_before_its_fence_was_granted_is_outside_the_fence() -> None:
    tap = {"seq": 7, "kind": "tap", "role": "submit", "goods_id": "1", "ts": 99.0}
    assert tally([tap], {"a": "1"}, {"a": [100.0]}) == ["task a: a submit tap outside a fence"]
    assert tally([{**tap, "ts": 100.5}], {"a": "1"}, {"a": [100.0]}) == []
    assert tally([{**tap, "goods_id": "2"}], {"a": "1"}, {"a": [100.0]}) == ["submit tap #7 on goods 2 of no task"]
