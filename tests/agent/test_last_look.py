# ruff: noqa: F811  (the fast_phone fixture is imported from test_real_server)
"""The last moment before the submit tap (docs/agent.md "The last moment before the tap"), end to end: the REAL server
(tests/agent/realserver.py) and the agent's runner with the real HttpDeviceApi, on the phone simulator —
the REAL uiautomator2 + adbutils against its adb server (``adb``) or its app model behind the real
PhoneAdapter (``model``, tests/agent/simphone.py).

Right after the server granted the fence (every gate passed, the permit is in hand) something changes on
the phone: a window appears over the submit control (a coupon dialog with ``立即领取``, a toast, another
app's floating window, a popup drawn inside the app's own window), or the payment row turns into
``先用后付`` / a balance mode. Each time: no submit tap (no tap at all after the fence), the journal goes
PERMIT_RECEIVED → NOT_TAPPED → RESULT_REPORTED and never records a tap intent, the server holds UNKNOWN
with the reason, and the task page says in Chinese that no tap was sent.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.agent import gates
from cmbuyer.agent.client import HttpDeviceApi
from cmbuyer.agent.journal import Journal
from cmbuyer.agent.model import Claim, SubmissionProof
from cmbuyer.agent.permit import SubmissionPermit
from cmbuyer.agent.waits import FlowWaits
from cmbuyer.phonesim.testing import running_sim

from .fakes import make_purchase, read_proof
from .realserver import RealServer
from .test_after_tap_sim import _task_page
from .test_flow_sim import _default
from .test_kill_restart import AgentProcess, _journal_state, _stop, _wait, kill_paused
from .test_real_server import Agent, Rig, fast_phone, rig  # noqa: F401  (fixture)

BOTH_VERSIONS = {"CMBUYER_ALLOWED_APP_VERSIONS": "8.17.0,8.22.0"}


def _order_sheet(version: str = "8.22.0") -> dict[str, Any]:
    """The default scenario on app 8.22.0: the real app's order sheet (options, quantity, payment row
    and ``提交订单 ¥…`` on one sheet); on 8.17.0 the SKU sheet, then the confirm page."""
    data = copy.deepcopy(_default())
    code = {"8.22.0": 82200, "8.17.0": 81700}[version]
    data["app"] = dict(data.get("app") or {}, package="com.xunmeng.pinduoduo", version_name=version, version_code=code)
    return data


def _after_fence(change: Callable[[], None]) -> type[HttpDeviceApi]:
    """An HttpDeviceApi that runs ``change`` on the phone right after the server granted the fence."""

    class Api(HttpDeviceApi):
        def create_submission_fence(self, claim: Claim, proof: SubmissionProof) -> SubmissionPermit:
            permit = super().create_submission_fence(claim, proof)
            change()
            return permit

    return Api


def _change(phone: Rig, adb_spec: dict[str, Any]) -> Callable[[], None]:
    """The same change on either transport: a fault injected at run time into the simulator, or the
    app model changed directly."""

    def apply() -> None:
        if phone.sim is not None:
            phone.sim.phone("sim-1").inject(adb_spec)
            return
        assert phone.model is not None
        app = phone.model.app
        if adb_spec["kind"] == "overlay":
            app.overlays.append(adb_spec["window"])
        elif adb_spec["kind"] == "popup":
            app.show_popup(adb_spec["popup"])
        else:
            phone.model.cfg.payment_mode = adb_spec["mode"]

    return apply


def _no_tap_case(
    tmp_path: Path,
    waits: FlowWaits,
    transport: str,
    adb_spec: dict[str, Any],
    reason: str,
    page: bool,
    version: str = "8.22.0",
) -> None:
    with RealServer(tmp_path, env=BOTH_VERSIONS) as srv, rig(transport, _order_sheet(version)) as phone:
        creds = srv.add_device()
        task = srv.add_task()
        agent = Agent(tmp_path, srv, creds, phone.phone, api_cls=_after_fence(_change(phone, adb_spec)), waits=waits)
        points: list[str] = []
        agent.journal.commit_hook = points.append
        taps_at_fence: list[int] = []
        fence = agent.api.create_submission_fence

        def counted(claim: Claim, proof: SubmissionProof) -> SubmissionPermit:
            taps_at_fence.append(phone.taps())
            return fence(claim, proof)

        agent.api.create_submission_fence = counted  # type: ignore[method-assign]
        assert agent.run_once() == 0
        # the phone: the gates' taps happened, then nothing — no submit tap, no tap on the overlay
        assert taps_at_fence and phone.taps() == taps_at_fence[0]
        assert phone.submit_taps() == 0 and phone.payment_taps() == 0 and phone.orders() == 0
        if phone.sim is not None:
            assert phone.fired() == [adb_spec["kind"]]
        # the agent's journal: no tap intent was ever recorded; NOT_TAPPED, then reported
        assert "TAP_INTENT_RECORDED" not in points and "TAPPED" not in points
        assert points[points.index("PERMIT_RECEIVED") :][:2] == ["PERMIT_RECEIVED", "NOT_TAPPED"]
        # a cause that stays (an overlay, a flipped payment row) would do this to every task: the phone holds
        assert reason in (agent.journal.hold() or "")
        sub = agent.journal.submission(agent.journal.claims()[0].attempt_id)
        assert sub is not None and (sub.phase, sub.observation, sub.observation_reason) == (
            "RESULT_REPORTED",
            "UNKNOWN",
            reason,
        )
        # the server: UNKNOWN with the reason, a person reconciles; the SUBMIT_TAP event says no tap
        detail = srv.detail(task.id)
        assert detail["task"]["state"] == "RECONCILIATION_REQUIRED"
        assert detail["submission"]["observation"] == "UNKNOWN"
        assert detail["submission"]["observation_reason"] == reason
        (tap_event,) = [e for e in detail["events"] if e["step"] == "SUBMIT_TAP"]
        assert tap_event["outcome"] == "FAILED"
        if page:
            html = _task_page(srv, task.id)
            assert reason in html and 'id="no-tap-sent"' in html
            assert "设备没有点击“提交订单”" in html and "手机没有发出点击" in html


@pytest.mark.parametrize(
    "transport,adb_spec,page",
    [
        # the rehearsal finding: a coupon dialog window whose 立即领取 lies where the submit tap would land
        pytest.param("adb", {"kind": "overlay", "window": "coupon"}, True, id="coupon-window-adb"),
        pytest.param("model", {"kind": "overlay", "window": "toast"}, False, id="toast-window"),
        pytest.param("model", {"kind": "overlay", "window": "foreign"}, False, id="other-app-window"),
        # a popup drawn inside the app's own window, after the sheet (drawing order decides)
        pytest.param("model", {"kind": "popup", "popup": "coupon"}, False, id="popup-in-app-window"),
    ],
)
def test_something_over_the_submit_control_after_the_last_gate_means_no_tap(
    tmp_path: Path, fast_phone: FlowWaits, transport: str, adb_spec: dict[str, Any], page: bool
) -> None:
    _no_tap_case(tmp_path, fast_phone, transport, adb_spec, "NOT_TAPPED_OBSCURED", page)


def test_a_coupon_window_over_the_confirm_page_means_no_tap(tmp_path: Path, fast_phone: FlowWaits) -> None:
    """The same on app 8.17.0's layout (SKU sheet, then the confirm page with the submit control)."""
    _no_tap_case(
        tmp_path, fast_phone, "model", {"kind": "overlay", "window": "coupon"}, "NOT_TAPPED_OBSCURED", False, "8.17.0"
    )


