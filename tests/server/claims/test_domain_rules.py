"""The pure claim, fence and report rules (server/domain/claims.py, fence.py, reports.py) on plain rows, without
a database: exclusive time boundaries, the order of the fence's authorization refusals, and the predicates
the services ask before they write (the same rules are exercised end to end by the API suites)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from cmbuyer.server.clock import to_wire
from cmbuyer.server.domain import claim_token, claims, fence, reports
from cmbuyer.server.domain.errors import Conflict, ValidationFailed
from cmbuyer.server.domain.states import AuthorizationState, SubmissionState, TaskState

NOW = datetime(2026, 8, 4, 9, 0, tzinfo=UTC)
LATER = to_wire(NOW + timedelta(microseconds=1))
SNAP = {
    "title": "纯棉短袖",
    "product_url": "https://mobile.yangkeduo.com/goods.html?goods_id=1",
    "goods_id": "1",
    "sku_options": '[["颜色","黑色"]]',
    "quantity": 2,
    "max_total_price": "30.00",
}


@dataclass(frozen=True)
class Row:
    """A task, an authorization or an attempt: the fields the rules read."""

    state: str
    version: int = 3
    task_version: int = 3
    expires_at: str = LATER
    session_id: str = "s"
    lease_expires_at: str = LATER
    claimed_task_version: int = 4
    title: str = SNAP["title"]
    product_url: str = SNAP["product_url"]
    goods_id: str = SNAP["goods_id"]
    sku_options: str = SNAP["sku_options"]
    quantity: int = SNAP["quantity"]
    max_total_price: str = SNAP["max_total_price"]


def test_task_at_claim_is_claimed_at_the_version_or_ordering_one_later() -> None:
    assert claims.task_at_claim(Row(TaskState.CLAIMED, version=4), 4)
    assert claims.task_at_claim(Row(TaskState.ORDERING, version=5), 4)
    assert not claims.task_at_claim(Row(TaskState.ORDERING, version=4), 4)
    assert not claims.task_at_claim(Row(TaskState.CLAIMED, version=5), 4)
    assert not claims.task_at_claim(Row(TaskState.SUBMITTING, version=5), 4)


@pytest.mark.parametrize("task_state", list(TaskState))
@pytest.mark.parametrize("auth_state", list(AuthorizationState))
def test_in_progress_before_fence(task_state: TaskState, auth_state: AuthorizationState) -> None:
    expected = task_state in (TaskState.CLAIMED, TaskState.ORDERING) and auth_state == AuthorizationState.CLAIMED
    assert claims.in_progress_before_fence(Row(task_state), Row(auth_state)) == expected


def test_may_resume_needs_every_part() -> None:
    attempt, task, auth = Row("OPEN"), Row(TaskState.CLAIMED, version=4), Row(AuthorizationState.CLAIMED)
    assert claims.may_resume(attempt, task, auth, session_id="s", now=NOW)
    broken = [
        (replace(attempt, session_id="other"), task, auth),
        (replace(attempt, lease_expires_at=to_wire(NOW)), task, auth),  # equal = expired
        (attempt, replace(task, version=5), auth),
        (attempt, task, replace(auth, state=AuthorizationState.FENCED)),
        (attempt, task, replace(auth, expires_at=to_wire(NOW))),
        (attempt, task, replace(auth, title="改")),
        (attempt, task, replace(auth, task_version=2)),
    ]
    for a, t, z in broken:
        assert not claims.may_resume(a, t, z, session_id="s", now=NOW), (a, t, z)


@pytest.mark.parametrize(
    ("task_state", "auth_state", "ok"),
    [
        (TaskState.CLAIMED, AuthorizationState.CLAIMED, True),
        (TaskState.ORDERING, AuthorizationState.CLAIMED, True),
        (TaskState.SUBMITTING, AuthorizationState.FENCED, True),
        (TaskState.SUBMITTING, AuthorizationState.CLAIMED, False),
        (TaskState.WAITING_PAYMENT, AuthorizationState.CONSUMED, False),
        (TaskState.PENDING, AuthorizationState.ACTIVE, False),
    ],
)
def test_renewable(task_state: TaskState, auth_state: AuthorizationState, ok: bool) -> None:
    task, auth = Row(task_state, version=4), Row(auth_state)
    assert claims.renewable(task, auth, 4, NOW) == ok
    assert not claims.renewable(task, replace(auth, expires_at=to_wire(NOW)), 4, NOW)  # nothing expired is revived
    assert not claims.renewable(task, replace(auth, sku_options='[["颜色","黑色"],["尺码","M"]]'), 4, NOW)
    assert not claims.renewable(task, auth, 5, NOW)  # the task behind the claim's version


def test_the_heartbeat_gate() -> None:
    policy = claims.ClaimPolicy(b"k" * 32, 120, ("8.17.0",), 10, 3)
    fresh = SimpleNamespace(last_heartbeat_at=to_wire(NOW - timedelta(seconds=29)), reported_state="READY")
    assert claims.may_claim(SimpleNamespace(**vars(fresh), pdd_version="8.17.0"), NOW, policy)
    for over in (
        {"pdd_version": "8.18.0"},
        {"pdd_version": None},
        {"pdd_version": "8.17.0", "reported_state": "BUSY"},
        {"pdd_version": "8.17.0", "last_heartbeat_at": to_wire(NOW - timedelta(seconds=30))},  # interval × factor
        {"pdd_version": "8.17.0", "last_heartbeat_at": None},
    ):
        assert not claims.may_claim(SimpleNamespace(**{**vars(fresh), **over}), NOW, policy), over
    assert claims.version_allowed("8.17.0", ("8.17.0",)) and not claims.version_allowed(None, ("8.17.0",))


def test_claim_is_current_always_compares_the_token() -> None:
    token = "ab" * 32
    attempt = SimpleNamespace(
        device_id="d",
        task_id="t",
        state="OPEN",
        claim_generation=1,
        token_hash=claim_token.token_hash(token),
        lease_expires_at=LATER,
    )
    assert claims.claim_is_current(attempt, device_id="d", token=token, now=NOW, generation=1, task_id="t")
    assert not claims.claim_is_current(attempt, device_id="d", token="cd" * 32, now=NOW)
    assert not claims.claim_is_current(attempt, device_id="e", token=token, now=NOW)
    assert not claims.claim_is_current(attempt, device_id="d", token=token, now=NOW, generation=2)
    assert not claims.claim_is_current(attempt, device_id="d", token=token, now=NOW, task_id="u")
    late = NOW + timedelta(microseconds=1)  # now == lease end: expired, unless the lease is not required
    assert not claims.claim_is_current(attempt, device_id="d", token=token, now=late)
    assert claims.claim_is_current(attempt, device_id="d", token=token, now=late, require_lease=False)
    closed = SimpleNamespace(**{**vars(attempt), "state": "CLOSED"})
    assert not claims.claim_is_current(closed, device_id="d", token=token, now=NOW, require_lease=False)


def test_fence_authorization_refusals_in_order() -> None:
    task, auth = Row(TaskState.CLAIMED), Row(AuthorizationState.CLAIMED)
    fence.check_authorization(auth, task, NOW)
    cases = [
        (
            replace(auth, state=AuthorizationState.FENCED, expires_at=to_wire(NOW), title="x"),
            "authorization_not_claimed",
        ),
        (replace(auth, expires_at=to_wire(NOW), title="x"), "authorization_expired"),
        (replace(auth, title="x"), "snapshot_mismatch"),
    ]
    for bad, word in cases:
        with pytest.raises(fence.FenceRefused) as refused:
            fence.check_authorization(bad, task, NOW)
        assert (refused.value.code, refused.value.detail) == ("fence_refused", word)
    assert (fence.submission_fenced().code, fence.version_conflict().code) == ("submission_fenced", "version_conflict")


def test_report_rules() -> None:
    assert reports.check_summary("闸门一通过") == "闸门一通过"
    with pytest.raises(ValidationFailed):
        reports.check_summary("收货人 13812345678")
    attempt = SimpleNamespace(device_id="d", task_id="t", state="OPEN")
    assert reports.may_attach(attempt, device_id="d", task_id="t")
    assert not reports.may_attach(None, device_id="d", task_id="t")
    assert not reports.may_attach(SimpleNamespace(**{**vars(attempt), "state": "CLOSED"}), device_id="d", task_id="t")
    assert not reports.may_attach(attempt, device_id="e", task_id="t")
    assert not reports.may_attach(attempt, device_id="d", task_id="u")
    own = SimpleNamespace(attempt_id="a", kind=reports.SCREENSHOT_KIND)
    reports.check_asset(None, None, "a")  # no asset named: nothing to check
    reports.check_asset("x", own, "a")
    for asset in (None, SimpleNamespace(attempt_id="b", kind=reports.SCREENSHOT_KIND)):
        with pytest.raises(Conflict) as conflict:
            reports.check_asset("x", asset, "a")
        assert conflict.value.code == "evidence_conflict"
    reports.check_screenshot(own, "a")
    for shot in (None, SimpleNamespace(attempt_id="a", kind="SKU_PANEL_GATE_1"), replace_ns(own, attempt_id="b")):
        with pytest.raises(reports.ScreenshotRefused):
            reports.check_screenshot(shot, "a")


def test_result_rules() -> None:
    for state in SubmissionState:
        expected = state in (SubmissionState.FENCED, SubmissionState.RECONCILIATION_REQUIRED)
        assert reports.awaits_result(SimpleNamespace(state=state, observation=None)) == expected
        assert not reports.awaits_result(SimpleNamespace(state=state, observation="SUBMITTED"))
    assert reports.may_report_result(SimpleNamespace(state="OPEN", close_reason=None))
    assert reports.may_report_result(SimpleNamespace(state="CLOSED", close_reason=reports.SWEEPER_CLOSE_REASON))
    assert not reports.may_report_result(SimpleNamespace(state="CLOSED", close_reason="FAILED"))
    assert reports.result_use_case("SUBMITTED") == "result_submitted"
    for observation in ("EXTERNAL_PAYMENT_HANDOFF", "SECURITY_CHALLENGE", "UNKNOWN"):
        assert reports.result_use_case(observation) == "result_needs_reconciliation"


def replace_ns(ns: SimpleNamespace, **over: object) -> SimpleNamespace:
    return SimpleNamespace(**{**vars(ns), **over})
