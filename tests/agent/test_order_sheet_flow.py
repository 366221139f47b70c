"""The purchase flow on the order-sheet layout through the REAL uiautomator2 3.7.1 +
adbutils 2.12.0 against the phone simulator (scenario ``order_sheet``, app 8.22.0 / 82200, its pack
agent/packs/pdd-8.22.0-82200.json). The server side is the rule-enforcing fake (tests/agent/fakes.py,
which re-checks the fence body like the server); one simulator serves every test, each test on its
own phone serial so that state never leaks between tests.

After the tap the simulator shows the pending-payment order page here (outcome ORDER_CREATED); the
cashier hand-off after the tap is tested with the post-tap work (tests/agent/test_after_tap_sim.py).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.agent import capabilities as cap
from cmbuyer.agent.errors import FlowStop
from cmbuyer.agent.flow import FlowResult, PurchaseFlow
from cmbuyer.agent.journal import Journal
from cmbuyer.agent.model import SubmissionProof
from cmbuyer.agent.phone.adapter import PhoneAdapter
from cmbuyer.agent.screens.packmodel import Pack
from cmbuyer.agent.waits import FlowWaits
from cmbuyer.phonesim import PhoneSim
from cmbuyer.phonesim.journal import swipes
from cmbuyer.phonesim.scenario import load_scenario
from cmbuyer.phonesim.testing import adbutils_leaks_ignored, running_sim
from cmbuyer.schemas.sku import legacy_options
from tests.agent.packtools import shipped_packs

from .fakes import FakeServer, journal_claim, make_purchase

SWITCH_PHONES = (
    "sim-balance",
    "sim-paylater",
    "sim-nopw",
    "sim-unreadable",
    "sim-tworows",
    "sim-paynow",
    "sim-confirmpay",
    "sim-old",
    "sim-update",
)
PLAIN = tuple(f"os-{i}" for i in range(24))
_serials = itertools.count()


def _pack() -> Pack:
    return next(p for p in shipped_packs() if p.version_name == "8.22.0")


@pytest.fixture(scope="module")
def sim() -> Iterator[PhoneSim]:
    data = load_scenario("order_sheet").data
    data["outcome"] = "ORDER_CREATED"  # the pending-payment order page after the tap
    for serial in SWITCH_PHONES:
        data["phones"][serial].pop("outcome", None)
    with adbutils_leaks_ignored(), running_sim(data, serials=PLAIN + SWITCH_PHONES) as running:
        yield running


WAITS = FlowWaits(screen=5.0, observe=5.0)  # real uiautomator2 against the simulator: shorter than production's


class RecordingServer(FakeServer):
    """The rule-enforcing fake that also keeps every fence body it was asked for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.proofs: list[SubmissionProof] = []

    def create_submission_fence(self, claim: Any, proof: SubmissionProof) -> Any:
        self.proofs.append(proof)
        return super().create_submission_fence(claim, proof)


def run(
    tmp_path: Path, sim: PhoneSim, serial: str | None = None, pack: Pack | None = None, **task: Any
) -> tuple[FlowResult, RecordingServer, str]:
    serial = serial or PLAIN[next(_serials)]
    phone = PhoneAdapter.connect(serial)
    task.setdefault("goods_id", "710000000001")
    task["product_url"] = f"https://mobile.yangkeduo.com/goods.html?goods_id={task['goods_id']}"
    purchase = make_purchase(**task)
    journal = Journal(tmp_path / f"{serial}.sqlite3")
    server = RecordingServer(purchase, keys=journal)
    c = purchase.claim
    journal_claim(journal, c)
    result = PurchaseFlow(phone=phone, pack=pack or _pack(), sink=server, journal=journal, waits=WAITS).run(purchase)
    return result, server, serial


def assert_stopped_before_fence(
    result: FlowResult, server: RecordingServer, sim: PhoneSim, serial: str, reason: str
) -> None:
    assert (result.outcome, result.reason_code, result.tapped) == ("FAILED", reason, False), server.fails
    assert server.proofs == [] and server.fences == {}
    assert [f.reason_code for f in server.fails] == [reason]
    assert "FAILURE" in [kind for kind, _ in server.evidence]
    journal = sim.journal(serial)
    assert journal.taps("submit") == []
    journal.assert_no_payment_taps()
    assert sim.phone(serial).orders == []


def assert_swipes_inside_lists(sim: PhoneSim, serial: str) -> int:
    """Every swipe started and ended inside the option list it scrolled (journal: list + bounds)."""
    found = swipes(sim.journal(serial).entries())
    for entry in found:
        assert entry["list"] is not None, entry
        left, top, right, bottom = entry["list_bounds"]
        pts = entry["points"]
        for x, y in zip(pts[::2], pts[1::2], strict=True):
            assert left <= x < right and top <= y < bottom, entry
    return len(found)


