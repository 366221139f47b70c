"""The agent against the REAL server (tests/agent/realserver.py: real `cmbuyer-server init` data dir,
real aiohttp app + SQLite, served on a loopback port) — HttpDeviceApi makes real HTTP requests.

Phones:
- the REAL uiautomator2 3.7.1 + adbutils 2.12.0 against the phone simulator's adb server
  (``running_sim``) for the happy path, the adb-drop cases and two submit controls;
- the screen-content cases run on one of two transports (``transport`` = "model" | "adb", see ``Rig``):
  the simulator's app model behind the real PhoneAdapter (tests/agent/simphone.py, SimPhone hooks),
  or the real uiautomator2/adbutils against the simulator, with the simulator's scenario data and
  fault injection (``phone.inject``) and its journal for the submit/payment tap counts. The adb
  transport is proven on a representative subset (the comment above ``ADB, MODEL`` says which and why), every other
  case runs once on the model. The agent's phone pacing sleeps are removed in both so each case takes a
  few seconds.

Each case asserts the phone side (submit/payment taps) AND the committed server state, read on a
separate SQLite connection.
"""

from __future__ import annotations

import copy
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.agent.approval import ApprovalSettings
from cmbuyer.agent.client import Credentials, HttpDeviceApi
from cmbuyer.agent.errors import FenceReplayed, ServerRejected, ServerUnreachable
from cmbuyer.agent.journal import Journal, JournalError
from cmbuyer.agent.model import (
    AttemptFailure,
    ScreenshotAsset,
    Session,
    SubmissionResult,
    TaskEvent,
)
from cmbuyer.agent.phone.adapter import Deadlines, PhoneAdapter
from cmbuyer.agent.runner import Runner, RunnerConfig
from cmbuyer.agent.waits import FlowWaits
from cmbuyer.phonesim import hierarchy
from cmbuyer.phonesim.journal import payment_taps
from cmbuyer.phonesim.screens import windows
from cmbuyer.phonesim.server import PhoneSim
from cmbuyer.phonesim.testing import adbutils_leaks_ignored, running_sim
from tests.soak import soak_iterations
from tests.tally import fences, goods_per_task, tally

from .fakes import read_proof
from .realserver import RealServer
from .simphone import SimPhone
from .test_flow_sim import _default

GATE_KINDS = ["SKU_PANEL_GATE_1", "QUANTITY_GATE_2", "CONFIRM_PAGE_GATE_3"]
GOODS_ID = "937122477375"  # the default scenario's first goods (the task default)
# the simulated app answers at once: a screen, the outcome after the tap and the order list show in
# well under these (a stop on an unrecognized screen takes 2 s instead of production's 8 s)
FAST_WAITS = FlowWaits(screen=2.0, observe=2.0, confirm=4.0, order_list=2.0)
PRODUCTION_WAITS = FlowWaits()


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[RealServer]:
    with RealServer(tmp_path) as server:
        yield server


@pytest.fixture
def fast_phone(monkeypatch: pytest.MonkeyPatch) -> FlowWaits:
    """Drop the phone pacing sleeps (the simulated app model answers at once) and return the short
    flow deadlines to pass to the agent (:data:`FAST_WAITS`). Only the agent's phone modules see the
    shim: HTTP retry backoff and the server keep real time."""
    shim = types.SimpleNamespace(monotonic=time.monotonic, sleep=lambda s: None, time=time.time)
    import cmbuyer.agent.capabilities as cap
    import cmbuyer.agent.confirm as conf
    import cmbuyer.agent.phone.adapter as adapter
    import cmbuyer.agent.submit as sub

    for mod in (cap, sub, adapter, conf):
        monkeypatch.setattr(mod, "time", shim)
    return FAST_WAITS


class Agent:
    """One agent: journal + real HttpDeviceApi + runner, as ``cmbuyer-agent run`` wires them; ``waits``:
    the flow's deadlines (production's unless a test passes the ``fast_phone`` ones); ``approval``: the
    supervised wait's settings (the defaults unless given)."""

    def __init__(
        self,
        root: Path,
        srv: RealServer,
        creds: Credentials,
        phone: PhoneAdapter,
        api_cls: type[HttpDeviceApi] = HttpDeviceApi,
        waits: FlowWaits = PRODUCTION_WAITS,
        approval: ApprovalSettings | None = None,
    ) -> None:
        self.journal = Journal(root / "agent-state" / "sim-1.sqlite3")
        self.api = api_cls(srv.url, creds, self.journal, backoff=0.2)
        self.lines: list[str] = []
        self.runner = Runner(
            RunnerConfig("sim-1", poll_seconds=0.05, once=True, waits=waits, approval=approval or ApprovalSettings()),
            phone,
            self.api,
            self.journal,
            self.lines.append,
        )

    def run_once(self) -> int:
        return self.runner.run()

    @contextmanager
    def running(self) -> Iterator[threading.Thread]:
        """The runner's loop (``once`` off) on a daemon thread while the block runs; stopped and joined
        (10 s at most) when it ends, whether it raised or not."""
        self.runner.cfg.once = False
        thread = threading.Thread(target=self.runner.run, daemon=True)
        thread.start()
        try:
            yield thread
        finally:
            self.runner.stop.set()
            thread.join(10)