def test_nothing_changed_one_tap_and_the_window_is_measured(tmp_path: Path, fast_phone: FlowWaits) -> None:
    """The control case: nothing changes after the fence → the last look passes, exactly one submit tap,
    and the SUBMIT_TAP event carries the measured dump → tap window (docs/agent.md)."""
    with RealServer(tmp_path, env=BOTH_VERSIONS) as srv, rig("model", _order_sheet()) as phone:
        task = srv.add_task()
        agent = Agent(tmp_path, srv, srv.add_device(), phone.phone, waits=fast_phone)
        assert agent.run_once() == 0
        assert phone.submit_taps() == 1 and phone.payment_taps() == 0
        (tap_event,) = [e for e in srv.detail(task.id)["events"] if e["step"] == "SUBMIT_TAP"]
        assert tap_event["outcome"] == "OK"
        assert re.match(r"tap sent \d+ ms after the last dump began; observed ", tap_event["summary"])


@pytest.mark.parametrize(
    "transport,mode,page",
    [
        pytest.param("adb", "pay_later", True, id="pay-later-adb"),  # 使用#先用后付 (and 0元下单)
        pytest.param("model", "duoduo_balance", False, id="balance"),  # 使用多多支付余额¥5.05
    ],
)
def test_payment_row_changed_after_gate_3_means_no_tap(
    tmp_path: Path, fast_phone: FlowWaits, transport: str, mode: str, page: bool
) -> None:
    _no_tap_case(
        tmp_path,
        fast_phone,
        transport,
        {"kind": "payment_mode_change", "mode": mode},
        "NOT_TAPPED_SCREEN_CHANGED",
        page,
    )


