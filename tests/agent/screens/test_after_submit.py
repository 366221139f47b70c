"""After the tap, on dumps: the observation rules on hand-written foreign-app,
paid and order-list dumps, the focused-window parser, the order-list reader and matcher, the
retention dialog's leave control, the pack's ``after_submit`` section, and the journal's post-tap
records. Pure functions + a real SQLite journal; the phone runs are in test_after_tap_sim.py."""

from __future__ import annotations

import copy
from decimal import Decimal
from pathlib import Path

import pytest

from cmbuyer.agent.errors import DumpNoAppNodes, PackError, PaymentControlBlocked
from cmbuyer.agent.journal import Journal, JournalError
from cmbuyer.agent.pack.compile import compile_pack
from cmbuyer.agent.phone.adapter import PhoneAdapter, parse_focused_package
from cmbuyer.agent.screens import after_submit as A
from cmbuyer.agent.screens.dump import parse_dump
from tests.agent.packtools import shipped_packs

FX = Path(__file__).parents[1] / "fixtures"


def _pack():
    (pack,) = [p for p in shipped_packs() if p.id == "pdd-8.17.0-81700"]
    return pack


def _dump(name: str):
    return parse_dump((FX / name).read_text("utf-8"))


@pytest.mark.parametrize(
    "name,focus,observation,reason,package",
    [
        ("real/after_alipay_cashier.xml", None, "EXTERNAL_PAYMENT_HANDOFF", None, "com.eg.android.AlipayGphone"),
        ("real/after_wechat_cashier.xml", "com.tencent.mm", "EXTERNAL_PAYMENT_HANDOFF", None, "com.tencent.mm"),
        # the focus alone names the cashier while the dump still shows the app (a late dump)
        (
            "sim/confirm_order.xml",
            "com.eg.android.AlipayGphone",
            "EXTERNAL_PAYMENT_HANDOFF",
            None,
            "com.eg.android.AlipayGphone",
        ),
        ("real/after_paid.xml", "com.xunmeng.pinduoduo", "UNKNOWN", "PAYMENT_SUSPECTED", None),
        ("sim/order_created.xml", "com.xunmeng.pinduoduo", "SUBMITTED", None, None),
        ("real/security_challenge.xml", None, "SECURITY_CHALLENGE", "SECURITY_CHALLENGE_AFTER_TAP", None),
        ("sim/confirm_order.xml", "com.xunmeng.pinduoduo", None, "NO_KNOWN_SCREEN", None),
        ("real/system_only.xml", None, None, "NO_KNOWN_SCREEN", "com.android.launcher3"),
    ],
)
def test_classify_after_the_tap(
    name: str, focus: str | None, observation: str | None, reason: str | None, package: str | None
) -> None:
    seen = A.classify(_dump(name), focus, _pack())
    assert (seen.observation, seen.reason, seen.package) == (observation, reason, package)
    # a screenshot is allowed only when the app itself is in front
    assert seen.app_in_front is (package is None)


def test_a_paid_word_beside_a_pending_one_is_still_payment_suspected() -> None:
    xml = (FX / "sim/order_created.xml").read_text("utf-8").replace("订单详情", "拼单成功")
    seen = A.classify(parse_dump(xml), None, _pack())
    assert "待付款" in xml and (seen.observation, seen.reason) == ("UNKNOWN", "PAYMENT_SUSPECTED")


def test_only_pending_words_make_submitted() -> None:
    """下单成功 alone (no 待支付/待付款) is not evidence of a pending-payment order."""
    xml = (FX / "sim/order_created.xml").read_text("utf-8").replace("待付款", "下单成功")
    assert A.classify(parse_dump(xml), None, _pack()).observation is None


def test_foreign_dump_is_refused_before_the_tap_and_readable_after_it() -> None:
    class Device:
        def __init__(self, xml: str) -> None:
            self.xml = xml
            self.jsonrpc = self

        def dumpWindowHierarchy(self, compressed: bool, depth: int) -> str:
            return self.xml

    device = Device((FX / "real/after_alipay_cashier.xml").read_text("utf-8"))
    phone = PhoneAdapter("t", device, device)
    with pytest.raises(DumpNoAppNodes):
        phone.dump()
    assert {n.package for n in phone.dump_any().nodes} == {"com.android.systemui", "com.eg.android.AlipayGphone"}