def sim_phone(sim: SimPhone) -> PhoneAdapter:
    return PhoneAdapter("sim-1", sim, sim, Deadlines(dump=5, shell=5, screenshot=5, tap=5))


def kinds(detail: dict[str, Any]) -> list[str]:
    return sorted(e["kind"] for e in detail["evidence"])


def steps(detail: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e["step"], e["outcome"]) for e in detail["events"]]


# --- HttpDeviceApi: every route, for real -------------------------------------------------------
def test_http_device_api_against_the_real_server(tmp_path: Path, srv: RealServer) -> None:
    creds = srv.add_device()
    journal = Journal(tmp_path / "j.sqlite3")
    api = HttpDeviceApi(srv.url, creds, journal, backoff=0.05)
    hb = api.heartbeat(
        adb_serial="sim-1", android_release="13", pdd_version="8.17.0", pdd_version_code=81700, state="READY"
    )
    assert hb["app_version_allowed"] is True and hb["heartbeat_interval_seconds"] >= 1
    assert srv.device_row(creds.device_id)["reported_state"] == "READY"
    session = Session("0f8b5b1c-7d1e-4c7a-9a52-1d2e3f4a5b6c")
    assert api.claim_next(session) is None  # 204: nothing to do
    task = srv.add_task()
    purchase = api.claim_next(session)
    assert purchase is not None and purchase.task.id == task.id and purchase.task.quantity == 2
    assert purchase.task.max_total_price == Decimal("30.00")
    api.forget_claim_request(session)
    claim = purchase.claim
    assert srv.state(task.id) == "CLAIMED"

    lease = api.renew_lease(claim)
    assert lease.lease_expires_at >= claim.lease_expires_at

    api.append_events(claim, [TaskEvent("OPEN_PRODUCT", "STARTED"), TaskEvent("OPEN_PRODUCT", "OK")])
    assert srv.state(task.id) == "ORDERING"
    assert api.task_version(claim) == claim.task_version + 1  # the fence must name the new version

    png = SimPhone().screenshot()
    import io

    buf = io.BytesIO()
    png.save(buf, format="PNG")
    ref = api.upload_screenshot(claim, ScreenshotAsset("SKU_PANEL_GATE_1", buf.getvalue()))
    assert kinds(srv.detail(task.id)) == ["SKU_PANEL_GATE_1"]

    good = read_proof(purchase.task, Decimal("12.88"))  # 黑色CHA(纯棉), M(建议100-115), 2 pieces: 25.76
    # The server re-checks what was read: each of these readings is refused and stores nothing.
    for refused_reading in (
        replace(good, confirm_page_amount=Decimal("31.00")),
        replace(good, selected_options=(("颜色", "白色CHA(纯棉)"), ("尺码", "M(建议100-115)"))),  # one value
        replace(good, selected_options=(("颜色", "黑色CHA(纯棉)"),)),  # a dimension not read
        replace(good, gate3_unit_price=Decimal("12.87")),
        replace(good, payment_mode="先用后付"),
    ):
        with pytest.raises(ServerRejected) as info:
            api.create_submission_fence(claim, refused_reading)
        assert info.value.status == 409 and info.value.reason_code == "FENCE_REFUSED", refused_reading
        journal.drop_key("fence", claim.attempt_id)  # a refused fence stored nothing; a new key is fine

    permit = api.create_submission_fence(claim, good)
    assert srv.state(task.id) == "SUBMITTING"
    # The same fence_key again (e.g. the first answer was lost): a replay, NEVER a permit.
    with pytest.raises(FenceReplayed) as replay:
        api.create_submission_fence(claim, good)
    assert replay.value.submission_id == permit.submission_id

    reported = SubmissionResult("SUBMITTED", ref.asset_id, order_sn="241201-123456789012")
    api.report_submission_result(permit, reported)
    api.report_submission_result(permit, reported)  # same key: replay
    detail = srv.detail(task.id)
    assert detail["task"]["state"] == "WAITING_PAYMENT"
    assert detail["submission"]["state"] == "SUBMITTED"
    assert detail["submission"]["order_sn"] == "241201-123456789012"
    assert (detail["submission"]["gate3_unit_price"], detail["submission"]["payment_mode"]) == ("12.88", "微信支付")

    with pytest.raises(ServerRejected) as refused:
        api.report_recovered_result(
            submission_id=permit.submission_id,
            attempt_id=claim.attempt_id,
            claim_token=claim.claim_token,
            result=SubmissionResult("UNKNOWN"),
            result_key="5a0d3c1e-8f4b-4c2a-9e7d-6b5a4c3d2e1f",
        )
    assert refused.value.error == "result_conflict"  # one observation per submission

    bad = HttpDeviceApi(srv.url, Credentials(creds.device_id, "0" * 64), journal, backoff=0.05)
    with pytest.raises(ServerRejected) as unauth:
        bad.heartbeat(adb_serial="x", android_release="13", pdd_version=None, pdd_version_code=None, state="PAUSED")
    assert unauth.value.status == 401
    assert "0" * 64 not in repr(bad)


