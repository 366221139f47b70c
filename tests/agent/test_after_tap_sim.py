# ruff: noqa: F811  (the srv/fast_phone fixtures are imported from test_real_server)
"""After the tap, end to end: the REAL uiautomator2 + adbutils against the phone
simulator's adb server (``running_sim``) and the REAL server (tests/agent/realserver.py), checked on
three sides — the simulator's journal (taps with their roles, keys, deep links, screenshots with
the package in front), the agent's journal, and the server's committed rows.

- an external cashier (Alipay / WeChat) after the tap → EXTERNAL_PAYMENT_HANDOFF, its package in
  the event and the journal instead of a screenshot, then the read-only confirmation: one BACK, the
  retention dialog left through 先去逛逛, the order list by deep link, the order number stored on the
  server's submission with an ORDER_CONFIRMATION screenshot;
- a paid state → UNKNOWN + PAYMENT_SUSPECTED, nothing touched after the tap;
- two pending orders with the same amount → no order number, the result still reported;
- SIGKILL in the middle of the confirmation → the restarted agent reports the journaled
  observation (no order number) and never taps again.
"""

from __future__ import annotations

import copy
import http.cookiejar
import re
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.agent.journal import Journal
from cmbuyer.agent.pack.compile import compile_pack
from cmbuyer.agent.pack.resolve import Resolution
from cmbuyer.agent.phone.adapter import PhoneAdapter
from cmbuyer.agent.waits import FlowWaits
from cmbuyer.phonesim.journal import assert_no_foreign_screenshots, foreign_screenshots, payment_taps
from cmbuyer.phonesim.testing import adbutils_leaks_ignored, running_sim
from tests.agent.packtools import shipped_packs
from tests.server.admin.conftest import ADMIN_PASSWORD, ADMIN_USER, add_admin

from .realserver import RealServer
from .test_flow_sim import _default
from .test_kill_restart import AgentProcess, _journal_state, _stop, _wait
from .test_real_server import Agent, fast_phone, kinds, srv  # noqa: F401  (fixtures)

CASHIERS = [("EXTERNAL_CASHIER_ALIPAY", "com.eg.android.AlipayGphone"), ("EXTERNAL_CASHIER_WECHAT", "com.tencent.mm")]
BOTH_VERSIONS = {"CMBUYER_ALLOWED_APP_VERSIONS": "8.17.0,8.22.0"}
LAYOUTS = [pytest.param("8.17.0", id="8.17.0"), pytest.param("8.22.0", id="8.22.0")]


