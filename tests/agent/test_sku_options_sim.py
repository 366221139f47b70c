"""Any goods, end to end: the real server, the real agent runner over uiautomator2/adbutils, and
the phone simulator, one phone working through the tasks back to back. Tasks name their options by the
dimension headers the goods page shows:

- tissues (``规格`` + ``数量``) and mixed nuts (three groups, named in another order than the page's) are
  ordered, and the server keeps the options read on the screen that holds the submit control;
- a task written ``颜色`` buys goods whose page says ``颜色分类`` (the pack's alias table);
- a task that leaves out one group the page shows stops before any option tap, and the stop names that
  group and how to write the task.

The server's per-dimension fence re-check is covered in tests/server/submissions/test_fence_sku_options.py
and, through the agent's own client, in tests/agent/test_real_server.py.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from cmbuyer.agent.phone.adapter import PhoneAdapter
from cmbuyer.agent.waits import FlowWaits
from cmbuyer.phonesim.testing import adbutils_leaks_ignored, running_sim

from .realserver import RealServer
from .test_flow_sim import _default
from .test_real_server import Agent, fast_phone  # noqa: F401  (fixture)


def _scenario() -> dict[str, Any]:
    """The default catalogue, the T-shirt's colour header spelled 颜色分类 as many shops do."""
    data = copy.deepcopy(_default())
    shirt = data["catalogue"][0]
    assert shirt["dimensions"][0]["name"] == "颜色"
    shirt["dimensions"][0]["name"] = "颜色分类"
    return data


def test_any_goods_by_dimension_name(tmp_path: Path, fast_phone: FlowWaits) -> None:  # noqa: F811
    tissues = [["规格", "4层120抽"], ["数量", "12包"]]
    nuts = [["包装", "礼盒装"], ["口味", "盐焗"], ["规格", "25g×7袋"]]  # the page shows 口味, 规格, 包装
    cases: list[tuple[dict[str, Any], str, list[list[str]] | None]] = [
        (dict(goods_id="300000000042", options=tissues, quantity=1, max_total_price="30.00"), "23.60", tissues),
        (dict(goods_id="300000000043", options=nuts, quantity=1, max_total_price="30.00"), "26.90", nuts),
        # written the spec-002 way (颜色/尺码); the page says 颜色分类
        (dict(color="白色CHA(纯棉)", size="L(建议115-130)", quantity=1), "12.88", None),
    ]
    with RealServer(tmp_path) as srv, adbutils_leaks_ignored(), running_sim(_scenario()) as sim:
        creds = srv.add_device()
        agent = Agent(tmp_path, srv, creds, PhoneAdapter.connect("sim-1"), waits=fast_phone)
        journal = sim.journal("sim-1")
        for fields, total, options in cases:
            task = srv.add_task(**fields)
            assert agent.run_once() == 0
            detail = srv.detail(task.id)
            assert detail["task"]["state"] == "WAITING_PAYMENT", (detail["task"]["state_reason"], detail["events"])
            sub = detail["submission"]
            read = json.loads(sub["selected_options"])
            # named by the task's dimensions, in the task's order, with the values the submit screen showed
            assert read == (options or [["颜色", "白色CHA(纯棉)"], ["尺码", "L(建议115-130)"]])
            assert str(sub["confirm_page_amount"]) == total
        orders = sim.phone("sim-1").orders
        assert [o["goods_id"] for o in orders] == ["300000000042", "300000000043", "937122477375"]
        assert orders[1]["options"] == {"口味": "盐焗", "规格": "25g×7袋", "包装": "礼盒装"}
        assert orders[2]["options"] == {"颜色分类": "白色CHA(纯棉)", "尺码": "L(建议115-130)"}
        journal.assert_no_payment_taps()
        assert len(journal.taps("submit")) == 3

        # 数量 left out: the sheet is opened (to see its groups), then the stop — no option, no stepper
        taps_before = len(journal.taps())
        task = srv.add_task(goods_id="300000000042", options=[["规格", "3层100抽"]], quantity=1)
        assert agent.run_once() == 0
        detail = srv.detail(task.id)
        assert (detail["task"]["state"], detail["task"]["state_reason"]) == ("FAILED", "SKU_DIMENSION_UNNAMED")
        roles = [t["role"] for t in journal.taps()[taps_before:]]
        assert "option" not in roles and "qty_inc" not in roles and "submit" not in roles, roles
        said = json.dumps(detail["audit"], ensure_ascii=False)  # the fail report's summary, as a person reads it
        assert "“数量”任务未指定" in said and "数量=" in said, said
        assert len(sim.phone("sim-1").orders) == 3


def test_repeat_orders_each_get_their_own_order_number(tmp_path: Path, fast_phone: FlowWaits) -> None:  # noqa: F811
    """Five identical orders and one of another colour (same goods, same price, so the same amount and
    title on the order list), back to back on one phone: each task ends with its own order number — the
    read-only confirmation leaves out the numbers earlier attempts on this phone already took — checked
    against the simulator's own order list."""
    same = dict(color="白色CHA(纯棉)", size="L(建议115-130)", quantity=1)
    other = dict(color="黑色CHA(纯棉)", size="M(建议100-115)", quantity=1)
    with RealServer(tmp_path) as srv, adbutils_leaks_ignored(), running_sim(copy.deepcopy(_default())) as sim:
        creds = srv.add_device()
        agent = Agent(tmp_path, srv, creds, PhoneAdapter.connect("sim-1"), waits=fast_phone)
        numbers = []
        for fields in [same] * 5 + [other]:
            task = srv.add_task(**fields)
            assert agent.run_once() == 0
            detail = srv.detail(task.id)
            assert detail["task"]["state"] == "WAITING_PAYMENT", detail["task"]
            numbers.append(detail["submission"]["order_sn"])
        orders = sim.phone("sim-1").orders
    # the simulator's list, in the order the orders were created: task i made order i
    assert numbers == [o["order_sn"] for o in orders] and len(set(numbers)) == 6
    assert [o["options"]["颜色"] for o in orders] == ["白色CHA(纯棉)"] * 5 + ["黑色CHA(纯棉)"]
    assert len({str(o["total"]) for o in orders}) == 1  # one amount for all six: the amount alone is no key