def test_server_down_then_back_retries_with_the_same_keys(tmp_path: Path, srv: RealServer) -> None:
    creds = srv.add_device()
    task = srv.add_task()
    journal = Journal(tmp_path / "j.sqlite3")
    api = HttpDeviceApi(srv.url, creds, journal, backoff=0.3, retries=6)
    api.heartbeat(adb_serial="sim-1", android_release="13", pdd_version="8.17.0", pdd_version_code=81700, state="READY")
    purchase = api.claim_next(Session("1f8b5b1c-7d1e-4c7a-9a52-1d2e3f4a5b6c"))
    assert purchase is not None
    srv.stop()
    threading.Timer(1.0, srv.start).start()
    events = [TaskEvent("OPEN_PRODUCT", "STARTED"), TaskEvent("OPEN_PRODUCT", "OK")]
    api.append_events(purchase.claim, events)  # fails while down, then succeeds once it is back
    detail = srv.detail(task.id)
    assert steps(detail) == [("OPEN_PRODUCT", "STARTED"), ("OPEN_PRODUCT", "OK")]
    srv.stop()
    with pytest.raises(ServerUnreachable):
        HttpDeviceApi(srv.url, creds, journal, backoff=0.01, retries=2).heartbeat(
            adb_serial="sim-1", android_release="13", pdd_version="8.17.0", pdd_version_code=81700, state="READY"
        )
    srv.start()


# --- the whole loop through the real uiautomator2 -----------------------------------------------
def test_happy_path_real_u2_real_server(tmp_path: Path, srv: RealServer) -> None:
    creds = srv.add_device()
    task = srv.add_task()
    with adbutils_leaks_ignored(), running_sim() as sim:
        agent = Agent(tmp_path, srv, creds, PhoneAdapter.connect("sim-1"))
        assert agent.run_once() == 0
        sim.journal("sim-1").assert_single_submit_tap()
        sim.journal("sim-1").assert_no_payment_taps()
        (order,) = sim.phone("sim-1").orders
    detail = srv.detail(task.id)
    assert detail["task"]["state"] == "WAITING_PAYMENT"
    assert detail["submission"]["state"] == "SUBMITTED"
    # SUBMITTED is followed by the pack's read-only confirmation: the order list screenshot and
    # the order number on the submission (docs/agent.md "After the tap")
    assert kinds(detail) == sorted([*GATE_KINDS, "POST_SUBMIT_OBSERVATION", "ORDER_CONFIRMATION"])
    assert detail["submission"]["order_sn"] == order["order_sn"]
    got = steps(detail)
    for step in ("OPEN_PRODUCT", "SELECT_SKU", "GATE_1", "GATE_2", "GATE_3"):
        assert (step, "OK") in got
    assert ("FENCE", "STARTED") in got and ("OBSERVE_RESULT", "OK") in got
    assert srv.device_row(creds.device_id)["pdd_version_code"] == 81700
    assert srv.device_row(creds.device_id)["pack_id"] == "pdd-8.17.0-81700"  # heartbeat pack_id
    assert agent.journal.submission(detail["attempts"][0]["id"]).phase == "RESULT_REPORTED"


@pytest.mark.parametrize(
    "fault,submit_taps,observation",
    [
        # adb link dropped while the submit tap is sent; the tap never reached the screen
        ({"kind": "drop_connection", "on": "submit_tap", "applied": False}, 0, "UNKNOWN"),
        # dropped right after the tap landed (the dangerous, realistic case): an order exists
        ({"kind": "drop_connection", "on": "submit_tap", "applied": True}, 1, "UNKNOWN"),
    ],
)
def test_adb_dropped_during_or_after_the_submit_tap(
    tmp_path: Path, srv: RealServer, fault: dict[str, Any], submit_taps: int, observation: str
) -> None:
    creds = srv.add_device()
    task = srv.add_task()
    with adbutils_leaks_ignored(), running_sim() as sim:
        sim.phone("sim-1").inject(fault)
        agent = Agent(tmp_path, srv, creds, PhoneAdapter.connect("sim-1"))
        assert agent.run_once() == 0
        landed = [t for t in sim.journal("sim-1").taps("submit") if t.get("applied", True)]
        assert len(landed) == submit_taps
        sim.journal("sim-1").assert_no_payment_taps()
    detail = srv.detail(task.id)
    assert detail["task"]["state"] == "RECONCILIATION_REQUIRED"
    assert detail["submission"]["observation"] == observation


