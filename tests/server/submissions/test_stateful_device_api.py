"""A Hypothesis state machine over the device API: claim → events → evidence → fence →
result/fail, with random interleavings of replays, other devices acting on foreign claims, clock
moves (including exactly onto a lease end), sweeper passes and server restarts — all over real HTTP
against the real app and SQLite file. After every step the invariants of docs/architecture.md "Safety rules" are
checked on a
second connection:

- at most one ``click_permitted: true`` per authorization, ever, and only with its submission row;
- at most one attempt per authorization, one OPEN attempt per device, an attempt never changes device;
- an expired lease is never revived; states of task / authorization / attempt / submission agree;
- never a 5xx; a replay of a successful request is byte-identical (fence replays never permit);
- at the end: no claim token in any DB column or log line.

``CMBUYER_SOAK_ITERATIONS`` sets the number of examples (default small)."""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from cmbuyer.server.clock import ManualClock, from_wire, to_wire
from cmbuyer.server.config import Settings
from cmbuyer.server.tx.common import new_id
from tests.server.conftest import DeviceCreds, DeviceMaker, Maker
from tests.server.inproc import InProcServer
from tests.server.submissions import helpers
from tests.soak import soak_iterations

RENEW = "/api/v1/tasks/{}/lease/renew"
DOCUMENTED = {200, 201, 204, 400, 404, 409}
PNG = helpers.png()
JSON = "application/json"
MOSTLY_FALSE = st.sampled_from([False, False, False, True])
MOSTLY_TRUE = st.sampled_from([True, True, True, False])


class World:
    """What lives across examples (one server and DB per test run)."""

    server: InProcServer
    conn: sqlite3.Connection
    clock: ManualClock
    make_device: DeviceMaker
    make_task: Maker
    permits: Counter[str]
    tokens: set[str]
    attempt_device: dict[str, str]
    stats: Counter[str]


