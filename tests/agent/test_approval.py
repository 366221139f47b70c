"""The supervised wait before the fence (agent/approval.py) on the phone simulator through
the REAL uiautomator2 + adbutils (cmbuyer.phonesim.testing.running_sim), with the real PurchaseFlow,
journal, outbox and lease keeper.

The server side is the in-process fake of tests/agent/fake_approval.py: the real approval routes are
being built on another branch in parallel (the lead adds the real-server end-to-end test at merge);
the fake enforces the contract's rules (supervised attempt, the gate-3 screenshot of this attempt, a
fence without a matching APPROVED approval → 409 approval_required).

"No tap while waiting" is read from the simulator's own journal: the taps it saw when the approval
request arrived and when the flow left the wait (fence or stop) must be the same list.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.agent import approval
from cmbuyer.agent.flow import FlowResult, PurchaseFlow
from cmbuyer.agent.journal import Journal
from cmbuyer.agent.lease import LeaseKeeper
from cmbuyer.agent.model import ClaimedPurchase
from cmbuyer.agent.phone.adapter import PhoneAdapter
from cmbuyer.agent.waits import FlowWaits
from cmbuyer.phonesim.journal import submit_taps
from cmbuyer.phonesim.server import PhoneSim
from cmbuyer.phonesim.testing import running_sim
from tests.agent.packtools import pack_for_version
from tests.soak import configured

from .fake_approval import SupervisedApi, supervised_purchase
from .fakes import journal_claim

GOODS = "937122477375"


WAITS = FlowWaits(screen=5.0, observe=5.0)  # real uiautomator2 against the simulator: shorter than production's


FAST = approval.ApprovalSettings(timeout_seconds=20, poll_seconds=0.3)  # what the CLI would pass from its settings


@dataclass
class Rig:
    sim: PhoneSim
    phone: PhoneAdapter
    journal: Journal
    api: SupervisedApi
    purchase: ClaimedPurchase
    taps_at_request: list[dict[str, Any]] | None = None
    taps_at_fence: list[dict[str, Any]] | None = None
    settings: approval.ApprovalSettings = FAST  # the wait's timeout and poll interval

    def taps(self) -> list[dict[str, Any]]:
        return [dict(e) for e in self.sim.journal("sim-1").taps()]

    def run(self, *, fence_margin: float = 5.0, stop: threading.Event | None = None) -> FlowResult:
        c = self.purchase.claim
        journal_claim(self.journal, c, task_version=c.task_version, claim_generation=c.claim_generation)
        lease = LeaseKeeper(self.api, c, self.purchase.server_now).start()
        version = self.phone.app_version()
        assert version is not None
        flow = PurchaseFlow(
            phone=self.phone,
            pack=pack_for_version(version.name, version.code),
            sink=self.api,
            journal=self.journal,
            waits=WAITS,
            stop=stop,
            lease=lease,
            fence_margin=fence_margin,
            approval_settings=self.settings,
        )
        try:
            return flow.run(self.purchase)
        finally:
            lease.stop()

    def steps(self) -> list[tuple[str, str, str | None]]:
        return [(e.step, e.outcome, e.reason_code) for e in self.api.events if e.step.startswith("APPROVAL")]


@pytest.fixture
def rig(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Rig]:
    opts = getattr(request, "param", {})
    with running_sim(opts.get("scenario")) as sim:
        purchase = supervised_purchase(**opts.get("purchase", {}))
        journal = Journal(tmp_path / "j.sqlite3")
        api = SupervisedApi([purchase], keys=journal, lease_ttl=opts.get("lease_ttl", 60.0))
        api.claim_next(_session())  # hand the claim out as the runner would
        r = Rig(sim, PhoneAdapter.connect("sim-1"), journal, api, purchase)
        previous = api.on_approval_request

        def at_request(approval_id: str) -> None:
            r.taps_at_request = r.taps()
            if previous:
                previous(approval_id)

        api.on_approval_request = at_request
        api.on_fence = lambda: setattr(r, "taps_at_fence", r.taps())
        yield r
        journal.close()


def _session() -> Any:
    from cmbuyer.agent.model import Session

    return Session("c3a1f1d2-2b7e-4a53-9d3c-0c2b8f1e4a11")


def _wire_on_request(r: Rig, fn: Any) -> None:
    """Run ``fn(approval_id)`` once the approval request is stored (after the tap snapshot)."""
    snapshot = r.api.on_approval_request

    def hook(approval_id: str) -> None:
        snapshot(approval_id)
        fn(approval_id)

    r.api.on_approval_request = hook


def _no_tap_during_wait(r: Rig) -> None:
    assert r.taps_at_request is not None, "no approval was requested"
    assert r.taps() == r.taps_at_request, "the phone was tapped while waiting"


def _submit_taps(r: Rig) -> list[dict[str, Any]]:
    return submit_taps(r.sim.journal("sim-1").entries())


def _fenced_count(r: Rig) -> int:
    return len(r.api.fence_bodies)


def _stopped_before_the_fence(r: Rig, result: FlowResult, reason_code: str) -> None:
    """The attempt failed with ``reason_code`` before any fence request, and the phone was not tapped while it
    waited."""
    assert (result.outcome, result.reason_code) == ("FAILED", reason_code)
    assert _fenced_count(r) == 0
    _no_tap_during_wait(r)


# --- approve / reject ---------------------------------------------------------------------------
def test_waits_then_completes_once_a_person_approves(rig: Rig) -> None:
    def approve_later(approval_id: str) -> None:
        def run() -> None:
            deadline = time.monotonic() + 20
            while rig.api.status_reads < 3 and time.monotonic() < deadline:  # the phone is really waiting
                time.sleep(0.05)
            rig.api.decide("APPROVED", approval_id)

        threading.Thread(target=run, daemon=True).start()

    _wire_on_request(rig, approve_later)
    result = rig.run()
    assert result.outcome == "SUBMITTED", rig.api.fails
    # nothing was tapped between the approval request and the fence; then exactly one submit tap
    assert rig.taps_at_fence == rig.taps_at_request
    journal = rig.sim.journal("sim-1")
    journal.assert_single_submit_tap()
    journal.assert_no_payment_taps()
    assert rig.api.status_reads >= 3
    # the approval named this attempt's gate-3 screenshot and carried the fence body's readings
    (request,) = rig.api.approval_requests
    assert rig.api.assets[request["screenshot_asset_id"]] == (rig.purchase.claim.attempt_id, "CONFIRM_PAGE_GATE_3")
    assert request["readings"] == rig.api.fence_bodies[0]
    assert request["readings"]["gate3_unit_price"] == "12.88" and request["readings"]["quantity_read"] == 2
    assert rig.steps() == [
        ("APPROVAL_REQUEST", "OK", None),
        ("APPROVAL_WAIT", "STARTED", None),
        ("APPROVAL_WAIT", "OK", None),
    ]
    # the approval key was journaled for the request and forgotten after the answer
    assert rig.journal.key_scopes("approval") == []


def test_rejection_fails_before_the_fence_with_no_tap(rig: Rig) -> None:
    rig.api.decide_after(0.8, "REJECTED")
    result = rig.run()
    assert (result.outcome, result.reason_code, result.tapped) == ("FAILED", "REJECTED_BY_REVIEWER", False)
    assert _fenced_count(rig) == 0 and rig.api.fences == {}
    assert [f.reason_code for f in rig.api.fails] == ["REJECTED_BY_REVIEWER"]
    _no_tap_during_wait(rig)
    assert _submit_taps(rig) == []
    assert rig.sim.phone("sim-1").orders == []
    assert rig.steps()[-1] == ("APPROVAL_WAIT", "FAILED", "REJECTED_BY_REVIEWER")


def test_unsupervised_attempt_goes_straight_to_the_fence(tmp_path: Path) -> None:
    with running_sim() as sim:
        purchase = supervised_purchase(supervised=False)
        journal = Journal(tmp_path / "j.sqlite3")
        api = SupervisedApi([purchase], keys=journal)
        api.claim_next(_session())
        r = Rig(sim, PhoneAdapter.connect("sim-1"), journal, api, purchase)
        result = r.run()
        assert result.outcome == "SUBMITTED" and api.approval_requests == [] and r.steps() == []
        journal.close()


# --- the screen changes while waiting ---------------------------------------------------------------
def test_price_change_while_waiting_stops_before_the_fence(rig: Rig) -> None:
    _wire_on_request(
        rig,
        lambda _id: rig.sim.phone("sim-1").inject(
            "price_change", goods_id=GOODS, price="11.88", options=["黑色CHA(纯棉)", "M(建议100-115)"]
        ),
    )
    result = rig.run()
    _stopped_before_the_fence(rig, result, "SCREEN_CHANGED_WHILE_WAITING")
    assert _submit_taps(rig) == []


def test_popup_while_waiting_is_not_dismissed(rig: Rig) -> None:
    _wire_on_request(rig, lambda _id: rig.sim.phone("sim-1").inject("popup", popup="coupon"))
    result = rig.run()
    _stopped_before_the_fence(rig, result, "SCREEN_CHANGED_WHILE_WAITING")  # a dismissal would be a tap


def test_a_voided_approval_stops_before_the_fence(rig: Rig) -> None:
    """The server voids a live approval when the attempt closes under the phone (e.g. an admin reset):
    the claim is gone, as with a refused lease renewal."""
    rig.api.decide_after(0.5, "VOID")
    result = rig.run()
    _stopped_before_the_fence(rig, result, "LEASE_LOST")


# --- the 8.22.0 order sheet: options, stepper and payment row on the screen with the submit control ---------
ORDER_SHEET = {
    "scenario": "order_sheet",
    "purchase": {
        "goods_id": "710000000001",
        "sku_color": "黑色",
        "sku_size": "M",
        "quantity": 1,
        "product_url": "https://mobile.yangkeduo.com/goods.html?goods_id=710000000001",
    },
}


@pytest.mark.parametrize("rig", [ORDER_SHEET], indirect=True)
def test_order_sheet_waits_then_hands_off_once_approved(rig: Rig) -> None:
    rig.api.decide_after(0.8, "APPROVED")
    result = rig.run()
    assert result.outcome == "EXTERNAL_PAYMENT_HANDOFF", rig.api.fails  # the scenario's WeChat cashier
    assert rig.taps_at_fence == rig.taps_at_request
    rig.sim.journal("sim-1").assert_single_submit_tap()
    (request,) = rig.api.approval_requests
    assert request["readings"]["payment_mode"] == "微信支付" and request["readings"] == rig.api.fence_bodies[0]


@pytest.mark.parametrize("rig", [ORDER_SHEET], indirect=True)
def test_payment_mode_switched_while_waiting_stops_before_the_fence(rig: Rig) -> None:
    """The payment row turns to 先用后付 (an A/B switch) while the phone waits: a changed reading, so the
    wait stops — an approval given for 微信支付 must never reach a pay-later sheet."""
    _wire_on_request(rig, lambda _id: rig.sim.phone("sim-1").inject("payment_mode_change", mode="pay_later"))
    rig.api.decide_after(1.5, "APPROVED")
    result = rig.run()
    _stopped_before_the_fence(rig, result, "SCREEN_CHANGED_WHILE_WAITING")
    assert _submit_taps(rig) == []


# --- time: the wait's own timeout, the authorization, the lease ---------------------------------------
def test_no_decision_times_out_before_the_fence(rig: Rig) -> None:
    """Nobody decides within the wait's timeout (1.5 s here): APPROVAL_TIMEOUT before the fence, no tap."""
    rig.settings = dataclasses.replace(FAST, timeout_seconds=1.5)
    started = time.monotonic()
    result = rig.run()
    assert (result.outcome, result.reason_code) == ("FAILED", "APPROVAL_TIMEOUT")
    assert time.monotonic() - started < 30
    assert _fenced_count(rig) == 0
    _no_tap_during_wait(rig)
    assert rig.api.status_reads >= 2