def _scenario(version: str = "8.17.0", **changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(_default())
    if version == "8.22.0":
        data["app"] = dict(
            data.get("app") or {}, package="com.xunmeng.pinduoduo", version_name="8.22.0", version_code=82200
        )
    data.update(changes)
    return data


def _task_page(srv: RealServer, task_id: str) -> str:
    """The task page as an administrator sees it: real login form (CSRF + session cookie) and GET
    /tasks/<id> over HTTP against the real server."""
    add_admin(srv.conn, srv.clock)
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    form = opener.open(f"{srv.url}/login", timeout=10).read().decode()
    token = re.search(r'name="csrf_token" value="([0-9a-f]{64})"', form)
    assert token
    body = urllib.parse.urlencode(
        {"username": ADMIN_USER, "password": ADMIN_PASSWORD, "csrf_token": token.group(1)}
    ).encode()
    opener.open(f"{srv.url}/login", data=body, timeout=10).read()
    return opener.open(f"{srv.url}/tasks/{task_id}", timeout=10).read().decode()


def _run_one(
    tmp_path: Path, srv: RealServer, scenario: dict[str, Any], waits: FlowWaits
) -> tuple[Agent, Any, list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """One task through one agent run on the simulator: (agent, task, the sim journal, the sim's
    orders, the one submit tap entry — asserted to be exactly one)."""
    creds = srv.add_device()
    task = srv.add_task()
    with adbutils_leaks_ignored(), running_sim(scenario) as sim:
        agent = Agent(tmp_path, srv, creds, PhoneAdapter.connect("sim-1"), waits=waits)
        assert agent.run_once() == 0
        entries = sim.journal("sim-1").entries()
        orders = sim.phone("sim-1").orders
    submit = [e for e in entries if e["kind"] == "tap" and e["role"] == "submit"]
    assert len(submit) == 1 and not payment_taps(entries) and not foreign_screenshots(entries)
    return agent, task, entries, orders, submit[0]


def _after(entries: list[dict[str, Any]], seq: int) -> list[dict[str, Any]]:
    return [e for e in entries if e["seq"] > seq]


def _submission_row(srv: RealServer, task_id: str) -> dict[str, Any]:
    cur = srv.conn.execute("SELECT * FROM order_submissions WHERE task_id=?", (task_id,))
    cols = [d[0] for d in cur.description]
    rows = cur.fetchall()
    assert len(rows) == 1
    return dict(zip(cols, rows[0], strict=True))


@pytest.mark.parametrize("version", LAYOUTS)
@pytest.mark.parametrize("outcome,package", CASHIERS)
def test_external_cashier_then_read_only_confirmation(
    tmp_path: Path, fast_phone: FlowWaits, version: str, outcome: str, package: str
) -> None:
    with RealServer(tmp_path, env=BOTH_VERSIONS) as srv:
        _cashier_case(tmp_path, srv, version, outcome, package, fast_phone)


def _cashier_case(tmp_path: Path, srv: RealServer, version: str, outcome: str, package: str, waits: FlowWaits) -> None:
    # the phone: one submit tap, nothing with a payment role, no screenshot of the cashier
    agent, task, entries, orders, submit = _run_one(tmp_path, srv, _scenario(version, outcome=outcome), waits)
    assert_no_foreign_screenshots(entries)
    assert any(e["kind"] == "dump" and e.get("package") == package for e in entries), (
        "the cashier was never in front while the agent looked"
    )
    # after the tap: one BACK, one tap (先去逛逛), one deep link to the order list — nothing else
    later = _after(entries, submit["seq"])
    assert [e["kind"] for e in later if e["kind"] in ("tap", "key", "deep_link")] == ["key", "tap", "deep_link"]
    (back,) = [e for e in later if e["kind"] == "key"]
    assert back["key"] == "back" and back["screen"].startswith("cashier_") and back["effect"] == "leave_cashier"
    (leave,) = [e for e in later if e["kind"] == "tap"]
    assert leave["screen"] == "retention" and leave["node"]["text"] == "先去逛逛" and not leave["payment"]
    (link,) = [e for e in later if e["kind"] == "deep_link"]
    assert link["url"] == "pinduoduo://com.xunmeng.pinduoduo/orders.html?type=1" and link["page"] == "orders"
    assert len(orders) == 1 and orders[0]["status"] == "pending_payment"
    # the server: observation, order number and the confirmation screenshot
    detail = srv.detail(task.id)
    assert detail["submission"]["observation"] == "EXTERNAL_PAYMENT_HANDOFF"
    row = _submission_row(srv, task.id)
    assert row["order_sn"] == orders[0]["order_sn"] and row["observation_reason"] is None
    assert "ORDER_CONFIRMATION" in kinds(detail) and "POST_SUBMIT_OBSERVATION" not in kinds(detail)
    events = [(e["step"], e["outcome"]) for e in detail["events"]]
    assert ("CONFIRM_ORDER_READONLY", "OK") in events
    observed = [e for e in detail["events"] if e["step"] == "OBSERVE_RESULT"]
    assert package in observed[0]["summary"]
    # the agent's journal: the package instead of a screenshot, the confirmation done, reported
    sub = agent.journal.submission(agent.journal.claims()[0].attempt_id)
    assert sub is not None and sub.phase == "RESULT_REPORTED" and sub.order_sn == orders[0]["order_sn"]
    post = agent.journal.post_tap(sub.attempt_id)
    assert post is not None and post["foreground_package"] == package and post["confirm_step"] == "DONE"
    # the task page shows the order number (a reconciliation is one look)
    page = _task_page(srv, task.id)
    assert re.search(r'class="code order-sn">' + re.escape(orders[0]["order_sn"]) + "<", page), page[-2000:]


def test_paid_state_after_the_tap_is_payment_suspected_and_nothing_is_touched(
    tmp_path: Path, srv: RealServer, fast_phone: FlowWaits
) -> None:
    agent, task, entries, _, submit = _run_one(tmp_path, srv, _scenario(outcome="PAID"), fast_phone)
    assert not [e for e in _after(entries, submit["seq"]) if e["kind"] in ("tap", "key", "deep_link")]
    row = _submission_row(srv, task.id)
    assert row["observation"] == "UNKNOWN" and row["observation_reason"] == "PAYMENT_SUSPECTED"
    assert row["order_sn"] is None
    detail = srv.detail(task.id)
    assert "POST_SUBMIT_OBSERVATION" in kinds(detail) and "ORDER_CONFIRMATION" not in kinds(detail)
    assert not [e for e in detail["events"] if e["step"] == "CONFIRM_ORDER_READONLY"]
    # FlowResult.reason_code reaches the runner, whose hold policy holds the phone for a person
    assert any(line.endswith("UNKNOWN PAYMENT_SUSPECTED") for line in agent.lines), agent.lines
    hold = agent.journal.hold()
    assert hold is not None and hold.startswith("PAYMENT_SUSPECTED")


def test_two_matching_pending_orders_give_no_order_number(
    tmp_path: Path, srv: RealServer, fast_phone: FlowWaits
) -> None:
    """Identical pending orders: the agent that made the first tells its own second order apart (the
    journal holds the first's number); an agent whose journal does not know the first — as after
    an order made by hand or on another installation — cannot, and reports no number, the count logged."""
    creds = srv.add_device()
    first = srv.add_task(quantity=1)  # three orders of 黑色 M fit its stock of 5
    with adbutils_leaks_ignored(), running_sim(_scenario(outcome="EXTERNAL_CASHIER_ALIPAY")) as sim:
        agent = Agent(tmp_path, srv, creds, PhoneAdapter.connect("sim-1"), waits=fast_phone)
        assert agent.run_once() == 0
        second = srv.add_task(quantity=1)  # the same goods, SKU and amount: a second identical pending order
        assert agent.run_once() == 0
        third = srv.add_task(quantity=1)  # and a third, by an agent that knows neither earlier number
        stranger = Agent(
            tmp_path / "other", srv, srv.add_device("sim-1b"), PhoneAdapter.connect("sim-1"), waits=fast_phone
        )
        assert stranger.run_once() == 0
        entries = sim.journal("sim-1").entries()
        orders = sim.phone("sim-1").orders
    assert len([e for e in entries if e["kind"] == "tap" and e["role"] == "submit"]) == 3
    assert not payment_taps(entries) and not foreign_screenshots(entries)
    assert len(orders) == 3 and orders[0]["total"] == orders[1]["total"] == orders[2]["total"]
    assert _submission_row(srv, first.id)["order_sn"] == orders[0]["order_sn"]
    assert _submission_row(srv, second.id)["order_sn"] == orders[1]["order_sn"]
    row = _submission_row(srv, third.id)
    # the result is still reported, without a guessed order number
    assert row["observation"] == "EXTERNAL_PAYMENT_HANDOFF" and row["order_sn"] is None
    confirm = [e for e in srv.detail(third.id)["events"] if e["step"] == "CONFIRM_ORDER_READONLY"]
    assert confirm[-1]["outcome"] == "OK" and "3 pending orders match" in confirm[-1]["summary"]
    (third_attempt,) = [c.attempt_id for c in stranger.journal.claims() if c.task_id == third.id]
    assert stranger.journal.post_tap(third_attempt)["confirm_step"] == "DONE"  # type: ignore[index]


def test_confirmation_that_cannot_find_the_order_still_reports(
    tmp_path: Path, srv: RealServer, fast_phone: FlowWaits, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pack whose order-list link opens nothing on this phone (an operator's mistake, or a link the
    app stopped handling): the confirmation leaves the cashier and the dialog, opens the link, sees
    no list, stops — no order number, nothing else touched, the result reported all the same."""
    import cmbuyer.agent.runner as runner_module

    (shipped,) = [p for p in shipped_packs() if p.version_name == "8.17.0"]
    raw = copy.deepcopy(shipped.raw)
    raw["after_submit"]["confirmation"]["order_list_deep_link"] = "pinduoduo://com.xunmeng.pinduoduo/mall.html?type=1"
    monkeypatch.setattr(
        runner_module, "resolve", lambda *a, **k: Resolution(compile_pack(raw), "operator", tmp_path / "pack.json")
    )
    agent, task, entries, (order,), submit = _run_one(
        tmp_path, srv, _scenario(outcome="EXTERNAL_CASHIER_WECHAT"), fast_phone
    )
    later = _after(entries, submit["seq"])
    assert [e["kind"] for e in later if e["kind"] in ("tap", "key", "deep_link")] == ["key", "tap", "deep_link"]
    row = _submission_row(srv, task.id)
    assert row["observation"] == "EXTERNAL_PAYMENT_HANDOFF" and row["order_sn"] is None
    assert order["status"] == "pending_payment"
    detail = srv.detail(task.id)
    confirm = [e for e in detail["events"] if e["step"] == "CONFIRM_ORDER_READONLY"]
    assert confirm[-1]["outcome"] == "FAILED" and "did not open" in confirm[-1]["summary"]
    assert "ORDER_CONFIRMATION" not in kinds(detail)
    (claim,) = agent.journal.claims()
    assert agent.journal.post_tap(claim.attempt_id)["confirm_step"] == "STOPPED"  # type: ignore[index]
    assert agent.journal.submission(claim.attempt_id).phase == "RESULT_REPORTED"  # type: ignore[union-attr]


def test_sigkill_in_the_middle_of_the_confirmation(tmp_path: Path) -> None:
    with RealServer(tmp_path) as srv, running_sim(_scenario(outcome="EXTERNAL_CASHIER_ALIPAY"), set_env=False) as sim:
        task = srv.add_task()
        agent = AgentProcess(tmp_path, srv, sim.port)
        first = agent.start(pause_after="CONFIRM_STEP")
        try:
            _wait(
                lambda: "EXTERNAL_PAYMENT_HANDOFF" in _journal_state(agent.journal).get("observations", []),
                first,
                60,
                "the journaled observation",
            )
            time.sleep(0.5)  # paused right after the first confirmation step was journaled
            j = Journal(agent.journal)
            try:
                (claim,) = j.claims()
                post = j.post_tap(claim.attempt_id)
            finally:
                j.close()
            assert post is not None and post["confirm_step"] == "BACK_FROM_CASHIER"
            first.kill()
            first.wait(timeout=10)
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
        second = agent.start()
        try:
            _wait(lambda: srv.state(task.id) == "RECONCILIATION_REQUIRED", second, 60, "the recovered result")
            assert _stop(second) == 0
        finally:
            if second.poll() is None:
                second.kill()
                second.wait()
        entries = sim.journal("sim-1").entries()
        assert len([e for e in entries if e["kind"] == "tap" and e["role"] == "submit"]) == 1
        assert not payment_taps(entries) and not foreign_screenshots(entries)
        row = _submission_row(srv, task.id)
        assert row["observation"] == "EXTERNAL_PAYMENT_HANDOFF" and row["order_sn"] is None
        assert all(p == "RESULT_REPORTED" for p in _journal_state(agent.journal)["phases"])