class DeviceApiMachine(RuleBasedStateMachine):
    w: World

    def __init__(self) -> None:
        super().__init__()
        self.devices: list[DeviceCreds] = []
        self.sessions: dict[str, str] = {}
        self.claims: dict[str, helpers.Claim] = {}  # attempt id → claim (lease updated on renew/resume)
        self.submissions: dict[str, helpers.Claim] = {}
        self.done: list[tuple[str, DeviceCreds, bytes, str, int, bytes]] = []  # successful requests
        self.fences: list[tuple[helpers.Claim, bytes, int, bytes]] = []
        self.leases_seen: dict[str, tuple[str, str]] = {}  # attempt → (lease, now) at last check

    # --- plumbing ---------------------------------------------------------------------------------------
    def post(self, path: str, dev: DeviceCreds, body: Any, content_type: str = JSON) -> tuple[int, bytes]:
        raw = body if isinstance(body, bytes) else json.dumps(body, ensure_ascii=False).encode()
        status, resp = self.w.server.request(path, dev.headers(), raw, content_type)
        assert status in DOCUMENTED, (path, status, resp)
        code = json.loads(resp).get("error", "") if status >= 400 and resp else ""
        self.w.stats[f"{path.rsplit('/', 1)[-1]} {status} {code}".strip()] += 1
        if status in (200, 201, 204):
            self.done.append((path, dev, raw, content_type, status, resp))
        return status, resp

    @initialize()
    def setup_world(self) -> None:
        self.devices = [self.w.make_device(f"d{i}") for i in range(3)]
        for _ in range(2):
            self.w.make_task(start=True)
        for d in self.devices:
            self.sessions[d.device_id] = new_id()
            assert self.post(helpers.HEARTBEAT, d, helpers.heartbeat_body(d.device_id))[0] == 200

    def _claim(self, i: int) -> helpers.Claim:
        keys = sorted(self.claims)
        return self.claims[keys[i % len(keys)]]

    def _other(self, dev: DeviceCreds) -> DeviceCreds:
        return next(d for d in self.devices if d.device_id != dev.device_id)

    def _pick(self, i: int, foreign: bool) -> tuple[helpers.Claim, DeviceCreds] | None:
        """The ``i``-th known claim and the device that sends for it (another device when ``foreign``); None
        before the first claim (no precondition: rule choice must not depend on server state)."""
        if not self.claims:
            return None
        c = self._claim(i)
        return c, (self._other(c.device) if foreign else c.device)

    # --- rules ------------------------------------------------------------------------------------------
    @rule()
    def start_task(self) -> None:
        self.w.make_task(start=True)

    @rule(i=st.integers(0, 2))
    def heartbeat(self, i: int) -> None:
        d = self.devices[i]
        assert self.post(helpers.HEARTBEAT, d, helpers.heartbeat_body(d.device_id))[0] == 200

    @rule(i=st.integers(0, 2), new_session=st.booleans())
    def claim_next(self, i: int, new_session: bool) -> None:
        d = self.devices[i]
        if new_session:
            self.sessions[d.device_id] = new_id()
        session = self.sessions[d.device_id]
        assert self.post(helpers.HEARTBEAT, d, helpers.heartbeat_body(d.device_id))[0] == 200  # as the agent does
        status, raw = self.post(helpers.CLAIM_NEXT, d, {"session_id": session, "claim_request_id": new_id()})
        assert status in (200, 204, 409)
        if status == 200:
            c = helpers.Claim.from_body(d, session, json.loads(raw))
            owner = self.w.attempt_device.setdefault(c.attempt_id, d.device_id)
            assert owner == d.device_id, "an attempt moved to another device"
            known = self.claims.get(c.attempt_id)
            assert known is None or known.token == c.token
            self.claims[c.attempt_id] = c
            self.w.tokens.add(c.token)
        elif status == 409:
            assert json.loads(raw)["error"] in ("claim_requires_manual", "app_version_not_allowed")

    def _send_picked(
        self, i: int, foreign: bool, ok: int, request: Callable[[helpers.Claim], tuple[str, Any, str]]
    ) -> None:
        """Send ``request(c)`` (path, body, content type) for the :meth:`_pick` claim ``c``: a foreign sender is
        always refused (409), the claim's own device gets ``ok`` or 409."""
        if (picked := self._pick(i, foreign)) is None:
            return
        c, dev = picked
        path, body, content_type = request(c)
        status, _ = self.post(path, dev, body, content_type)
        assert status in ((409,) if foreign else (ok, 409))

    @rule(i=st.integers(0, 50), foreign=MOSTLY_FALSE)
    def events(self, i: int, foreign: bool) -> None:
        self._send_picked(i, foreign, 200, lambda c: (helpers.events_path(c.task_id), helpers.events_body(c), JSON))

    @rule(i=st.integers(0, 50), foreign=MOSTLY_FALSE)
    def evidence(self, i: int, foreign: bool) -> None:
        self._send_picked(
            i,
            foreign,
            201,
            lambda c: (helpers.evidence_path(c.task_id), *helpers.multipart(helpers.evidence_fields(c, PNG), PNG)),
        )

    @rule(i=st.integers(0, 50), good=MOSTLY_TRUE, foreign=MOSTLY_FALSE, bump=st.booleans())
    def fence(self, i: int, good: bool, foreign: bool, bump: bool) -> None:
        if (picked := self._pick(i, foreign)) is None:
            return
        c, dev = picked
        over: dict[str, Any] = {} if good else {"quantity_read": c.quantity + 1}
        version = self.w.conn.execute("SELECT version FROM tasks WHERE id = ?", (c.task_id,)).fetchone()[0]
        over["expected_task_version"] = version if bump else c.task_version
        body = json.dumps(helpers.fence_body(c, **over), ensure_ascii=False).encode()
        status, raw = self.post(helpers.fence_path(c.attempt_id), dev, body)
        self._note_fence(c, status, raw, foreign or not good)
        self.fences.append((c, body, status, raw))

    def _note_fence(self, c: helpers.Claim, status: int, raw: bytes, must_fail: bool) -> None:
        if status != 200:
            assert status == 409, raw
            return
        assert not must_fail, raw
        answer = json.loads(raw)
        if answer["click_permitted"]:
            self.w.permits[c.authorization_id] += 1
            assert self.w.permits[c.authorization_id] == 1, "a second click permit"
            assert answer["reconciliation_required"] is False
            self.submissions[answer["submission_id"]] = c

    @rule(i=st.integers(0, 50))
    def fence_replay(self, i: int) -> None:
        if not self.fences:  # no precondition: rule choice must not depend on server state
            return
        c, body, status, raw = self.fences[i % len(self.fences)]
        status2, raw2 = self.post(helpers.fence_path(c.attempt_id), c.device, body)
        if status == 200:
            first = json.loads(raw)
            assert status2 == 200
            assert json.loads(raw2) == {**first, "click_permitted": False, "reconciliation_required": True}
        else:
            assert status2 in (200, 409)
            self._note_fence(c, status2, raw2, False)

    @rule(
        i=st.integers(0, 50), obs=st.sampled_from(["SUBMITTED", "UNKNOWN", "SECURITY_CHALLENGE"]), foreign=MOSTLY_FALSE
    )
    def result(self, i: int, obs: str, foreign: bool) -> None:
        if not self.submissions:  # no precondition: rule choice must not depend on server state
            return
        sid = sorted(self.submissions)[i % len(self.submissions)]
        c = self.submissions[sid]
        dev = self._other(c.device) if foreign else c.device
        status, _ = self.post(helpers.result_path(sid), dev, helpers.result_body(c, obs))
        assert status in ((404,) if foreign else (200, 409))

    @rule(i=st.integers(0, 50), foreign=MOSTLY_FALSE)
    def fail(self, i: int, foreign: bool) -> None:
        self._send_picked(i, foreign, 200, lambda c: (helpers.fail_path(c.attempt_id), helpers.fail_body(c), JSON))

    @rule(i=st.integers(0, 50))
    def renew(self, i: int) -> None:
        if not self.claims:  # no precondition: rule choice must not depend on server state
            return
        c = self._claim(i)
        status, raw = self.post(RENEW.format(c.task_id), c.device, helpers.renew_body(c))
        assert status in (200, 409)
        if status == 200:
            new_lease = json.loads(raw)["lease_expires_at"]
            assert new_lease >= c.lease_expires_at
            self.claims[c.attempt_id] = helpers.Claim(**{**c.__dict__, "lease_expires_at": new_lease})

    @rule(i=st.integers(0, 200))
    def replay(self, i: int) -> None:
        if not self.done:  # no precondition: rule choice must not depend on server state
            return
        path, dev, raw, ctype, status, resp = self.done[i % len(self.done)]
        if "submission-fence" in path:
            return  # fence replays have their own rule (the replay body differs from the first permit)
        if path == helpers.HEARTBEAT:
            return  # heartbeats carry no key (last writer wins)
        status2, resp2 = self.post(path, dev, raw, ctype)
        expected_status = 200 if status == 201 else status  # evidence: 201 first, 200 replays
        assert (status2, resp2) == (expected_status, resp), path

    @rule(seconds=st.sampled_from([1, 1, 1, 5, 20, 59, 119, 121, 3600]))
    def advance(self, seconds: int) -> None:
        self.w.clock.advance(seconds)

    @rule(i=st.integers(0, 50), delta_us=st.sampled_from([-1, 0, 1]))
    def to_lease_end(self, i: int, delta_us: int) -> None:
        if not self.claims:  # no precondition: rule choice must not depend on server state
            return
        row = self.w.conn.execute(
            "SELECT lease_expires_at FROM attempts WHERE id = ?", (self._claim(i).attempt_id,)
        ).fetchone()
        target = from_wire(row[0]) + timedelta(microseconds=delta_us)
        if target > self.w.clock.now():  # time never goes backwards
            self.w.clock.set(target)

    @rule()
    def sweep(self) -> None:
        self.w.server.sweep()

    @rule()
    def restart(self) -> None:
        self.w.server.stop()
        self.w.server.start()

    # --- invariants -------------------------------------------------------------------------------------
    @invariant()
    def one_fence_one_attempt_one_open_claim(self) -> None:
        conn = self.w.conn
        assert conn.execute(
            "SELECT max(n) FROM (SELECT count(*) n FROM order_submissions GROUP BY authorization_id)"
        ).fetchone()[0] in (None, 1)
        assert conn.execute(
            "SELECT max(n) FROM (SELECT count(*) n FROM attempts GROUP BY authorization_id)"
        ).fetchone()[0] in (None, 1)
        assert conn.execute(
            "SELECT max(n) FROM (SELECT count(*) n FROM attempts WHERE state = 'OPEN' GROUP BY device_id)"
        ).fetchone()[0] in (None, 1)
        for auth_id, n in self.w.permits.items():
            assert n == 1
            assert (
                conn.execute(
                    "SELECT count(*) FROM order_submissions WHERE authorization_id = ?", (auth_id,)
                ).fetchone()[0]
                == 1
            )
        for attempt_id, device_id in conn.execute("SELECT id, device_id FROM attempts"):
            assert self.w.attempt_device.setdefault(attempt_id, device_id) == device_id

    @invariant()
    def states_agree(self) -> None:
        conn = self.w.conn
        for s_state, t_state, a_state, att_state in conn.execute(
            "SELECT s.state, t.state, a.state, at.state FROM order_submissions s JOIN tasks t ON t.id = s.task_id"
            " JOIN authorizations a ON a.id = s.authorization_id JOIN attempts at ON at.id = s.attempt_id"
        ):
            assert (s_state, t_state, a_state, att_state) in {
                ("FENCED", "SUBMITTING", "FENCED", "OPEN"),
                ("SUBMITTED", "WAITING_PAYMENT", "CONSUMED", "CLOSED"),
                ("RECONCILIATION_REQUIRED", "RECONCILIATION_REQUIRED", "CONSUMED", "CLOSED"),
            }, (s_state, t_state, a_state, att_state)
        for t_state, a_state in conn.execute(
            "SELECT t.state, a.state FROM attempts at JOIN tasks t ON t.id = at.task_id"
            " JOIN authorizations a ON a.id = at.authorization_id WHERE at.state = 'OPEN'"
        ):
            assert (t_state, a_state) in {("CLAIMED", "CLAIMED"), ("ORDERING", "CLAIMED"), ("SUBMITTING", "FENCED")}, (
                t_state,
                a_state,
            )
        # a task with an attempt is never claimable again (no automatic takeover)
        assert (
            conn.execute(
                "SELECT count(*) FROM tasks t JOIN attempts at ON at.task_id = t.id WHERE t.state = 'PENDING'"
            ).fetchone()[0]
            == 0
        )

    @invariant()
    def expired_leases_stay_expired(self) -> None:
        now = to_wire(self.w.clock.now())
        for attempt_id, lease in self.w.conn.execute("SELECT id, lease_expires_at FROM attempts"):
            prev = self.leases_seen.get(attempt_id)
            if prev is not None and prev[0] <= prev[1]:
                assert lease == prev[0], "an expired lease was revived"
            self.leases_seen[attempt_id] = (lease, now)