@dataclass(frozen=True)
class Order:
    """One order-sheet case: the task (goods, SKU, quantity, cap) and the total the sheet asks for it."""

    goods_id: str
    sku_color: str
    max_total_price: str
    total: str
    sku_size: str | None = None
    quantity: int = 1

    def task(self) -> dict[str, Any]:
        """The task fields for :func:`run` (``max_total_price`` as a ``Decimal``; ``total`` left out)."""
        return dict(
            goods_id=self.goods_id,
            sku_color=self.sku_color,
            sku_size=self.sku_size,
            quantity=self.quantity,
            max_total_price=Decimal(self.max_total_price),
        )


ORDERS = {
    # two dimensions, 【限定】 tile vs [限定] in the 已选 label, stock-badge price (最后3件 ¥39)
    "two-dimensions": Order("710000000001", "【限定】雾霾蓝", "80.00", "78.00", sku_size="L", quantity=2),
    # one dimension (款式), a tile name with leading spaces, 已选 label decorated with '#', 免拼购买
    "one-dimension": Order("710000000002", "奶白色+礼盒", "60.00", "59.00"),
    # image tiles (颜色分类, name in content-desc + tv_content, stock badges), 即将卖完 ¥118
    "image-tiles": Order("710000000003", "樱花粉", "200.00", "118.00"),
    # two dimensions: image tiles (颜色分类, the 4th tile on the second row) × text tiles (尺码), no promotion
    "image-and-text-tiles": Order("710000000007", "黑色", "400.00", "338.00", sku_size="L", quantity=2),
    # 色号 header, the wanted tile off-screen to the right: scroll inside the list
    "scrolled-list": Order("710000000004", "樱桃红#09", "50.00", "45.90"),
    # preselected tile off-screen when the sheet opens; the wanted one is that preselected tile
    "preselected-off-screen": Order("710000000005", "星空紫", "40.00", "38.40", quantity=3),
}


@pytest.mark.parametrize("name", sorted(ORDERS))
def test_orders_complete_on_the_order_sheet(tmp_path: Path, sim: PhoneSim, name: str) -> None:
    order_case = ORDERS[name]
    task = order_case.task()
    total = Decimal(order_case.total)
    result, server, serial = run(tmp_path, sim, **task)
    assert (result.outcome, result.tapped) == ("SUBMITTED", True), server.fails
    journal = sim.journal(serial)
    journal.assert_single_submit_tap(goods_id=task["goods_id"])
    journal.assert_no_payment_taps()
    # every tap landed on a buy button, an option tile, the stepper or (once) the submit control
    assert {t["role"] for t in journal.taps()} <= {"buy", "option", "qty_inc", "qty_dec", "submit"}
    (proof,) = server.proofs
    # the fence carries what the submit screen showed (names in the one comparison form)
    # named by the task's dimensions (颜色/尺码: the colour/size special case; the sheet may say 颜色分类 or 款式)
    assert proof.selected_options == legacy_options(task["sku_color"], task["sku_size"])
    assert proof.confirm_page_amount == total and proof.quantity_read == task["quantity"]
    assert proof.gate1_unit_price == proof.gate2_unit_price == proof.gate3_unit_price == total / task["quantity"]
    assert proof.payment_mode == "微信支付" and proof.submit_control_match_count == 1
    (order,) = sim.phone(serial).orders
    assert Decimal(str(order["total"])) == total
    n = assert_swipes_inside_lists(sim, serial)
    assert (n > 0) == (name in ("scrolled-list", "preselected-off-screen"))


def test_a_pack_without_the_order_sheet_layout_stops_on_it(tmp_path: Path, sim: PhoneSim) -> None:
    """The 8.17.0 pack (only the sku_sheet layout) on a phone that opens the order sheet: it recognizes
    the sheet as the screen holding the submit control and stops there with NO_SELECTOR_PACK at
    OPEN_SKU_PANEL — no option, stepper or submit tap, nothing driven down the SKU-sheet path."""
    old = next(p for p in shipped_packs() if p.version_name == "8.17.0")
    assert [layout.id for layout in old.layouts] == ["sku_sheet"]
    result, server, serial = run(tmp_path, sim, pack=old, sku_color="黑色", sku_size="M", max_total_price=Decimal("30"))
    assert_stopped_before_fence(result, server, sim, serial, "NO_SELECTOR_PACK")
    assert "no order_sheet layout" in server.fails[0].summary
    assert [t["role"] for t in sim.journal(serial).taps()] == ["buy"]