def test_every_reading_the_fence_request_carried_is_compared() -> None:
    """gates.fenced_differences: the pre-tap reading against the fence request, one name per reading
    that differs; a reading that cannot be read (None) differs too."""
    proof = read_proof(make_purchase().task, Decimal("12.88"))
    same = gates.Gate3Reading(
        selected=dict(proof.selected_options),  # 颜色, 尺码: per dimension by the task's names
        unit_price=proof.gate3_unit_price,
        quantity=proof.quantity_read,
        total=proof.confirm_page_amount,
        submit_controls=1,
    )
    assert gates.fenced_differences(same, "微信支付", proof) == []
    changes: list[tuple[dict[str, Any], str | None, list[str]]] = [
        ({"selected": {**dict(proof.selected_options), "尺码": "XL"}}, "微信支付", ["option 尺码"]),
        ({"selected": {**dict(proof.selected_options), "颜色": None}}, "微信支付", ["option 颜色"]),
        ({"selected": {**dict(proof.selected_options), "款式": "短袖"}}, "微信支付", ["option 款式"]),
        ({"unit_price": Decimal("12.87")}, "微信支付", ["unit_price"]),
        ({"quantity": None}, "微信支付", ["quantity"]),
        ({"total": proof.confirm_page_amount + Decimal("0.01")}, "微信支付", ["total"]),
        ({"submit_controls": 2}, "微信支付", ["submit_controls"]),
        ({}, "支付宝", ["payment_mode"]),
        ({}, None, ["payment_mode"]),  # the payment-mode gate refused the row (先用后付, a balance, …)
        ({"unit_price": None, "submit_controls": 0}, None, ["unit_price", "submit_controls", "payment_mode"]),
    ]
    for change, mode, names in changes:
        assert gates.fenced_differences(replace(same, **change), mode, proof) == names, change


def test_a_window_over_the_submit_control_before_gate_3_stops_before_the_fence(
    tmp_path: Path, fast_phone: FlowWaits
) -> None:
    """Gate 3 hit-tests too (gates.submit_on_top): a floating window already parked over the submit control
    is found before the fence — the task FAILS with POPUP_UNHANDLED (nothing fenced, nothing spent, no tap
    on the submit control) and the phone holds."""
    with RealServer(tmp_path, env=BOTH_VERSIONS) as srv, rig("model", _order_sheet()) as phone:
        assert phone.model is not None
        phone.model.app.overlays.append("foreign")
        task = srv.add_task()
        agent = Agent(tmp_path, srv, srv.add_device(), phone.phone, waits=fast_phone)
        assert agent.run_once() == 0
        assert phone.submit_taps() == 0 and phone.payment_taps() == 0 and phone.orders() == 0
        detail = srv.detail(task.id)
        assert (detail["task"]["state"], detail["task"]["state_reason"]) == ("FAILED", "POPUP_UNHANDLED")
        assert detail["submission"] is None
        assert "POPUP_UNHANDLED" in (agent.journal.hold() or "")


def test_sigkill_right_after_not_tapped_then_restart_reports_no_tap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real ``cmbuyer-agent run`` process (tests/agent/test_kill_restart.py's harness): the coupon window
    appears while the server grants the fence; the agent journals NOT_TAPPED and is SIGKILLed right there.
    The restarted agent reports UNKNOWN + NOT_TAPPED_OBSCURED from its journal (never "maybe tapped"), taps
    nothing, and holds the phone."""
    from cmbuyer.server.services import fence as fence_service

    with RealServer(tmp_path, env=BOTH_VERSIONS) as srv, running_sim(_order_sheet(), set_env=False) as sim:
        grant = fence_service.create_fence

        def granted(*args: Any, **kwargs: Any) -> Any:
            answer = grant(*args, **kwargs)
            sim.phone("sim-1").inject("overlay", window="coupon")  # before the answer reaches the phone
            return answer

        monkeypatch.setattr(fence_service, "create_fence", granted)
        task = srv.add_task()
        agent = AgentProcess(tmp_path, srv, sim.port)
        first = agent.start(pause_after="NOT_TAPPED")
        kill_paused(agent, first, "NOT_TAPPED", lambda: "NOT_TAPPED" in _journal_state(agent.journal).get("phases", []))
        assert srv.state(task.id) == "SUBMITTING"  # fenced, nothing reported yet
        second = agent.start()
        try:
            _wait(lambda: srv.state(task.id) == "RECONCILIATION_REQUIRED", second, 60, "the recovered result")
            _wait(lambda: "心跳：状态".encode() in agent.log.read_bytes(), second, 60, "a heartbeat")
            assert _stop(second) == 0
        finally:
            if second.poll() is None:
                second.kill()
                second.wait()
        journal = sim.journal("sim-1")
        assert journal.taps("submit") == [] and not [t for t in journal.taps() if t["role"] == "overlay"]
        submission = srv.detail(task.id)["submission"]
        assert (submission["observation"], submission["observation_reason"]) == ("UNKNOWN", "NOT_TAPPED_OBSCURED")
        state = _journal_state(agent.journal)
        assert state["phases"] == ["RESULT_REPORTED"] and state["observations"] == ["UNKNOWN"]
        assert "NOT_TAPPED_OBSCURED" in (Journal(agent.journal).hold() or "")
