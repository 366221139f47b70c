"""The purchase flow end to end over the REAL PhoneAdapter against the simulator's app model
(tests/agent/simphone.py) and the rule-enforcing fake server (tests/agent/fakes.py)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.agent.errors import PhoneError
from cmbuyer.agent.flow import PurchaseFlow
from cmbuyer.agent.journal import Journal
from cmbuyer.agent.phone.adapter import Deadlines, PhoneAdapter
from cmbuyer.agent.waits import FlowWaits
from tests.agent.packtools import shipped_packs

from .fakes import FakeServer, make_purchase
from .simphone import SimPhone, strip_pkg

# the simulated app answers at once: an unrecognized screen stops after 2 s instead of production's 8 s
FAST_WAITS = FlowWaits(screen=2.0, observe=2.0)


@pytest.fixture(autouse=True)
def _fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("time.sleep", lambda s: None)


def _journal_claim(journal: Journal, purchase) -> None:
    journal.record_claim(
        attempt_id=purchase.claim.attempt_id,
        task_id=purchase.task.id,
        task_version=3,
        authorization_id=purchase.claim.authorization_id,
        claim_generation=1,
        claim_token="ab" * 32,
        session_id=purchase.claim.session_id,
        lease_expires_at=purchase.claim.lease_expires_at,
        authorization_expires_at=purchase.claim.authorization_expires_at,
        task={},
    )


def run_flow(tmp_path: Path, sim: SimPhone, **task: object):
    purchase = make_purchase(**task)
    journal = Journal(tmp_path / "j.sqlite3")
    server = FakeServer(purchase, keys=journal)
    _journal_claim(journal, purchase)
    phone = PhoneAdapter("sim-1", sim, sim, Deadlines(dump=5, shell=5, screenshot=5, tap=5))
    flow = PurchaseFlow(phone=phone, pack=shipped_packs()[0], sink=server, journal=journal, waits=FAST_WAITS)
    result = flow.run(purchase)
    return result, server, journal, purchase


def test_happy_path_one_submit_tap_three_gate_screenshots(tmp_path: Path) -> None:
    sim = SimPhone()
    result, server, journal, purchase = run_flow(tmp_path, sim)
    assert result.outcome == "SUBMITTED"
    assert sim.roles().count("submit") == 1
    assert "payment" not in sim.roles()
    kinds = [k for k, _ in server.evidence]
    assert kinds[:3] == ["SKU_PANEL_GATE_1", "QUANTITY_GATE_2", "CONFIRM_PAGE_GATE_3"]
    assert "POST_SUBMIT_OBSERVATION" in kinds
    assert server.task_state == "WAITING_PAYMENT"
    assert journal.submission(purchase.claim.attempt_id).phase == "RESULT_REPORTED"
    assert len(sim.app.orders) == 1 and sim.app.orders[0].quantity == 2


@pytest.mark.parametrize(
    "task,reason",
    [
        ({"sku_color": "紫色"}, "SKU_VALUE_MISSING"),
        ({"max_total_price": Decimal("20.00")}, "PRICE_OVER_CAP"),
        ({"quantity": 6}, "QUANTITY_CAPPED_BY_STOCK"),
        ({"goods_id": "999999999999"}, "SCREEN_UNRECOGNIZED"),
    ],
)
def test_failures_before_fence_never_tap_submit(tmp_path: Path, task: dict, reason: str) -> None:
    sim = SimPhone()
    result, server, _, _ = run_flow(tmp_path, sim, **task)
    assert result.outcome == "FAILED" and result.reason_code == reason
    assert "submit" not in sim.roles() and "payment" not in sim.roles()
    assert server.fails and server.fails[0].reason_code == reason
    if reason == "SCREEN_UNRECOGNIZED":
        # backing out of the unknown page left the app (launcher in front): no screenshot of
        # anything but the app is taken before the fence either
        assert "FAILURE" not in [kind for kind, _ in server.evidence]
    else:
        assert server.evidence[-1][0] == "FAILURE"
    assert not server.fences


def test_price_change_between_gates(tmp_path: Path) -> None:
    sim = SimPhone()

    def bump(role: str) -> None:
        if role == "qty_inc":
            for sku in sim.app.goods.skus.values():
                sku.price = Decimal("13.50")

    sim.after_tap = bump
    result, _, _, _ = run_flow(tmp_path, sim)
    assert result.reason_code == "PRICE_CHANGED"
    assert "submit" not in sim.roles()


def test_wrong_goods_id_opened(tmp_path: Path) -> None:
    sim = SimPhone()
    orig = sim.shell

    def lying(cmd, timeout=None):
        if cmd[:2] == ["am", "start"]:
            cmd = [*cmd[:-1], cmd[-1].replace("937122477375", "600123456789")]
        return orig(cmd, timeout)

    sim.shell = lying  # type: ignore[method-assign]
    result, _, _, _ = run_flow(tmp_path, sim)
    assert result.reason_code == "WRONG_GOODS"
    assert "submit" not in sim.roles()


@pytest.mark.parametrize(
    "hook,reason",
    [
        (lambda xml, n: '<?xml version="1.0"?><hierarchy rotation="0" />', "DUMP_EMPTY"),
        (lambda xml, n: xml[: len(xml) // 2], "DUMP_INVALID"),
        (lambda xml, n: strip_pkg(xml), "WRONG_PACKAGE"),
    ],
)
def test_bad_dumps_stop_safely(tmp_path: Path, hook, reason: str) -> None:
    sim = SimPhone()
    sim.dump_hook = hook
    result, _, _, _ = run_flow(tmp_path, sim)
    assert result.outcome == "FAILED" and result.reason_code == reason
    assert "submit" not in sim.roles()


def test_adb_dropped_during_submit_tap_reports_unknown(tmp_path: Path) -> None:
    sim = SimPhone()

    def drop(role: str) -> None:
        if role == "submit":
            raise ConnectionResetError("adb gone")

    sim.tap_hook = drop
    result, server, journal, purchase = run_flow(tmp_path, sim)
    assert result.outcome == "UNKNOWN"
    assert server.task_state == "RECONCILIATION_REQUIRED"
    assert [t for t in sim.taps if t["role"] == "submit"] == []  # raised before landing; never retried
    assert journal.submission(purchase.claim.attempt_id).phase == "RESULT_REPORTED"


def test_payment_handoff_after_submit(tmp_path: Path) -> None:
    sim = SimPhone({**_default(), "outcome": "PAYMENT_HANDOFF"})
    result, server, _, _ = run_flow(tmp_path, sim)
    assert result.outcome == "EXTERNAL_PAYMENT_HANDOFF"
    assert sim.roles().count("submit") == 1 and "payment" not in sim.roles()
    assert server.task_state == "RECONCILIATION_REQUIRED"


def test_security_challenge_after_submit(tmp_path: Path) -> None:
    sim = SimPhone({**_default(), "outcome": "SECURITY_CHALLENGE"})
    result, _, _, _ = run_flow(tmp_path, sim)
    assert result.outcome == "SECURITY_CHALLENGE"
    assert sim.roles().count("submit") == 1


def test_server_down_mid_flow_stops_before_fence(tmp_path: Path) -> None:
    sim = SimPhone()
    purchase = make_purchase()
    journal = Journal(tmp_path / "j.sqlite3")
    server = FakeServer(purchase, keys=journal)
    _journal_claim(journal, purchase)
    phone = PhoneAdapter("sim-1", sim, sim)
    flow = PurchaseFlow(phone=phone, pack=shipped_packs()[0], sink=server, journal=journal, waits=FAST_WAITS)
    server.down = 100
    result = flow.run(purchase)
    assert result.outcome == "FAILED" and result.reason_code == "SERVER_UNREACHABLE"
    assert "submit" not in sim.roles()
    # The fail could not be delivered: it stays FAIL_PENDING with its payload, for recovery to
    # re-send with the same key once the server is back (never ABANDONED).
    assert journal.claim(purchase.claim.attempt_id).state == "FAIL_PENDING"
    assert journal.pending_fail(purchase.claim.attempt_id)[0] == "SERVER_UNREACHABLE"
    assert journal.recovery_pending()


def test_generic_tap_refuses_payment_and_submit_nodes() -> None:
    from cmbuyer.agent.errors import PaymentControlBlocked, SubmitControlGuarded
    from cmbuyer.agent.screens.dump import parse_dump

    sim = SimPhone()
    sim.app.open_url("pinduoduo://com.xunmeng.pinduoduo/goods.html?goods_id=937122477375")
    sim.app.act(("open_sheet", "单独购买"))
    sim.app.act(("select", "颜色", "黑色CHA(纯棉)"))
    sim.app.act(("select", "尺码", "M(建议100-115)"))
    sim.app.act(("confirm_sheet",))
    phone = PhoneAdapter("sim-1", sim, sim)
    dump = parse_dump(sim.dumpWindowHierarchy(False, 50))
    pay = [n for n in dump.app_nodes() if "微信支付" in n.text or "多多支付" in n.text]
    assert pay
    for node in pay:
        with pytest.raises(PaymentControlBlocked):
            phone.tap_node(dump, node)
    submit = [n for n in dump.app_nodes() if n.text.startswith("提交订单")]
    with pytest.raises(SubmitControlGuarded):
        phone.tap_node(dump, submit[0])
    assert sim.taps == []


def test_unreachable_adb_server(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(port))
    with pytest.raises(PhoneError, match="无法连接 adb 服务"):
        PhoneAdapter.connect("emulator-5554")


def _default() -> dict:
    from importlib import resources

    import yaml

    return yaml.safe_load(resources.files("cmbuyer.phonesim").joinpath("scenarios/default.yaml").read_text("utf-8"))


def _submit_bar(label: str, *others: str) -> tuple[SimPhone, PhoneAdapter, Any]:
    """A SimPhone-backed adapter and a parsed dump of the app window holding the submit button (a clickable
    [540,2136][1056,2268] whose child reads ``label``) and, after it, one app node per ``others`` (its
    attributes)."""
    from cmbuyer.agent.screens.dump import parse_dump

    sim = SimPhone()
    app = 'package="com.xunmeng.pinduoduo"'
    xml = (
        f'<hierarchy rotation="0"><node {app} bounds="[0,96][1080,2280]">'
        f'<node {app} clickable="true" bounds="[540,2136][1056,2268]">'
        f'<node {app} text="{label}" bounds="[600,2166][996,2238]"/></node>'
        + "".join(f"<node {app} {attrs}/>" for attrs in others)
        + "</node></hierarchy>"
    )
    return sim, PhoneAdapter("sim-1", sim, sim), parse_dump(xml)


@pytest.mark.parametrize(
    "label",
    ["提交订单  ¥29.9", "提交订单 ¥ 29.90", "提交订单 ¥1,299.00", "提交订单￥29.9", " 提 交 订 单 ", "提交订单29.9元"],
)
def test_generic_tap_refuses_every_spelling_of_the_submit_control(label: str) -> None:
    """The dry run's "never the submit control" check missed label variants; generic taps
    (the dry run's only taps) refuse any node reading as 提交订单, whatever the spacing or amount format."""
    from cmbuyer.agent.errors import SubmitControlGuarded

    sim, phone, dump = _submit_bar(label, 'text="添加" clickable="true" bounds="[24,2136][300,2256]"')
    node = next(n for n in dump.app_nodes() if n.text == label)
    with pytest.raises(SubmitControlGuarded):
        phone.tap_node(dump, node)
    assert sim.taps == []


def test_generic_tap_refuses_a_node_whose_centre_lies_on_the_submit_control() -> None:
    """A label-less node drawn over the submit button (its centre inside it), and a clickable node whose
    bounds overlap the button: both refused; a control beside it is tapped."""
    from cmbuyer.agent.errors import SubmitControlGuarded

    sim, phone, dump = _submit_bar(
        "提交订单 ¥29.9",
        'resource-id="overlay" clickable="true" bounds="[700,2150][900,2250]"',
        'resource-id="edge" clickable="true" bounds="[300,2140][560,2260]"',
        'resource-id="add" clickable="true" bounds="[24,2136][300,2256]"',
    )
    for rid in ("overlay", "edge"):
        node = next(n for n in dump.app_nodes() if n.resource_id == rid)
        with pytest.raises(SubmitControlGuarded):
            phone.tap_node(dump, node)
    assert sim.taps == []
    add = next(n for n in dump.app_nodes() if n.resource_id == "add")
    phone.tap_node(dump, add)
    assert len(sim.taps) == 1