def test_older_layout_bucket_on_the_same_version(tmp_path: Path, sim: PhoneSim) -> None:
    """The same 8.22.0 pack recognizes the SKU-sheet layout (another A/B bucket) by its screens."""
    result, server, serial = run(
        tmp_path, sim, "sim-old", sku_color="黑色", sku_size="M", quantity=1, max_total_price=Decimal("30.00")
    )
    assert (result.outcome, result.tapped) == ("SUBMITTED", True), server.fails
    sim.journal(serial).assert_single_submit_tap()
    assert server.proofs[0].selected_options == (("颜色", "黑色"), ("尺码", "M"))
    assert server.proofs[0].payment_mode == "微信支付"


@pytest.mark.parametrize(
    "serial",
    ["sim-balance", "sim-paylater", "sim-nopw", "sim-unreadable", "sim-tworows", "sim-paynow", "sim-confirmpay"],
)
def test_unsafe_payment_modes_stop_before_the_fence(tmp_path: Path, sim: PhoneSim, serial: str) -> None:
    result, server, _ = run(
        tmp_path, sim, serial, sku_color="黑色", sku_size="M", quantity=1, max_total_price=Decimal("30.00")
    )
    assert_stopped_before_fence(result, server, sim, serial, "PAYMENT_MODE_UNSAFE")
    # refused as soon as the sheet opened: no option or quantity tap either
    assert [t["role"] for t in sim.journal(serial).taps()] == ["buy"]


@pytest.mark.parametrize(
    ("task", "reason"),
    [
        (dict(goods_id="710000000006", sku_color="雾霾蓝色款", sku_size=None), "OUT_OF_STOCK"),  # enabled tile
        (dict(goods_id="710000000003", sku_color="雾霾蓝色款", sku_size=None), "OUT_OF_STOCK"),  # image tile
        (dict(goods_id="710000000004", sku_color="不存在的色号#00", sku_size=None), "SKU_VALUE_MISSING"),
        (dict(goods_id="710000000002", sku_color="经典白", sku_size="M"), "SKU_DIMENSION_UNNAMED"),
        (dict(goods_id="710000000001", sku_color="黑色", sku_size=None), "SKU_DIMENSION_UNNAMED"),
        (
            dict(goods_id="710000000001", sku_color="黑色", sku_size="L", max_total_price=Decimal("29.00")),
            "PRICE_OVER_CAP",
        ),
    ],
)
def test_task_level_stops(tmp_path: Path, sim: PhoneSim, task: dict[str, Any], reason: str) -> None:
    task.setdefault("quantity", 1)
    task.setdefault("max_total_price", Decimal("500.00"))
    result, server, serial = run(tmp_path, sim, **task)
    assert_stopped_before_fence(result, server, sim, serial, reason)
    n = assert_swipes_inside_lists(sim, serial)
    if reason == "SKU_VALUE_MISSING":
        # both ends reached: swipes toward the end and back toward the start
        pts = [e["points"] for e in swipes(sim.journal(serial).entries())]
        assert n >= 2 and any(p[0] > p[2] for p in pts) and any(p[0] < p[2] for p in pts)


def test_update_prompt_stops(tmp_path: Path, sim: PhoneSim) -> None:
    result, server, _ = run(
        tmp_path, sim, "sim-update", sku_color="黑色", sku_size="M", quantity=1, max_total_price=Decimal("30.00")
    )
    assert_stopped_before_fence(result, server, sim, "sim-update", "APP_UPDATE_PROMPT")


GATE3_NULLS = {
    "color": ("SKU_SELECTION_UNREADABLE", lambda r: {"selected": {**r.selected, "颜色": None}}),
    "size": ("SKU_SELECTION_UNREADABLE", lambda r: {"selected": {**r.selected, "尺码": None}}),
    "unit_price": ("UNIT_PRICE_UNREADABLE", lambda r: {"unit_price": None}),
    "quantity": ("QUANTITY_UNREADABLE", lambda r: {"quantity": None}),
    "total": ("CONFIRM_AMOUNT_UNREADABLE", lambda r: {"total": None}),
}


@pytest.mark.parametrize("reading", sorted(GATE3_NULLS))
def test_gate3_each_null_reading_stops_before_the_fence(
    tmp_path: Path, sim: PhoneSim, monkeypatch: pytest.MonkeyPatch, reading: str
) -> None:
    """Each gate-3 reading made unreadable in turn (the real reader's result with that one value
    nulled) stops before the fence with its own code: no fence request, no submit tap."""
    import dataclasses

    reason, null = GATE3_NULLS[reading]
    real = cap.confirm_reading

    def nulled(dump: Any, pack: Pack, wanted: dict[str, str]) -> cap.ConfirmReading:
        got = real(dump, pack, wanted)
        return dataclasses.replace(got, gate3=dataclasses.replace(got.gate3, **null(got.gate3)))

    monkeypatch.setattr(cap, "confirm_reading", nulled)
    result, server, serial = run(
        tmp_path, sim, sku_color="白色", sku_size="L", quantity=1, max_total_price=Decimal("30.00")
    )
    assert_stopped_before_fence(result, server, sim, serial, reason)


