"""Pacing without weakening the phone rules: stable reads reuse the last consecutive dumps
only while nothing was tapped, every tap is preceded by two fresh equal dumps, gate screenshots are
taken before the next tap, and the outbox (async events/uploads) is drained before the fence."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from cmbuyer.agent.errors import DumpUnstable, FlowStop, ServerUnreachable
from cmbuyer.agent.flow import PurchaseFlow
from cmbuyer.agent.journal import Journal
from cmbuyer.agent.model import AssetRef, ScreenshotAsset, SubmissionProof, TaskEvent
from cmbuyer.agent.outbox import Outbox
from cmbuyer.agent.phone.adapter import Deadlines, PhoneAdapter
from cmbuyer.agent.screens import readers
from cmbuyer.agent.waits import FlowWaits
from cmbuyer.phonesim.testing import adbutils_leaks_ignored, running_sim
from tests.agent.packtools import shipped_packs

from .fakes import FakeServer, journal_claim, make_purchase
from .simphone import SimPhone

# the phone pacing and the whole order's time budget are measured in wall time: alone (pytest -m serial)
pytestmark = pytest.mark.serial

GOODS = "937122477375"


@pytest.fixture
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    import cmbuyer.agent.phone.adapter as adapter

    monkeypatch.setattr(adapter.time, "sleep", lambda s: None)


def _product_phone() -> tuple[SimPhone, PhoneAdapter]:
    sim = SimPhone()
    phone = PhoneAdapter("sim-1", sim, sim, Deadlines(dump=5, shell=5, screenshot=5, tap=5))
    phone.open_goods(GOODS)
    return sim, phone


# --- read_stable: reuse only consecutive dumps taken since the last action ------------------------
def test_stable_read_reuses_the_last_pair_until_an_action(no_sleep: None) -> None:
    pack = shipped_packs()[0]
    sim, phone = _product_phone()

    def screen(d: Any) -> str:
        return readers.recognize(d, pack)

    assert phone.read_stable(screen)[0] == "product" and sim.dumps == 2
    # the same two consecutive dumps agree on another reading: no new dump
    buy = pack.buy_paths["single"]
    (_, dump) = phone.read_stable(lambda d: tuple(n.signature() for n in buy.find(d)))
    assert sim.dumps == 2
    # polling for a change needs a new dump (the latest may be the first of the pair)
    assert phone.read_stable(screen, new_dump=True)[0] == "product" and sim.dumps == 3
    # a tap forgets every remembered dump: the next reading comes from two fresh dumps
    phone.tap_node(dump, buy.find(dump)[0])
    assert phone.read_stable(screen)[0] == "sku_panel" and sim.dumps == 5
    phone.press_back()
    assert phone.read_stable(screen)[0] == "product" and sim.dumps == 7
    phone.open_goods(GOODS)
    phone.read_stable(screen)
    assert sim.dumps == 9
    phone.dump()  # a lone dump breaks the chain: it is never paired with an older one
    phone.read_stable(lambda d: len(d.nodes))
    assert sim.dumps == 12  # the lone dump + two new ones


def test_remembered_dumps_that_disagree_or_raise_lead_to_fresh_dumps(no_sleep: None) -> None:
    sim, phone = _product_phone()
    phone.read_stable(lambda d: "x")
    assert sim.dumps == 2
    # different readings on the two remembered dumps: the latest one is the first of the pair
    seen = iter(range(100))
    phone.read_stable(lambda d: 0 if next(seen) else 1)
    assert sim.dumps == 3
    # a reader that raises on a remembered dump: start afresh (two new dumps)
    calls = {"n": 0}

    def picky(d: Any) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            raise FlowStop("not yet", "SCREEN_UNRECOGNIZED")
        return 1

    phone.read_stable(picky)
    assert sim.dumps == 5


def test_never_two_equal_dumps_is_dump_unstable(no_sleep: None) -> None:
    sim, phone = _product_phone()
    counter = iter(range(1000))
    with pytest.raises(DumpUnstable):
        phone.read_stable(lambda d: next(counter), attempts=4)
    assert sim.dumps == 4


# --- outbox -------------------------------------------------------------------------------------
class _Sink:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail_events = False

    def append_events(self, claim: Any, events: list[TaskEvent]) -> None:
        self.gate.wait(5)
        if self.fail_events:
            raise ServerUnreachable("down")
        self.calls.append(("events", [e.step for e in events]))

    def upload_screenshot(self, claim: Any, asset: ScreenshotAsset) -> AssetRef:
        self.calls.append(("upload", asset.kind))
        return AssetRef("a", "b")


def test_outbox_sends_in_order_batching_consecutive_events() -> None:
    sink = _Sink()
    box = Outbox(sink, make_purchase().claim)  # type: ignore[arg-type]
    sink.gate.clear()
    box.events([TaskEvent("A", "STARTED")])
    time.sleep(0.1)  # the outbox thread is now blocked sending A
    box.events([TaskEvent("B", "STARTED")])
    box.events([TaskEvent("C", "STARTED")])
    box.upload("SKU_PANEL_GATE_1", lambda: b"\x89PNG\r\n\x1a\n", "2099-01-01T00:00:00Z")
    box.events([TaskEvent("D", "STARTED")])
    sink.gate.set()
    box.drain(5)
    assert sink.calls == [("events", ["A"]), ("events", ["B", "C"]), ("upload", "SKU_PANEL_GATE_1"), ("events", ["D"])]
    assert box.close() is None


def test_outbox_failure_drops_the_rest_and_is_raised_at_drain() -> None:
    sink = _Sink()
    sink.fail_events = True
    box = Outbox(sink, make_purchase().claim)  # type: ignore[arg-type]
    encoded: list[bool] = []
    box.events([TaskEvent("A", "STARTED")])
    box.upload("SKU_PANEL_GATE_1", lambda: encoded.append(True) or b"", "2099-01-01T00:00:00Z")  # type: ignore[func-returns-value]
    with pytest.raises(ServerUnreachable):
        box.drain(5)
    with pytest.raises(ServerUnreachable):
        box.raise_if_failed()
    assert encoded == [] and sink.calls == []
    assert isinstance(box.close(), ServerUnreachable)


# --- the whole flow over the real uiautomator2 + phonesim adb server -----------------------------
class _SlowUploads(FakeServer):
    """Uploads take a while (server-side fsync); the fence records what was stored before it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stored_at_fence: list[str] = []
        self.lock = threading.Lock()

    def upload_screenshot(self, claim: Any, asset: ScreenshotAsset) -> AssetRef:
        time.sleep(0.2)
        with self.lock:
            return super().upload_screenshot(claim, asset)

    def create_submission_fence(self, claim: Any, proof: SubmissionProof) -> Any:
        with self.lock:
            self.stored_at_fence = [k for k, _ in self.evidence]
        return super().create_submission_fence(claim, proof)