@pytest.mark.parametrize("rig", [{"purchase": {"authorization_seconds": 11}}], indirect=True)
def test_authorization_ending_during_the_wait_stops_cleanly(rig: Rig) -> None:
    """The authorization ends 11 s after the claim; with a 5 s fence margin the wait must stop by
    ~6 s after the claim, before the fence, without a tap, and say so as APPROVAL_TIMEOUT."""
    result = rig.run()
    assert (result.outcome, result.reason_code) == ("FAILED", "APPROVAL_TIMEOUT")
    assert "authorization" in rig.api.fails[0].summary
    assert _fenced_count(rig) == 0
    _no_tap_during_wait(rig)


def _long_wait_seconds() -> float:
    """The "2-minute wait" of a supervised order under `make soak` (CMBUYER_SOAK_ITERATIONS set),
    else a wait several times the short lease used here."""
    return 120.0 if configured() else 8.0


@pytest.mark.slow(seconds_per_iteration=0)
@pytest.mark.parametrize("rig", [{"lease_ttl": 2.0, "purchase": {"lease_ttl": 2.0}}], indirect=True)
def test_the_lease_stays_alive_during_a_long_wait(rig: Rig) -> None:
    """A 2 s lease (renewed every 2/3 s by the lease keeper) over a wait of 4+ leases: the lease keeper
    keeps renewing, the wait sees the lease alive throughout, and the approval still leads to the fence."""
    wait = _long_wait_seconds()
    rig.settings = dataclasses.replace(FAST, timeout_seconds=wait + 60)
    _wire_on_request(rig, lambda _id: setattr(rig.api, "renewals_at_request", rig.api.renewals))
    rig.api.decide_after(wait, "APPROVED")
    result = rig.run(fence_margin=0.5)
    assert result.outcome == "SUBMITTED", rig.api.fails
    renewed_while_waiting = rig.api.renewals - rig.api.renewals_at_request  # type: ignore[attr-defined]
    assert renewed_while_waiting >= int(wait / 2.0 * 3 * 0.6), renewed_while_waiting
    assert rig.taps_at_fence == rig.taps_at_request