# --- against the real server (runner + HttpDeviceApi + the server's own fence re-check) ------------
ENV_822 = {"CMBUYER_ALLOWED_APP_VERSIONS": "8.17.0,8.22.0"}  # `init` writes 8.17.0 only


def _one_phone_sim(**phone: Any) -> Any:
    data = load_scenario("order_sheet").data
    data["outcome"] = "ORDER_CREATED"
    data["phones"]["sim-1"] = phone
    return running_sim(data, serials=("sim-1",))


def test_one_dimension_order_real_server(tmp_path: Path) -> None:
    """A task without a size on the order sheet, end to end: the server stores what the submit screen
    showed (size null, gate-3 price, payment mode) and the task waits for payment."""
    from .realserver import RealServer
    from .test_real_server import Agent

    with RealServer(tmp_path, ENV_822) as srv, adbutils_leaks_ignored(), _one_phone_sim() as sim:
        creds = srv.add_device()
        task = srv.add_task(goods_id="710000000002", color="经典白", size=None, quantity=2, max_total_price="90.00")
        agent = Agent(tmp_path, srv, creds, PhoneAdapter.connect("sim-1"))
        assert agent.run_once() == 0
        sim.journal("sim-1").assert_single_submit_tap()
        sim.journal("sim-1").assert_no_payment_taps()
        detail = srv.detail(task.id)
    assert detail["task"]["state"] == "WAITING_PAYMENT", detail["task"]
    sub = detail["submission"]
    sub = sub if isinstance(sub, dict) else vars(sub)
    assert (json.loads(sub["selected_options"]), sub["payment_mode"]) == ([["颜色", "经典白"]], "微信支付")
    assert str(sub["gate3_unit_price"]) == "45.00" and str(sub["confirm_page_amount"]) == "90.00"


def test_unsafe_payment_mode_real_server(tmp_path: Path) -> None:
    """先用后付 on the phone: the attempt fails with PAYMENT_MODE_UNSAFE, no submission exists, no tap."""
    from .realserver import RealServer
    from .test_real_server import Agent

    unsafe = _one_phone_sim(payment_mode="pay_later")
    with RealServer(tmp_path, ENV_822) as srv, adbutils_leaks_ignored(), unsafe as sim:
        creds = srv.add_device()
        task = srv.add_task(goods_id="710000000001", color="黑色", size="M", quantity=1, max_total_price="30.00")
        agent = Agent(tmp_path, srv, creds, PhoneAdapter.connect("sim-1"))
        agent.run_once()
        assert sim.journal("sim-1").taps("submit") == [] and sim.phone("sim-1").orders == []
        sim.journal("sim-1").assert_no_payment_taps()
        detail = srv.detail(task.id)
    assert detail["submission"] is None
    assert detail["task"]["state_reason"] == "PAYMENT_MODE_UNSAFE", detail["task"]
    assert "FAILURE" in [e["kind"] for e in detail["evidence"]]


def test_stop_with_a_foreign_app_in_front_takes_no_failure_screenshot(
    tmp_path: Path, sim: PhoneSim, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Breaker: a stop before the fence while an external app (here the WeChat cashier window) is in
    front must not photograph it. The simulator's BACK always leaves a cashier, a real foreign app may
    not (a chat stack), so back_out is made a no-op here; the stop itself is the payment gate's."""
    serial = PLAIN[next(_serials)]

    def foreign_then_stop(phone: Any, pack: Pack) -> str:
        sim.phone(serial).app.foreign = "com.tencent.mm"
        raise FlowStop("payment mode unsafe: test", "PAYMENT_MODE_UNSAFE")

    monkeypatch.setattr(cap, "check_payment_mode", foreign_then_stop)
    monkeypatch.setattr(cap, "back_out", lambda phone, pack, max_steps=4: None)
    try:
        result, server, _ = run(
            tmp_path, sim, serial, sku_color="黑色", sku_size="M", quantity=1, max_total_price=Decimal("30.00")
        )
    finally:
        sim.phone(serial).app.foreign = None
    assert (result.outcome, result.reason_code) == ("FAILED", "PAYMENT_MODE_UNSAFE")
    sim.journal(serial).assert_no_foreign_screenshots()
    assert "FAILURE" not in [kind for kind, _ in server.evidence]