def test_flow_pacing_real_u2(tmp_path: Path) -> None:
    with adbutils_leaks_ignored(), running_sim() as sim:
        phone = PhoneAdapter.connect("sim-1")
        purchase = make_purchase()
        journal = Journal(tmp_path / "j.sqlite3")
        server = _SlowUploads(purchase, keys=journal)
        c = purchase.claim
        journal_claim(journal, c)
        flow = PurchaseFlow(phone=phone, pack=shipped_packs()[0], sink=server, journal=journal, waits=FlowWaits())
        result = flow.run(purchase)
        assert result.outcome == "SUBMITTED", server.fails
        entries = sim.journal("sim-1").entries()
        counters = sim.phone("sim-1").counters
    # The fence was requested only once all three gate screenshots were stored.
    assert server.stored_at_fence == ["SKU_PANEL_GATE_1", "QUANTITY_GATE_2", "CONFIRM_PAGE_GATE_3"]
    # Every tap: at least two dumps since the previous action (deep link, tap, key) — fresh dumps.
    dumps_since_action = None
    taps: list[tuple[str, int, list[str]]] = []
    shots: list[str] = []
    for e in entries:
        if e["kind"] in ("deep_link", "key"):
            dumps_since_action, shots = 0, []
        elif e["kind"] == "dump":
            assert dumps_since_action is not None
            dumps_since_action += 1
        elif e["kind"] == "screenshot":
            shots.append(e["screen"])
        elif e["kind"] == "tap":
            assert dumps_since_action is not None
            taps.append((e["role"], dumps_since_action, shots))
            dumps_since_action, shots = 0, []
    assert [t[0] for t in taps] == ["buy", "option", "option", "qty_inc", "sku_confirm", "submit"]
    assert all(n >= 2 for _, n, _ in taps), taps
    # Gate screenshots are taken on the gate's screen, before the next tap.
    assert [s for _, _, s in taps] == [[], [], [], ["sku"], ["sku"], ["confirm"]]
    # every stored screenshot lies between two dumps of the same screen with no other phone
    # call in between but the focus reads of post-tap looks — the two dumps of the gate's (or the
    # looks') stable read; masking uses both.
    calls = [
        e
        for e in entries
        if e["kind"] in ("dump", "screenshot", "shell", "tap") and not e.get("cmd", "").startswith("dumpsys window")
    ]
    for k, e in enumerate(calls):
        if e["kind"] == "screenshot":
            around = calls[k - 1], calls[k + 1]
            assert [c["kind"] for c in around] == ["dump", "dump"], around
            assert {c["screen"] for c in around} == {e["screen"]}, around
    # The whole order's phone-call budget (the model in bench/purchase.py): a stable read of
    # product, SKU panel, the panel after the first option, gates 1-3, the post-tap observation and the
    # order list (2 dumps each) + the pre-tap last look (1); 6 taps; 5 stored screenshots; shell: u2's
    # jar check at connect, deep link, goods id, 6 `input tap`, deep link to the order list, and the
    # focus read of each post-tap look (cashier in front? the privacy rule's focus before/after a shot).
    # A step that starts making more calls fails here.
    assert counters["dumps"] == 2 * 8 + 1, counters
    assert counters["screenshots"] == 5 and counters["taps"] == 6, counters
    assert counters["shell_calls"] == 1 + 2 + 6 + 1 + 4, counters
    assert counters["rpc_calls"] == counters["dumps"] + counters["screenshots"], counters