@pytest.mark.parametrize("rig", [{"lease_ttl": 2.0, "purchase": {"lease_ttl": 2.0}}], indirect=True)
def test_a_refused_renewal_during_the_wait_is_lease_lost(rig: Rig) -> None:
    def refuse_soon(_id: str) -> None:
        threading.Timer(0.5, setattr, (rig.api, "lease_ok", False)).start()

    _wire_on_request(rig, refuse_soon)
    result = rig.run(fence_margin=0.5)
    _stopped_before_the_fence(rig, result, "LEASE_LOST")


# --- a stop request while waiting -------------------------------------------------------------------
def test_sigterm_while_waiting_stops_without_a_tap(tmp_path: Path) -> None:
    """The real runner with its real signal handler: SIGTERM arrives while the phone waits for a
    person → the wait wakes at once, the attempt fails with SHUTDOWN before the fence, no tap."""
    from cmbuyer.agent.runner import Runner, RunnerConfig

    with running_sim() as sim:
        journal = Journal(tmp_path / "j.sqlite3")
        api = SupervisedApi([supervised_purchase()], keys=journal)
        phone = PhoneAdapter.connect("sim-1")
        lines: list[str] = []
        runner = Runner(
            RunnerConfig("sim-1", once=True, poll_seconds=0.1, waits=WAITS, approval=FAST),
            phone,
            api,
            journal,
            lines.append,
        )
        seen: dict[str, Any] = {}

        def on_request(_id: str) -> None:
            seen["taps"] = list(sim.journal("sim-1").taps())

            def term() -> None:
                time.sleep(0.7)
                seen["sent"] = time.monotonic()
                os.kill(os.getpid(), signal.SIGTERM)

            threading.Thread(target=term, daemon=True).start()

        api.on_approval_request = on_request
        old = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
        runner.install_signals()
        try:
            assert runner.run() == 0
        finally:
            signal.signal(signal.SIGTERM, old[0])
            signal.signal(signal.SIGINT, old[1])
        assert [f.reason_code for f in api.fails] == ["SHUTDOWN"]
        assert api.fence_bodies == [] and submit_taps(sim.journal("sim-1").entries()) == []
        assert list(sim.journal("sim-1").taps()) == seen["taps"]
        assert approval.WAITING_LINE in lines
        # claim-next named the pack in use (the server keys supervision on the device–pack pair)
        version = phone.app_version()
        assert version is not None
        assert api.claim_pack_ids == [pack_for_version(version.name, version.code).id]
        journal.close()