@pytest.mark.parametrize(
    "text,package",
    [
        (
            "  mCurrentFocus=Window{8a3f2c1 u0 com.tencent.mm/com.tencent.mm.plugin.wallet.ui.WalletPayUI}\n",
            "com.tencent.mm",
        ),
        (
            "mCurrentFocus=Window{1 u0 com.xunmeng.pinduoduo/.ui.activity.HomeActivity}\n"
            "mFocusedApp=ActivityRecord{7d2e9b0 u0 com.xunmeng.pinduoduo/.X t57}\n",
            "com.xunmeng.pinduoduo",
        ),
        ("  mCurrentFocus=null\n", None),
        ("  mCurrentFocus=Window{5f1c2a8 u0 StatusBar}\n", None),
        ("", None),
        ("mCurrentFocus=Window{1 u0 com.tencent.mm/.A}\nmCurrentFocus=Window{2 u0 com.xunmeng.pinduoduo/.B}\n", None),
        ("mCurrentFocus=Window{1 u0 com.tencent.mm/.A}\nmCurrentFocus=null\n", None),
    ],
)
def test_parse_focused_package(text: str, package: str | None) -> None:
    assert parse_focused_package(text) == package


def test_order_list_cards_and_match() -> None:
    conf = _pack().after_submit
    dump = _dump("real/order_list.xml")
    assert A.is_order_list(dump, conf)
    cards = A.read_order_cards(dump, conf)
    assert [(c.amount, c.order_sn, c.pending) for c in cards] == [
        (Decimal("25.76"), "250101-000000042", True),
        (Decimal("39.90"), "250101-000000017", True),
    ]
    assert A.match_order(cards, Decimal("25.76"), None)[0] == "250101-000000042"
    assert A.match_order(cards, Decimal("39.90"), "whatever")[0] == "250101-000000017"
    assert A.match_order(cards, Decimal("10.00"), None)[0] is None
    assert A.match_order(cards, None, None)[0] is None
    # the simulator's list reads the same way
    (card,) = A.read_order_cards(_dump("sim/order_list.xml"), conf)
    assert card.pending and card.order_sn and card.amount == Decimal("25.76")


def test_ambiguous_or_unreadable_orders_give_no_order_sn() -> None:
    conf = _pack().after_submit
    xml = (FX / "real/order_list.xml").read_text("utf-8")
    same = parse_dump(xml.replace("¥39.90", "¥25.76"))
    sn, why = A.match_order(A.read_order_cards(same, conf), Decimal("25.76"), None)
    assert sn is None and "ambiguous" in why
    # a card with two different amounts, or a malformed number, is unreadable, never guessed
    two = parse_dump(xml.replace("¥39.90", "¥25.76").replace('"实付款" class', '"¥1.00" class', 1))
    assert A.read_order_cards(two, conf)[0].amount is None
    bad = parse_dump(xml.replace("订单编号：250101-000000042", "订单编号：12"))
    sn, why = A.match_order(A.read_order_cards(bad, conf), Decimal("25.76"), None)
    assert sn is None and "unreadable" in why


def test_order_list_is_not_the_order_detail_page() -> None:
    assert not A.is_order_list(_dump("sim/order_created.xml"), _pack().after_submit)


def _conf_with_leave(leave: dict) -> A.AfterSubmit:
    raw = copy.deepcopy(_pack().raw)
    raw["after_submit"]["confirmation"]["retention_dialog"]["leave"] = dict(leave, evidence=["sim-leave-dialog"])
    return compile_pack(raw).after_submit


def test_retention_dialog_leaves_only_through_a_non_payment_control() -> None:
    dump = _dump("real/leave_order_dialog.xml")
    conf = _pack().after_submit
    node = A.leave_control(dump, conf)
    assert node is not None and node.text == "先去逛逛"
    # a pack naming the payment button (or its ，仅¥x part) is refused at load …
    for leave in ({"text": "继续支付"}, {"text": "，仅¥.*"}, {"text": "继续支付.*"}, {"desc": "继续.付"}):
        with pytest.raises(PackError):
            _conf_with_leave(leave)
    # … one reaching it only through structure never gets it chosen …
    assert A.leave_control(dump, _conf_with_leave({"clickable": True, "has_descendant": {"text": "继续支付"}})) is None
    # … and the adapter refuses the tap anyway (no device call is ever made)
    pay = next(n for n in dump.nodes if n.text == "继续支付")
    with pytest.raises(PaymentControlBlocked):
        PhoneAdapter("t", None, None).tap_node(dump, pay)
    # the unlabeled close icon is used only when the pack declares it (and it passes the denylist)
    icon = A.leave_control(dump, _conf_with_leave({"class": "android.widget.ImageView", "clickable": True}))
    assert icon is not None and icon.cls == "android.widget.ImageView"
    # two candidates → none
    assert A.leave_control(dump, _conf_with_leave({"clickable": True})) is None