# --- what one phone call costs in connections -------------------------------------------
def test_a_phone_call_opens_one_adb_connection_not_a_version_query_too() -> None:
    """adbutils asks the adb server ``host:version`` before every device service unless the client
    remembers it (PhoneAdapter's client does): after connecting, shell calls, dumps and screenshots
    send no more version queries — each call is its one transport connection."""
    with adbutils_leaks_ignored(), running_sim() as sim:
        phone = PhoneAdapter.connect("sim-1")
        phone.open_goods(GOODS)
        before = sim.host_version_requests
        for _ in range(3):
            phone.current_goods_id()
            phone.dump_raw()
        phone.screenshot()
        assert sim.host_version_requests == before
        assert sim.phone("sim-1").counters["shell_calls"] >= 4  # the calls did reach the phone


def test_a_phone_call_request_is_not_held_back_by_nagle() -> None:
    """Every adb connection of the adapter's client has TCP_NODELAY: uiautomator2 writes an
    HTTP request's headers and body in two sends, and with Nagle on the body waited for the adb
    server's delayed ACK (≈ 40 ms per dump and screenshot). The connection a dump uses is the one
    checked: the client's, not a socket opened here."""
    with adbutils_leaks_ignored(), running_sim():
        phone = PhoneAdapter.connect("sim-1")
        client = phone._adb._client
        made: list[int] = []
        plain = type(client).make_connection

        def recording(self: Any, timeout: float | None = None) -> Any:
            conn = plain(self, timeout)
            made.append(conn.conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            return conn

        with mock.patch.object(type(client), "make_connection", recording):
            phone.open_goods(GOODS)
            phone.dump_raw()
            phone.screenshot()
        assert len(made) >= 3 and all(made), made


# --- a stored screenshot between the two dumps of the stable read that judged its screen --
class _CountingPhone(SimPhone):
    """SimPhone counting screenshots and focus reads (the adapter's other phone calls)."""

    def __init__(self) -> None:
        super().__init__()
        self.shots = 0
        self.focus_reads = 0

    def screenshot(self) -> Any:
        self.shots += 1
        return super().screenshot()

    def shell(self, cmd: list[str], timeout: float | None = None) -> str:
        self.focus_reads += list(cmd[:2]) == ["dumpsys", "window"]
        return super().shell(cmd, timeout)


def _armed_product_phone(between: bool = True) -> tuple[_CountingPhone, PhoneAdapter]:
    sim = _CountingPhone()
    phone = PhoneAdapter("sim-1", sim, sim, Deadlines(dump=5, shell=5, screenshot=5, tap=5))
    phone.gate_shots_between_dumps = between
    phone.open_goods(GOODS)
    return sim, phone


def _screen(d: Any) -> str:
    return readers.recognize(d, shipped_packs()[0])


def test_a_gate_shot_is_taken_between_the_two_dumps_of_its_stable_read(no_sleep: None) -> None:
    sim, phone = _armed_product_phone()
    phone.arm_gate_shot()
    assert phone.read_stable(_screen)[0] == "product"
    assert (sim.dumps, sim.shots) == (2, 1)  # dump, shot, dump
    png = phone.gate_screenshot()()
    assert (sim.dumps, sim.shots) == (2, 1) and png.startswith(b"\x89PNG")  # no further call
    # disarmed by the gate screenshot: the next reads take no shot
    phone.read_stable(_screen, new_dump=True)
    assert sim.shots == 1


def test_a_shot_whose_pair_disagreed_is_dropped_and_the_next_pair_takes_its_own(no_sleep: None) -> None:
    sim, phone = _armed_product_phone()
    sim.dump_hook = lambda xml, n: xml.replace("发起拼单", "拼单中") if n == 1 else xml  # the first dump differs
    phone.arm_gate_shot()
    assert phone.read_stable(lambda d: "拼单中" in str([n.text for n in d.nodes]))[0] is False
    assert (sim.dumps, sim.shots) == (3, 2)  # dump, shot (dropped), dump, shot, dump
    phone.gate_screenshot()
    assert (sim.dumps, sim.shots) == (3, 2)


def test_without_a_bracketing_pair_the_gate_shot_takes_a_shot_and_a_dump(no_sleep: None) -> None:
    # not armed (the dry run, a pair reused without fresh dumps): shot + one dump of the windows
    sim, phone = _armed_product_phone(between=False)
    phone.arm_gate_shot()
    phone.read_stable(_screen)
    assert sim.shots == 0
    phone.gate_screenshot()
    assert (sim.dumps, sim.shots) == (3, 1)
    # armed, but a dump outside the pair came after it: the pair is not the latest, so no bracket
    sim, phone = _armed_product_phone()
    phone.arm_gate_shot()
    phone.read_stable(_screen)
    phone.dump()
    phone.gate_screenshot()
    assert (sim.dumps, sim.shots) == (4, 2)


def test_after_the_tap_a_shot_between_two_looks_needs_no_more_calls(no_sleep: None) -> None:
    sim, phone = _armed_product_phone()
    phone.look_after_tap()
    phone.shoot_before_next_look()
    phone.look_after_tap()
    assert (sim.dumps, sim.shots, sim.focus_reads) == (2, 1, 2)
    assert phone.app_screenshot_png() is not None
    assert (sim.dumps, sim.shots, sim.focus_reads) == (2, 1, 2)  # the looks' focus and dumps around it
    # the two looks are the confirmation's first stable look (nothing was sent to the screen since)
    assert len(phone.recent_looks()) == 2 and len(phone.recent_looks(new_look=True)) == 1
    # a call between the shot and the next look: no bracket; focus before (the look's), shot, dump, focus after
    phone.shoot_before_next_look()
    phone.current_goods_id()
    phone.look_after_tap()
    assert phone.app_screenshot_png() is not None
    assert (sim.dumps, sim.shots, sim.focus_reads) == (2 + 1 + 1, 2 + 1, 2 + 1 + 1)
    # an action forgets every look
    phone.press_back()
    assert phone.recent_looks() == []


def test_the_observation_adds_no_poll_pause_where_its_screenshot_already_lies_between_the_looks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the first look already shows the outcome with the app in front, so the screenshot is
    # taken before the second look — that call spaces the two looks; the 50 ms poll pause waited for nothing
    from decimal import Decimal

    import cmbuyer.phonesim.app as app
    from cmbuyer.agent import submit

    sim, phone = _armed_product_phone()
    goods = sim.app.goods
    assert goods is not None
    order = app.Order("250101-000000001", goods.goods_id, {}, 1, Decimal(10), Decimal(10), "ORDER_CREATED")
    sim.app.stack[-1] = app.Page("order", goods_id=goods.goods_id, order=order)
    pauses: list[float] = []
    monkeypatch.setattr(submit.time, "sleep", pauses.append)
    pack = next(p for p in shipped_packs() if p.after_submit is not None)
    outcome = submit._observe(phone, pack, 5)
    assert outcome.observation == "SUBMITTED" and outcome.screenshot is not None
    assert (sim.dumps, sim.shots, sim.focus_reads) == (2, 1, 2) and pauses == []
    # a first look without an outcome (still the product page) is followed by the poll pause
    sim.app.stack[-1] = app.Page("product", goods_id=goods.goods_id)
    submit._observe(phone, pack, 0.01)
    assert pauses and set(pauses) == {submit.POLL_SECONDS}


def test_a_shot_between_looks_is_refused_unless_the_app_is_focused_at_both(no_sleep: None) -> None:
    sim, phone = _armed_product_phone()
    phone.look_after_tap()
    phone.shoot_before_next_look()
    sim.app.foreign = "com.tencent.mm"  # a cashier came to the front after the shot
    phone.look_after_tap()
    assert phone.app_screenshot_png() is None


def test_looks_older_than_the_reuse_bound_are_not_a_stable_look_nor_a_focus(monkeypatch: pytest.MonkeyPatch) -> None:
    # Between the observation's last look and the confirmation lie the synchronous upload of the observation
    # screenshot (client timeout 10 s × up to 5 attempts) and a journal fsync — no phone call, but time in
    # which a cashier may come to the front. The confirmation must then look again (and go BACK from the
    # cashier), not act on the observation's looks; right after them it reuses them (no phone call).
    import cmbuyer.agent.phone.adapter as adapter
    from cmbuyer.agent import confirm

    monkeypatch.setattr(adapter, "LOOK_REUSE_SECONDS", 0.2, raising=False)
    pack = next(p for p in shipped_packs() if p.after_submit is not None)
    assert pack.after_submit is not None
    sim, phone = _armed_product_phone()
    phone.look_after_tap()
    phone.look_after_tap()  # the observation saw the app twice
    calls = (sim.dumps, sim.focus_reads)
    fresh = confirm._stable(phone, pack, pack.after_submit, time.monotonic() + 5)
    assert fresh is not None and fresh.where == "app" and (sim.dumps, sim.focus_reads) == calls  # reused
    sim.app.foreign = "com.tencent.mm"  # the cashier comes to the front during the upload
    time.sleep(0.3)
    late = confirm._stable(phone, pack, pack.after_submit, time.monotonic() + 5)
    assert late is not None and late.where == "cashier"
    # the screenshot's focus-before check does not take an old look's focus either
    sim.app.foreign = None
    phone.look_after_tap()
    sim.app.foreign = "com.tencent.mm"
    time.sleep(0.3)
    shots = sim.shots
    assert phone.app_screenshot_png() is None and sim.shots == shots  # a fresh focus read: no shot of the cashier