# --- settings and the no-tap rule on the source -----------------------------------------------------
ENV_TIMEOUT, ENV_POLL = "CMBUYER_AGENT_APPROVAL_TIMEOUT_SECONDS", "CMBUYER_AGENT_APPROVAL_POLL_SECONDS"


def test_settings_from_env() -> None:
    from cmbuyer.agent.settings import load_agent_settings

    assert load_agent_settings(environ={}).approval == approval.ApprovalSettings(600.0, 3.0)
    s = load_agent_settings(environ={ENV_TIMEOUT: "120", ENV_POLL: " 0.5 "}).approval
    assert (s.timeout_seconds, s.poll_seconds) == (120.0, 0.5)
    for bad in (
        {ENV_TIMEOUT: "0"},
        {ENV_TIMEOUT: "nan"},
        {ENV_POLL: "-1"},
        {ENV_POLL: "3s"},
        {ENV_TIMEOUT: "2", ENV_POLL: "3"},
        {ENV_TIMEOUT: "inf"},
    ):
        with pytest.raises(ValueError, match="CMBUYER_AGENT_APPROVAL"):
            load_agent_settings(environ=bad)


def test_the_wait_step_cannot_tap() -> None:
    """approval.py calls nothing on the phone but read_stable, imports neither permit, submit,
    client nor flow, and never reaches the pop-up dismissal or the back-out."""
    source = Path(approval.__file__).read_text(encoding="utf-8")
    tree = ast.parse(source)
    calls = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    phone_calls = {
        n.func.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Attribute)
        and n.func.value.attr == "phone"
    }
    assert phone_calls == {"read_stable"}
    assert not calls & {
        "tap_node",
        "tap",
        "swipe_in_list",
        "press_back",
        "dismiss_popups",
        "back_out",
        "submit_tap_once",
        "open_goods",
        "wait_for_screen",
        "wait_for_any",
    }
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not imported & {"cmbuyer.agent.permit", "cmbuyer.agent.submit", "cmbuyer.agent.client", "cmbuyer.agent.flow"}