def test_adb_dropped_before_the_tap_no_tap_unknown(tmp_path: Path, srv: RealServer) -> None:
    """The phone disappears between the fence and the tap: the pre-tap re-read fails, nothing is
    tapped, the observation is UNKNOWN (the fence exists, so only a person can close it)."""
    creds = srv.add_device()
    task = srv.add_task()
    with adbutils_leaks_ignored(), running_sim() as sim:

        class Unplug(HttpDeviceApi):
            def create_submission_fence(self, claim: Any, proof: Any) -> Any:
                permit = super().create_submission_fence(claim, proof)
                sim.remove_phone("sim-1")  # unplugged: every adb request for it now FAILs
                return permit

        phone_model = sim.phone("sim-1")
        agent = Agent(tmp_path, srv, creds, PhoneAdapter.connect("sim-1"), api_cls=Unplug)
        assert agent.run_once() == 0
        assert phone_model.journal.taps("submit") == []
        assert phone_model.orders == []
    detail = srv.detail(task.id)
    assert detail["task"]["state"] == "RECONCILIATION_REQUIRED"
    assert detail["submission"]["observation"] == "UNKNOWN"


# --- screen-content cases: each runs on two transports, always against the real server ---------
# "model": the simulator's app model behind the real PhoneAdapter (tests/agent/simphone.py), fast.
# "adb":   the REAL uiautomator2 + adbutils against the simulator's adb server (running_sim); the
#          scenario data and the simulator's fault injection (phone.inject) replace SimPhone hooks,
#          and the taps are read from the simulator's journal.
#
# Each case runs once. The adb transport carries a representative subset: each screen the flow stops on
# (the SKU panel: SKU_VALUE_MISSING; the quantity stepper: the stock_out fault; an unknown page, backed out
# of with BACK key events: SCREEN_UNRECOGNIZED; the confirm page: the risk-wall popup; the cashier after
# the tap: PAYMENT_HANDOFF) and each class of simulator fault (a data change at a screen: stock_out; a
# popup: risk_wall; a broken dump through uiautomator2's JSON-RPC: malformed_dump; a scenario outcome
# after the tap: PAYMENT_HANDOFF) at least once, with the simulator's fault book checked (``fired``). The
# rest differ from those only in the data (another cap, another price, another dump fault, another
# after-submit page, the server's lease) and run on the fast model; the version read through the real
# adbutils is proven by test_app_updated_under_the_agent_refuses_to_claim.
ADB, MODEL = "adb", "model"


class Rig:
    """One phone for a screen-content case, on either transport."""

    def __init__(self, phone: PhoneAdapter, model: SimPhone | None = None, sim: PhoneSim | None = None) -> None:
        self.phone = phone
        self.model = model
        self.sim = sim

    @property
    def adb(self) -> bool:
        return self.sim is not None

    def fault(self, adb_spec: dict[str, Any], model_setup: Callable[[SimPhone], None]) -> None:
        """Arm the same fault on either transport: ``phone.inject`` on the simulator, a hook on SimPhone."""
        if self.sim is not None:
            self.sim.phone("sim-1").inject(adb_spec)
        else:
            assert self.model is not None
            model_setup(self.model)

    def fired(self) -> list[str]:
        """Faults the simulator reports as fired (adb transport; the model has no fault book)."""
        assert self.sim is not None
        return [e["fault"] for e in self.sim.journal("sim-1").entries("fault")]

    def submit_taps(self) -> int:
        if self.sim is not None:
            return len([t for t in self.sim.journal("sim-1").taps("submit") if t.get("applied", True)])
        assert self.model is not None
        return self.model.roles().count("submit")

    def payment_taps(self) -> int:
        if self.sim is not None:
            return len(payment_taps(self.sim.journal("sim-1").entries()))
        assert self.model is not None
        return self.model.roles().count("payment")

    def taps(self) -> int:
        if self.sim is not None:
            return len(self.sim.journal("sim-1").taps())
        assert self.model is not None
        return len(self.model.taps)

    def orders(self) -> int:
        if self.sim is not None:
            return len(self.sim.phone("sim-1").orders)
        assert self.model is not None
        return len(self.model.app.orders)


