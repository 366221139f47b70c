"""Supervised first orders end to end on the agent's side: the REAL server (with
``CMBUYER_SUPERVISED_ORDERS`` on), the real runner + HttpDeviceApi + journal, the phone simulator through
the real uiautomator2/adbutils, and a person deciding through the admin service the drawer's 批准 / 驳回
buttons call (``services.supervision_admin.decide_approval``; the Chromium drawer test is on the admin
side).

The server's approval routes and the admin decision are built on two other branches at the same time as
this agent side; until they are merged these tests are skipped (the reason says so). Once merged they run
as part of the default suite.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cmbuyer.agent.approval import ApprovalSettings
from cmbuyer.agent.phone.adapter import PhoneAdapter
from cmbuyer.phonesim.journal import submit_taps
from cmbuyer.phonesim.testing import adbutils_leaks_ignored, running_sim

from .realserver import RealServer
from .test_real_server import Agent, steps

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("cmbuyer.server.services.supervision_admin") is None
    or importlib.util.find_spec("cmbuyer.server.services.supervision") is None,
    reason="the server side of supervision (approval routes, admin decision) is not installed",
)


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[RealServer]:
    with RealServer(tmp_path, env={"CMBUYER_SUPERVISED_ORDERS": "3"}) as server:
        yield server


POLL_FAST = ApprovalSettings(timeout_seconds=60, poll_seconds=0.3)  # what the CLI would pass from its settings


class Person:
    """The admin at the drawer: waits for a WAITING approval request, checks the phone has been waiting
    for ``after`` seconds, then decides through the admin service (its own SQLite connection)."""

    def __init__(self, srv: RealServer, action: str, after: float = 1.0) -> None:
        self.srv, self.action, self.after = srv, action, after
        self.decided: str | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from cmbuyer.server.db import connect_sync, run_in_transaction
        from cmbuyer.server.services import supervision_admin
        from cmbuyer.server.tx.common import Actor

        assert self.srv.settings is not None
        conn = connect_sync(self.srv.settings.db_path)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                row = conn.execute("SELECT id FROM approval_requests WHERE state='WAITING'").fetchone()
                if row:
                    approval_id = str(row[0])
                    time.sleep(self.after)
                    run_in_transaction(
                        conn,
                        lambda c, a=approval_id: supervision_admin.decide_approval(
                            c, a, self.action, Actor("admin", "reviewer"), self.srv.clock.now()
                        ),
                    )
                    self.decided = approval_id
                    return
                time.sleep(0.1)
        finally:
            conn.close()


def _approval_rows(srv: RealServer) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in srv.conn.execute("SELECT state, screenshot_asset_id FROM approval_requests")]


def test_first_order_waits_and_completes_once_approved(tmp_path: Path, srv: RealServer) -> None:
    creds = srv.add_device()
    task = srv.add_task()
    with adbutils_leaks_ignored(), running_sim() as sim:
        agent = Agent(tmp_path, srv, creds, PhoneAdapter.connect("sim-1"), approval=POLL_FAST)
        person = Person(srv, "approve", after=1.5)
        assert agent.run_once() == 0
        person.thread.join(5)
        assert person.decided is not None
        sim.journal("sim-1").assert_single_submit_tap()
        sim.journal("sim-1").assert_no_payment_taps()
    detail = srv.detail(task.id)
    assert detail["task"]["state"] == "WAITING_PAYMENT"
    got = steps(detail)
    assert ("APPROVAL_REQUEST", "OK") in got and ("APPROVAL_WAIT", "OK") in got
    assert got.index(("APPROVAL_WAIT", "OK")) < got.index(("FENCE", "STARTED"))
    ((state, asset),) = _approval_rows(srv)
    assert state == "VOID" or state == "APPROVED"  # an approval is voided once its attempt closes
    assert asset in {e["id"] for e in detail["evidence"] if e["kind"] == "CONFIRM_PAGE_GATE_3"}
    attempt = srv.conn.execute("SELECT supervised, pack_key FROM attempts").fetchone()
    assert attempt[0] == 1 and attempt[1].startswith("pdd-")  # claim-next named the pack in use


def test_rejected_first_order_fails_before_the_fence_without_a_tap(tmp_path: Path, srv: RealServer) -> None:
    creds = srv.add_device()
    task = srv.add_task()
    with adbutils_leaks_ignored(), running_sim() as sim:
        agent = Agent(tmp_path, srv, creds, PhoneAdapter.connect("sim-1"), approval=POLL_FAST)
        Person(srv, "reject", after=0.5)
        assert agent.run_once() == 0
        assert submit_taps(sim.journal("sim-1").entries()) == []
        assert sim.phone("sim-1").orders == []
    detail = srv.detail(task.id)
    assert detail["task"]["state"] == "FAILED"
    assert detail["task"]["state_reason"] == "REJECTED_BY_REVIEWER"
    assert ("FENCE", "STARTED") not in steps(detail)
    assert srv.conn.execute("SELECT count(*) FROM order_submissions").fetchone()[0] == 0


def _verdict(srv: RealServer, task_id: str, verdict: str) -> None:
    from cmbuyer.server.db import run_in_transaction
    from cmbuyer.server.services import supervision_admin
    from cmbuyer.server.tx.common import Actor

    submission_id = srv.detail(task_id)["submission"]["id"]
    run_in_transaction(
        srv.conn,
        lambda c: supervision_admin.record_verdict(
            c, submission_id, verdict.upper(), None, Actor("admin", "reviewer"), srv.clock.now()
        ),
    )


def test_after_n_right_orders_unsupervised_and_a_wrong_one_stops_the_phone(tmp_path: Path) -> None:
    """N = 1: the first order waits for a person; marked right, the next order of the same phone and pack
    goes straight to the fence. After 重新人工监督 the next order is supervised again; marked wrong, the
    pair is held: the heartbeat says so, the agent prints why, and claim-next hands out nothing."""
    from cmbuyer.agent.model import Session
    from cmbuyer.server.db import run_in_transaction
    from cmbuyer.server.services import supervision_admin
    from cmbuyer.server.tx.common import Actor

    with RealServer(tmp_path, env={"CMBUYER_SUPERVISED_ORDERS": "1"}) as srv, adbutils_leaks_ignored(), running_sim():
        creds = srv.add_device()
        agent = Agent(tmp_path, srv, creds, PhoneAdapter.connect("sim-1"), approval=POLL_FAST)
        first = srv.add_task(quantity=1)
        Person(srv, "approve", after=0.3)
        assert agent.run_once() == 0
        assert srv.state(first.id) == "WAITING_PAYMENT" and len(_approval_rows(srv)) == 1
        _verdict(srv, first.id, "right")

        second = srv.add_task(quantity=1)
        assert agent.run_once() == 0  # nobody approves: it must not need anybody
        assert srv.state(second.id) == "WAITING_PAYMENT" and len(_approval_rows(srv)) == 1
        assert ("APPROVAL_REQUEST", "OK") not in steps(srv.detail(second.id))

        run_in_transaction(
            srv.conn,
            lambda c: supervision_admin.resupervise(c, creds.device_id, Actor("admin", "reviewer"), srv.clock.now()),
        )
        third = srv.add_task(quantity=1)
        Person(srv, "approve", after=0.3)
        assert agent.run_once() == 0
        assert srv.state(third.id) == "WAITING_PAYMENT" and len(_approval_rows(srv)) == 2
        _verdict(srv, third.id, "wrong")

        runner = agent.runner
        status = runner._status()
        assert status.pack is not None
        runner._heartbeat(status, "READY")
        assert runner.supervision_hold and any("重新人工监督" in line for line in agent.lines)
        fourth = srv.add_task(quantity=1)
        assert agent.api.claim_next(Session(runner.session.session_id), pack_id=status.pack.id) is None
        assert srv.state(fourth.id) == "PENDING"