def _scan_for_tokens(conn: sqlite3.Connection, tokens: set[str]) -> None:
    needles = set(tokens) | {hashlib.sha256(bytes.fromhex(t)).hexdigest() for t in tokens}
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for table in tables:
        for row in conn.execute(f"SELECT * FROM {table}"):
            for value in row:
                if isinstance(value, str):
                    assert not any(n in value for n in needles), f"token material in {table}"
                elif isinstance(value, bytes):
                    assert not any(bytes.fromhex(t) in value for t in tokens), f"raw token in {table}"


@pytest.mark.slow(seconds_per_iteration=10)  # a soak loop: in `make soak`, timeout scaled
def test_device_api_state_machine(
    settings: Settings,
    clock: ManualClock,
    sync_conn: sqlite3.Connection,
    make_device: DeviceMaker,
    make_task: Maker,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    world = World()
    world.server = InProcServer(settings, clock)
    world.conn, world.clock, world.make_device, world.make_task = sync_conn, clock, make_device, make_task
    world.permits, world.tokens, world.attempt_device, world.stats = Counter(), set(), {}, Counter()
    world.server.start()
    try:
        DeviceApiMachine.w = world
        run_state_machine_as_test(
            DeviceApiMachine,
            settings=hsettings(
                max_examples=soak_iterations(30),
                stateful_step_count=40,
                deadline=None,
                derandomize=False,
                # the world (a real server + DB) outlives each example, so a replayed example would see other
                # server answers: generate only, never replay or shrink (a failure is reported as it happened)
                phases=(Phase.generate,),
                database=None,
                suppress_health_check=list(HealthCheck),
            ),
        )
    finally:
        world.server.stop()
    print(f"permits: {sum(world.permits.values())}; requests: {dict(sorted(world.stats.items()))}")
    assert world.tokens, "the machine never claimed anything"
    _scan_for_tokens(sync_conn, world.tokens)
    text = caplog.text
    assert not any(t in text for t in world.tokens), "a claim token reached the logs"