@contextmanager
def rig(transport: str, scenario: dict[str, Any] | None = None) -> Iterator[Rig]:
    if transport == "model":
        model = SimPhone(scenario)
        yield Rig(sim_phone(model), model=model)
        return
    assert transport == "adb"
    with adbutils_leaks_ignored(), running_sim(scenario) as sim:
        yield Rig(PhoneAdapter.connect("sim-1"), sim=sim)


def _scenario(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(_default())
    data.update(changes)
    return data


def _two_matching_options() -> dict[str, Any]:
    data = _scenario()
    goods = data["catalogue"][0]
    goods["dimensions"][1]["options"].append("M（建议100-115）")  # NFKC-equal to "M(建议100-115)"
    goods["skus"].append({"options": ["黑色CHA(纯棉)", "M（建议100-115）"], "price": "12.88", "stock": 5})
    return data


def _run_case(
    tmp_path: Path,
    srv: RealServer,
    phone: Rig,
    waits: FlowWaits,
    api_cls: type[HttpDeviceApi] = HttpDeviceApi,
    **task: Any,
) -> tuple[Agent, Any, dict[str, Any]]:
    creds = srv.add_device()
    ref = srv.add_task(**task)
    agent = Agent(tmp_path, srv, creds, phone.phone, api_cls=api_cls, waits=waits)
    assert agent.run_once() == 0
    return agent, ref, srv.detail(ref.id)


def _assert_failed_before_fence(detail: dict[str, Any], phone: Rig, reason: str) -> None:
    assert detail["task"]["state"] == "FAILED", detail["task"]
    assert detail["task"]["state_reason"] == reason
    assert detail["submission"] is None
    assert phone.submit_taps() == 0 and phone.payment_taps() == 0 and phone.orders() == 0
    # backing out of an unknown or unreadable page presses BACK until it leaves the app; the FAILURE
    # screenshot is taken only while the app is in front, so those stops have none
    if reason in ("SCREEN_UNRECOGNIZED", "DUMP_EMPTY", "DUMP_INVALID", "DUMP_NO_APP_NODES"):
        assert "FAILURE" not in kinds(detail)
    else:
        assert "FAILURE" in kinds(detail)


@pytest.mark.parametrize(
    "transport,task,reason",
    [
        (ADB, {"color": "紫色"}, "SKU_VALUE_MISSING"),
        (MODEL, {"max_total_price": "20.00"}, "PRICE_OVER_CAP"),
        (MODEL, {"quantity": 6}, "QUANTITY_CAPPED_BY_STOCK"),
        (ADB, {"goods_id": "999999999999"}, "SCREEN_UNRECOGNIZED"),
    ],
)
def test_stops_before_the_fence_real_server(
    tmp_path: Path, srv: RealServer, fast_phone: FlowWaits, transport: str, task: dict[str, Any], reason: str
) -> None:
    with rig(transport) as phone:
        _, _, detail = _run_case(tmp_path, srv, phone, fast_phone, **task)
        _assert_failed_before_fence(detail, phone, reason)


@pytest.mark.parametrize("transport", [ADB])
def test_stock_drops_while_the_sku_panel_is_open(
    tmp_path: Path, srv: RealServer, fast_phone: FlowWaits, transport: str
) -> None:
    """The stock of the chosen SKU falls to 1 once the SKU panel is open (phonesim ``stock_out``):
    the task's quantity 2 can no longer be set, so the agent stops before the fence."""

    def low_stock(sim: SimPhone) -> None:
        def drop(role: str) -> None:
            if sim.app.screen == "sku":
                for sku in sim.app.goods.skus.values():  # type: ignore[union-attr]
                    sku.stock = 1

        sim.after_tap = drop

    with rig(transport) as phone:
        phone.fault({"kind": "stock_out", "goods_id": GOODS_ID, "stock": 1, "when": {"on_screen": "sku"}}, low_stock)
        _, _, detail = _run_case(tmp_path, srv, phone, fast_phone)
        _assert_failed_before_fence(detail, phone, "QUANTITY_CAPPED_BY_STOCK")
        if phone.adb:
            assert phone.fired() == ["stock_out"]


@pytest.mark.parametrize("transport", [MODEL])
def test_two_options_matching_is_ambiguous(
    tmp_path: Path, srv: RealServer, fast_phone: FlowWaits, transport: str
) -> None:
    with rig(transport, _two_matching_options()) as phone:
        _, _, detail = _run_case(tmp_path, srv, phone, fast_phone)
        _assert_failed_before_fence(detail, phone, "SKU_AMBIGUOUS")


def test_two_submit_controls(tmp_path: Path, srv: RealServer) -> None:
    """The simulator draws a second real 提交订单 control on the confirm page (phonesim fault
    ``duplicate_submit``), seen through the real uiautomator2/adbutils: gate 3 refuses, no fence."""
    creds = srv.add_device()
    task = srv.add_task()
    with adbutils_leaks_ignored(), running_sim() as sim:
        phone_model = sim.phone("sim-1")
        phone_model.inject("duplicate_submit", when={"on_screen": "confirm"})
        agent = Agent(tmp_path, srv, creds, PhoneAdapter.connect("sim-1"))
        assert agent.run_once() == 0
        assert [e["fault"] for e in phone_model.journal.entries("fault")] == ["duplicate_submit"]
        assert phone_model.journal.taps("submit") == [] and phone_model.journal.taps("payment") == []
        assert phone_model.orders == []
    detail = srv.detail(task.id)
    assert detail["task"]["state"] == "FAILED", detail["task"]
    assert detail["task"]["state_reason"] == "SUBMIT_CONTROL_COUNT"
    assert detail["submission"] is None
    assert "FAILURE" in kinds(detail)


@pytest.mark.parametrize("transport", [ADB])
def test_security_challenge_before_submit(
    tmp_path: Path, srv: RealServer, fast_phone: FlowWaits, transport: str
) -> None:
    def wall(sim: SimPhone) -> None:
        def show(role: str) -> None:
            if sim.app.screen == "confirm" and not sim.app.popups:
                sim.app.popups.append({"kind": "risk_wall", "text": None})

        sim.after_tap = show

    with rig(transport) as phone:
        phone.fault({"kind": "popup", "popup": "risk_wall", "when": {"on_screen": "confirm"}}, wall)
        _, _, detail = _run_case(tmp_path, srv, phone, fast_phone)
        assert detail["task"]["state_reason"] in ("RISK_WALL", "SECURITY_CHALLENGE")
        _assert_failed_before_fence(detail, phone, detail["task"]["state_reason"])
        if phone.adb:
            assert phone.fired() == ["popup"]


@pytest.mark.parametrize("transport", [MODEL])
def test_price_change_between_gates(tmp_path: Path, srv: RealServer, fast_phone: FlowWaits, transport: str) -> None:
    """The unit price moves from 12.88 to 13.50 after gate 1 read it (model: after the quantity tap;
    simulator: ``price_change`` fault once the confirm page is up, before gate 3)."""

    def bump(sim: SimPhone) -> None:
        def after(role: str) -> None:
            if role == "qty_inc":
                for sku in sim.app.goods.skus.values():  # type: ignore[union-attr]
                    sku.price = Decimal("13.50")

        sim.after_tap = after

    with rig(transport) as phone:
        phone.fault(
            {"kind": "price_change", "goods_id": GOODS_ID, "price": "13.50", "when": {"on_screen": "confirm"}}, bump
        )
        _, _, detail = _run_case(tmp_path, srv, phone, fast_phone)
        _assert_failed_before_fence(detail, phone, "PRICE_CHANGED")
        if phone.adb:
            assert phone.fired() == ["price_change"]


def _dump_hook(kind: str) -> Callable[[SimPhone], None]:
    """SimPhone's stand-in for the simulator's dump faults (same XML the simulator produces)."""

    def setup(sim: SimPhone) -> None:
        def hook(xml: str, n: int) -> str:
            if kind == "empty_dump":
                return hierarchy.EMPTY_DUMP
            if kind == "malformed_dump":
                return hierarchy.malform(xml)
            pkg = sim.cfg.app.package
            return hierarchy.render_xml(
                [hierarchy.cut_depth(w, 3) if w.package == pkg else w for w in windows(sim.app)]
            )

        sim.dump_hook = hook

    return setup


@pytest.mark.parametrize(
    "transport,kind,reason",
    [
        (MODEL, "empty_dump", "DUMP_EMPTY"),
        (ADB, "malformed_dump", "DUMP_INVALID"),
        (MODEL, "partial_dump", "SCREEN_UNRECOGNIZED"),
    ],
)
def test_bad_dumps_real_server(
    tmp_path: Path, srv: RealServer, fast_phone: FlowWaits, transport: str, kind: str, reason: str
) -> None:
    """Every dump comes back empty / truncated mid-element / cut below depth 3 (``times: null``)."""
    with rig(transport) as phone:
        phone.fault({"kind": kind, "times": None}, _dump_hook(kind))
        agent, _, detail = _run_case(tmp_path, srv, phone, fast_phone)
        assert detail["task"]["state"] == "FAILED" and detail["task"]["state_reason"] == reason, (
            detail["task"],
            agent.lines,
        )
        _assert_failed_before_fence(detail, phone, reason)
        if phone.adb:
            assert set(phone.fired()) == {kind}


@pytest.mark.parametrize(
    "transport,outcome,observation",
    [
        (ADB, "PAYMENT_HANDOFF", "EXTERNAL_PAYMENT_HANDOFF"),
        (MODEL, "SECURITY_CHALLENGE", "SECURITY_CHALLENGE"),
    ],
)
def test_after_submit_outcomes_go_to_reconciliation(
    tmp_path: Path, srv: RealServer, fast_phone: FlowWaits, transport: str, outcome: str, observation: str
) -> None:
    with rig(transport, _scenario(outcome=outcome)) as phone:
        _, _, detail = _run_case(tmp_path, srv, phone, fast_phone)
        assert detail["task"]["state"] == "RECONCILIATION_REQUIRED"
        assert detail["submission"]["observation"] == observation
        assert phone.submit_taps() == 1 and phone.payment_taps() == 0


@pytest.mark.parametrize("transport", [MODEL])
def test_lease_lost_mid_flow_stops_before_the_fence_and_holds(
    tmp_path: Path, srv: RealServer, fast_phone: FlowWaits, transport: str
) -> None:
    class LeaseRunsOut(HttpDeviceApi):
        def append_events(self, claim: Any, events: list[TaskEvent]) -> None:
            if any((e.step, e.outcome) == ("GATE_2", "STARTED") for e in events):
                srv.clock.advance(srv.settings.claim_lease_ttl + 1)  # type: ignore[union-attr]
            super().append_events(claim, events)

    with rig(transport) as phone:
        agent, _ref, detail = _run_case(tmp_path, srv, phone, fast_phone, api_cls=LeaseRunsOut)
        assert detail["submission"] is None and phone.submit_taps() == 0 and phone.payment_taps() == 0
        assert detail["task"]["state"] == "FAILED" and detail["task"]["state_reason"] == "LEASE_LOST"
        assert agent.journal.hold()
        # Held: the next task is not claimed until a person clears the hold.
        other = srv.add_task()
        with agent.running():
            threading.Event().wait(0.5)
        assert srv.state(other.id) == "PENDING"
        assert srv.device_row(agent.api._creds.device_id)["reported_state"] == "NEEDS_PERSON"
        assert phone.submit_taps() == 0 and phone.payment_taps() == 0


@pytest.mark.parametrize("transport", [MODEL])
def test_app_version_without_a_pack_refuses_to_claim(tmp_path: Path, transport: str) -> None:
    scenario = _scenario(app={"package": "com.xunmeng.pinduoduo", "version_name": "8.18.0", "version_code": 81800})
    with (
        RealServer(tmp_path, env={"CMBUYER_ALLOWED_APP_VERSIONS": "8.17.0,8.18.0"}) as srv,
        rig(transport, scenario) as phone,
    ):
        creds = srv.add_device()
        task = srv.add_task()
        agent = Agent(tmp_path, srv, creds, phone.phone)
        assert agent.run_once() == 3
        row = srv.device_row(creds.device_id)
        assert row["reported_state"] == "NO_PACK" and row["pdd_version"] == "8.18.0"
        assert row["pack_id"] == "NO_PACK"  # the devices page shows the runbook hint
        assert srv.state(task.id) == "PENDING" and phone.taps() == 0


def test_app_updated_under_the_agent_refuses_to_claim(tmp_path: Path) -> None:
    """The installed app changes to 8.18.0 after connect (phonesim ``version_change``), seen by the
    agent's ``dumpsys package`` through the real adbutils: no pack for it → no claim, no tap."""
    with RealServer(tmp_path, env={"CMBUYER_ALLOWED_APP_VERSIONS": "8.17.0,8.18.0"}) as srv, rig("adb") as phone:
        assert phone.sim is not None
        phone.sim.phone("sim-1").inject("version_change", version_name="8.18.0", version_code=81800)
        creds = srv.add_device()
        task = srv.add_task()
        agent = Agent(tmp_path, srv, creds, phone.phone)
        assert agent.run_once() == 3
        assert phone.fired() == ["version_change"]
        row = srv.device_row(creds.device_id)
        assert row["reported_state"] == "NO_PACK" and row["pdd_version_code"] == 81800
        assert row["pack_id"] == "NO_PACK"
        assert srv.state(task.id) == "PENDING" and phone.taps() == 0


def test_server_down_mid_flow_resumes_with_the_same_keys(
    tmp_path: Path, srv: RealServer, fast_phone: FlowWaits
) -> None:
    sim = SimPhone()

    class Outage(HttpDeviceApi):
        def append_events(self, claim: Any, events: list[TaskEvent]) -> None:
            if any((e.step, e.outcome) == ("GATE_2", "STARTED") for e in events):
                srv.stop()
                threading.Timer(0.8, srv.start).start()
            super().append_events(claim, events)

    _, _, detail = _run_case(tmp_path, srv, Rig(sim_phone(sim), model=sim), fast_phone, api_cls=Outage)
    assert detail["task"]["state"] == "WAITING_PAYMENT"
    assert sim.roles().count("submit") == 1
    got = steps(detail)
    assert len(got) == len(set((e["seq"]) for e in detail["events"]))
    assert got.count(("GATE_2", "STARTED")) == 1  # re-sent with its key: stored once


def test_fail_undelivered_is_resent_by_recovery_with_the_same_key(
    tmp_path: Path, srv: RealServer, fast_phone: FlowWaits
) -> None:
    """Gap fix: the server is down when `fail` is sent → the attempt stays FAIL_PENDING (not
    ABANDONED); the next start's recovery re-sends the stored fail and the task becomes FAILED with
    the original reason."""
    sim = SimPhone()

    class DownAtFail(HttpDeviceApi):
        def fail_attempt(self, claim: Any, failure: AttemptFailure) -> None:
            if not getattr(self, "downed", False):
                self.downed = True
                srv.stop()
            super().fail_attempt(claim, failure)

    creds = srv.add_device()
    ref = srv.add_task(max_total_price="20.00")
    agent = Agent(tmp_path, srv, creds, sim_phone(sim), api_cls=DownAtFail, waits=fast_phone)
    agent.api.retries = 1
    assert agent.run_once() == 0
    attempt = agent.journal.claims()[0]
    assert attempt.state == "FAIL_PENDING" and agent.journal.recovery_pending()
    srv.start()
    assert srv.state(ref.id) == "ORDERING"
    agent2 = Agent(tmp_path, srv, creds, sim_phone(sim), waits=fast_phone)
    t = threading.Thread(target=agent2.run_once, daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while agent2.journal.recovery_pending() and time.monotonic() < deadline:
        threading.Event().wait(0.05)
    agent2.runner.stop.set()
    t.join(10)
    detail = srv.detail(ref.id)
    assert detail["task"]["state"] == "FAILED" and detail["task"]["state_reason"] == "PRICE_OVER_CAP"
    assert agent2.journal.claim(attempt.attempt_id).state == "FAILED_REPORTED"
    assert "submit" not in sim.roles()


def test_permit_not_journaled_no_tap_reports_unknown_and_stops(
    tmp_path: Path, srv: RealServer, fast_phone: FlowWaits, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gap fix: the journal cannot record PERMIT_RECEIVED → no tap; the server hears UNKNOWN (a
    person reconciles: no order was created) and the agent stops (journal broken → fail closed)."""
    sim = SimPhone()
    creds = srv.add_device()
    ref = srv.add_task()
    agent = Agent(tmp_path, srv, creds, sim_phone(sim), waits=fast_phone)

    def broken(*a: Any, **k: Any) -> None:
        raise JournalError("journal write failed: OperationalError")

    monkeypatch.setattr(agent.journal, "record_permit", broken)
    with pytest.raises(JournalError):
        agent.run_once()
    detail = srv.detail(ref.id)
    assert detail["task"]["state"] == "RECONCILIATION_REQUIRED"
    assert detail["submission"]["observation"] == "UNKNOWN"
    assert "submit" not in sim.roles() and sim.app.orders == []


@pytest.mark.slow(seconds_per_iteration=5)
def test_runner_loop_several_tasks_each_exactly_once(tmp_path: Path, srv: RealServer, fast_phone: FlowWaits) -> None:
    """The long-running loop (not --once) against the real server: N tasks (env
    CMBUYER_SOAK_ITERATIONS, default 3), each on its own goods → N pending-payment orders, and per task
    exactly its one submit tap inside its fence (tests/tally.py)."""
    n = soak_iterations(3)
    scenario = _scenario()
    goods = goods_per_task(scenario, [GOODS_ID] * n)
    sim = SimPhone(scenario)
    creds = srv.add_device()
    sizes = ["M(建议100-115)", "L(建议115-130)"]
    refs = [srv.add_task(goods_id=goods[i], color="白色CHA(纯棉)", size=sizes[i % 2], quantity=1) for i in range(n)]
    agent = Agent(tmp_path, srv, creds, sim_phone(sim), waits=fast_phone)
    with agent.running():
        deadline = time.monotonic() + 30 + 5 * n
        while any(srv.state(r.id) != "WAITING_PAYMENT" for r in refs) and time.monotonic() < deadline:
            threading.Event().wait(0.1)
        threading.Event().wait(0.3)  # idle polls: nothing more to claim
    assert [srv.state(r.id) for r in refs] == ["WAITING_PAYMENT"] * n, (
        [srv.detail(r.id)["task"]["state_reason"] for r in refs],
        agent.lines[-15:],
    )
    assert sim.roles().count("submit") == n == len(sim.app.orders)
    goods_of = {r.id: g for r, g in zip(refs, goods, strict=True)}
    db = srv.settings.db_path  # type: ignore[union-attr]
    assert tally(sim.journal(), goods_of, fences(db, goods_of)) == []
    assert "payment" not in sim.roles()