@pytest.mark.parametrize(
    "mutate",
    [
        lambda c: c.update(order_list_deep_link="https://evil.example/orders.html?type=1"),
        lambda c: c.update(order_list_deep_link="pinduoduo://com.xunmeng.pinduoduo/orders.html?type=1;rm"),
        lambda c: c["order_card"]["order_sn"].update(regex="订单编号：(\\S+)"),
        lambda c: c["order_card"]["amount"].update(regex="¥(\\d+)"),
        lambda c: c["retention_dialog"]["leave"].pop("evidence"),
        lambda c: c["order_card"]["pending"].update(evidence=["no-such-bundle"]),
    ],
)
def test_broken_after_submit_sections_are_refused(mutate) -> None:
    raw = copy.deepcopy(_pack().raw)
    mutate(raw["after_submit"]["confirmation"])
    with pytest.raises(PackError):
        compile_pack(raw)


def test_after_submit_is_optional_and_every_shipped_pack_carries_it() -> None:
    raw = copy.deepcopy(_pack().raw)
    raw.pop("after_submit")
    assert compile_pack(raw).after_submit is None
    # every shipped pack carries the section (authoring/make_pack.py rewrites packs: run make_after_submit.py after
    # it); its evidence files are re-hashed at load (tests/agent/pack/test_evidence.py)
    for pack in shipped_packs():
        assert pack.after_submit is not None, pack.id


def test_822_simulator_captures_after_the_tap() -> None:
    """8.22.0 (order sheet): the WeChat cashier covers the app, BACK shows the retention dialog, the
    list reads; on the list the 去支付 buttons never make it a cashier for the confirmation."""
    (pack,) = [p for p in shipped_packs() if p.version_name == "8.22.0"]
    seen = A.classify(_dump("sim822/after_cashier_wechat.xml"), None, pack)
    assert (seen.observation, seen.package, seen.app_in_front) == ("EXTERNAL_PAYMENT_HANDOFF", "com.tencent.mm", False)
    leave = A.leave_control(_dump("sim822/retention.xml"), pack.after_submit)
    assert leave is not None and leave.text == "先去逛逛"
    listing = _dump("sim822/order_list.xml")
    assert A.is_order_list(listing, pack.after_submit)
    (card,) = A.read_order_cards(listing, pack.after_submit)
    assert card.pending and card.amount == Decimal("29.90") and card.order_sn


def _journal_at_tapped(tmp_path: Path) -> Journal:
    j = Journal(tmp_path / "j.sqlite3")
    j.record_claim(
        attempt_id="a1",
        task_id="t1",
        task_version=1,
        authorization_id="z",
        claim_generation=1,
        claim_token="ab" * 32,
        session_id="s",
        lease_expires_at="x",
        authorization_expires_at="x",
        task={},
    )
    j.record_permit("a1", "sub1")
    j.advance("a1", "TAP_INTENT_RECORDED")
    j.advance("a1", "TAPPED")
    return j


def test_journal_post_tap_records(tmp_path: Path) -> None:
    j = _journal_at_tapped(tmp_path)
    with pytest.raises(JournalError):  # no confirmation before the observation is journaled
        j.record_confirm_step("a1", "BACK_FROM_CASHIER")
    j.record_observation("a1", "EXTERNAL_PAYMENT_HANDOFF", None, foreground_package="com.tencent.mm")
    j.record_confirm_step("a1", "BACK_FROM_CASHIER")
    assert j.post_tap("a1")["confirm_step"] == "BACK_FROM_CASHIER"
    row = j.submission("a1")
    assert row is not None and row.order_sn is None and row.observation == "EXTERNAL_PAYMENT_HANDOFF"
    j.record_confirmation("a1", "250101-000000042", None)
    j.record_confirmation("a1", "other-sn-0001", None)  # the first result is kept
    row = j.submission("a1")
    assert row is not None and row.order_sn == "250101-000000042"
    assert j.post_tap("a1")["foreground_package"] == "com.tencent.mm"
    j.advance("a1", "RESULT_REPORTED")
    with pytest.raises(JournalError):  # nothing more after the report
        j.record_confirm_step("a1", "OPEN_ORDER_LIST")