def test_unattended_waits_hold_the_phone_after_the_failure_limit() -> None:
    """A wait nobody answers is not a phone-level stop (no visit to the phone host for an absent reviewer),
    and not a crash; three pre-fence endings in a row still hold the phone (REPEATED_FAILURES), so an
    unwatched phone stops instead of failing the whole queue (docs/agent.md "Supervised orders")."""
    from cmbuyer.agent.holds import AttemptEnd, HoldPolicy, Scope, Streaks, scope_of, settle

    assert scope_of("REJECTED_BY_REVIEWER") is Scope.TASK
    assert scope_of("APPROVAL_TIMEOUT") is scope_of("SCREEN_CHANGED_WHILE_WAITING") is Scope.ATTEMPT
    streaks, holds = Streaks(), []
    for code in ("APPROVAL_TIMEOUT", "SCREEN_CHANGED_WHILE_WAITING", "APPROVAL_TIMEOUT"):
        streaks, hold = settle(streaks, AttemptEnd("FAILED", code, fenced=False), HoldPolicy())
        holds.append(hold)
        assert streaks.crashes == 0
    assert holds[:2] == [None, None] and holds[2] is not None and holds[2].startswith("REPEATED_FAILURES")
    # a stop a person asked for while the phone waited breaks no streak and adds none
    assert settle(Streaks(0, 2), AttemptEnd("FAILED", "SHUTDOWN", fenced=False), HoldPolicy()) == (Streaks(0, 2), None)


# --- a server answer about something else (breaker: fail closed, never ask the fence on it) ---------
@pytest.mark.parametrize("state", ["APPROVED", "WAITING"])
def test_a_status_answer_naming_another_approval_stops_before_the_fence(rig: Rig, state: str) -> None:
    """The status route answers for another approval id (a server or proxy bug): the wait never
    treats that answer as this approval's decision."""
    real = rig.api.approval_status

    def other(claim: Any, approval_id: str) -> Any:
        status = real(claim, approval_id)
        return dataclasses.replace(
            status,
            approval_id=str(uuid.uuid4()),
            state=state,
            decided_at=status.server_now if state == "APPROVED" else None,
        )

    rig.api.approval_status = other  # type: ignore[method-assign]
    result = rig.run()
    assert (result.outcome, result.reason_code) == ("FAILED", "SERVER_UNREACHABLE")
    assert ("APPROVAL_WAIT", "OK", None) not in rig.steps()
    assert _fenced_count(rig) == 0  # no fence request at all (the fake records each one)
    _no_tap_during_wait(rig)