def test_the_title_narrows_several_amount_matches_to_one_or_leaves_them_ambiguous() -> None:
    cards = [
        A.OrderCard("纯棉短袖", Decimal("25.76"), "sn-000001", True),
        A.OrderCard("保温杯", Decimal("25.76"), "sn-000002", True),
        A.OrderCard(None, Decimal("25.76"), "sn-000003", False),
    ]  # not pending: never ours
    assert A.match_order(cards, Decimal("25.76"), "纯棉短袖")[0] == "sn-000001"
    assert A.match_order(cards, Decimal("25.76"), "别的商品")[0] is None
    assert (
        A.match_order([cards[0], A.OrderCard(None, Decimal("25.76"), "sn-000004", True)], Decimal("25.76"), "纯棉短袖")[
            0
        ]
        == "sn-000001"
    )
    assert A.match_order(cards, Decimal("25.76"), None)[0] is None


def test_orders_earlier_attempts_took_are_never_ours(tmp_path: Path) -> None:
    """Identical orders back to back — the numbers earlier attempts on this phone reported (the
    journal) are left out; what remains must be exactly one, else no number, the count in the note."""
    same = [A.OrderCard("纯棉短袖", Decimal("12.88"), f"sn-00000{i}", True) for i in range(1, 4)]
    ambiguous = (None, "3 pending orders match (0 more taken by earlier orders): ambiguous")
    assert A.match_order(same, Decimal("12.88"), "纯棉短袖") == ambiguous
    sn, why = A.match_order(same, Decimal("12.88"), "纯棉短袖", frozenset({"sn-000001", "sn-000003"}))
    assert (sn, why) == ("sn-000002", "one pending order matches (2 taken by earlier orders)")
    sn, why = A.match_order(same, Decimal("12.88"), None, frozenset({"sn-000001"}))
    assert sn is None and why.startswith("2 pending orders match (1 more taken")
    # an unreadable number can never be ruled out: it stays a candidate
    blurred = [*same[:2], A.OrderCard("纯棉短袖", Decimal("12.88"), None, True)]
    assert A.match_order(blurred, Decimal("12.88"), None, frozenset({"sn-000001", "sn-000002"}))[0] is None
    j = _journal_at_tapped(tmp_path)  # attempt a1, tapped
    j.record_observation("a1", "SUBMITTED", None)
    j.record_confirmation("a1", "sn-000001", None)
    assert j.order_sns_taken("a3") == frozenset({"sn-000001"}) and j.order_sns_taken("a1") == frozenset()


class _Sink:
    """Records recovered results (the ResultSink port; the real server path is in
    test_after_tap_sim.py::test_sigkill_in_the_middle_of_the_confirmation)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, object]] = []

    def report_recovered_result(
        self, *, submission_id: str, attempt_id: str, claim_token: str, result: object, result_key: str
    ) -> None:
        self.sent.append((result_key, result))


def test_recovery_resends_reason_and_order_sn_and_holds_on_a_suspected_payment(tmp_path: Path) -> None:
    from cmbuyer.agent.recovery import recover

    j = _journal_at_tapped(tmp_path)
    key = j.record_observation("a1", "UNKNOWN", None, reason="PAYMENT_SUSPECTED")
    sink = _Sink()
    recover(j, sink)  # type: ignore[arg-type]
    ((sent_key, result),) = sink.sent
    assert sent_key == key and result.observation_reason == "PAYMENT_SUSPECTED"  # type: ignore[attr-defined]
    assert (j.hold() or "").startswith("PAYMENT_SUSPECTED")
    assert j.submission("a1").phase == "RESULT_REPORTED"  # type: ignore[union-attr]

    j2 = _journal_at_tapped(tmp_path / "b")
    j2.record_observation("a1", "EXTERNAL_PAYMENT_HANDOFF", None, foreground_package="com.tencent.mm")
    j2.record_confirmation("a1", "250101-000000042", None)
    sink = _Sink()
    recover(j2, sink)  # type: ignore[arg-type]
    ((_, result),) = sink.sent
    assert result.order_sn == "250101-000000042" and result.observation_reason is None  # type: ignore[attr-defined]
    assert j2.hold() is None

    j3 = _journal_at_tapped(tmp_path / "c")  # crash after the tap, nothing decided
    sink = _Sink()
    recover(j3, sink)  # type: ignore[arg-type]
    ((_, result),) = sink.sent
    assert (result.observation, result.observation_reason) == ("UNKNOWN", "TAP_OUTCOME_UNKNOWN")  # type: ignore[attr-defined]
