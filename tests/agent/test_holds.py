"""The hold policy (agent/holds.py): the reason-code table, the streak rules, their journal storage,
the settings and the new risk-wall words."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cmbuyer.agent.holds import (
    REASON_SCOPES,
    AttemptEnd,
    HoldPolicy,
    Scope,
    Streaks,
    scope_of,
    settle,
)
from cmbuyer.agent.journal import Journal
from cmbuyer.agent.screens import safety
from cmbuyer.agent.screens.dump import parse_dump

SCHEMA = Path(__file__).resolve().parents[2] / "shared" / "schemas" / "common.json"
POLICY = HoldPolicy()


def _enum(name: str) -> set[str]:
    return set(json.loads(SCHEMA.read_text(encoding="utf-8"))["$defs"][name]["enum"])


def test_every_wire_reason_code_and_observation_reason_is_classified_once() -> None:
    wire = _enum("reason_code") | _enum("observation_reason")
    assert set(REASON_SCOPES) == wire, (sorted(wire - set(REASON_SCOPES)), sorted(set(REASON_SCOPES) - wire))


# The codes whose scope is the task (the phone goes on) and those that hold the phone at once, written out
# here (not read from REASON_SCOPES) so a change of scope must be a change of this file too.
TASK_LEVEL_CODES = (
    "OUT_OF_STOCK PRICE_OVER_CAP SKU_VALUE_MISSING SKU_DIMENSION_UNNAMED PRICE_CHANGED QUANTITY_CAPPED_BY_STOCK "
    "TOTAL_ABOVE_ITEMS"
).split()
PHONE_LEVEL_CODES = (
    "PAYMENT_MODE_UNSAFE RISK_WALL SECURITY_CHALLENGE APP_UPDATE_PROMPT SCREEN_UNRECOGNIZED POPUP_UNHANDLED "
    "PAYMENT_SUSPECTED WRONG_PACKAGE"
).split()


@pytest.mark.parametrize("code", TASK_LEVEL_CODES)
def test_task_level_codes(code: str) -> None:
    assert scope_of(code) is Scope.TASK
    assert settle(Streaks(), AttemptEnd("FAILED", code, fenced=False), POLICY) == (Streaks(0, 1), None)


@pytest.mark.parametrize("code", PHONE_LEVEL_CODES)
def test_phone_level_codes_hold_at_once(code: str) -> None:
    assert scope_of(code) is Scope.PHONE
    after, hold = settle(Streaks(), AttemptEnd("FAILED", code, fenced=False), POLICY)
    assert hold is not None and hold.startswith(code) and after == Streaks(0, 1)


def test_payment_suspected_after_the_tap_holds() -> None:
    """The post-tap helper returns outcome UNKNOWN with reason PAYMENT_SUSPECTED: hold."""
    after, hold = settle(Streaks(1, 2), AttemptEnd("UNKNOWN", "PAYMENT_SUSPECTED", fenced=True), POLICY)
    assert hold is not None and hold.startswith("PAYMENT_SUSPECTED")
    assert after == Streaks(0, 0)  # it passed the fence: the pre-fence streak ends


def test_unknown_code_is_phone_level_fail_closed() -> None:
    assert scope_of("SOMETHING_NEW") is Scope.PHONE
    assert scope_of(None) is None


def test_three_consecutive_pre_fence_failures_hold_repeated_failures() -> None:
    s = Streaks()
    for code in ("DUMP_INVALID", "OUT_OF_STOCK"):
        s, hold = settle(s, AttemptEnd("FAILED", code, fenced=False), POLICY)
        assert hold is None
    s, hold = settle(s, AttemptEnd("FAILED", "ADB_ERROR", fenced=False), POLICY)
    assert s.failures == 3 and hold is not None and hold.startswith("REPEATED_FAILURES")
    assert "ADB_ERROR" in hold


def test_an_order_or_a_fenced_attempt_ends_the_pre_fence_streak() -> None:
    assert settle(Streaks(1, 2), AttemptEnd("SUBMITTED", None, fenced=True), POLICY) == (Streaks(), None)
    assert settle(Streaks(1, 2), AttemptEnd("EXTERNAL_PAYMENT_HANDOFF", None, fenced=True), POLICY) == (Streaks(), None)
    assert settle(Streaks(0, 2), AttemptEnd("UNKNOWN", "TAP_OUTCOME_UNKNOWN", fenced=True), POLICY) == (
        Streaks(0, 0),
        None,
    )


def test_shutdown_neither_counts_nor_breaks_a_streak() -> None:
    assert settle(Streaks(1, 2), AttemptEnd("FAILED", "SHUTDOWN", fenced=False), POLICY) == (Streaks(1, 2), None)


def test_crash_loop_two_crashes_or_internal_errors_in_a_row_hold() -> None:
    s, hold = settle(Streaks(), AttemptEnd("CRASHED", None, fenced=False), POLICY)
    assert s == Streaks(1, 1) and hold is None
    s, hold = settle(s, AttemptEnd("FAILED", "INTERNAL_ERROR", fenced=False), POLICY)
    assert s == Streaks(2, 2) and hold is not None and "反复崩溃（crash loop）" in hold
    # a different ending in between breaks the crash streak (not the pre-fence one)
    s, _ = settle(Streaks(1, 1), AttemptEnd("FAILED", "OUT_OF_STOCK", fenced=False), POLICY)
    assert s == Streaks(0, 2)
    # a crash after the fence is a crash, not a pre-fence failure
    s, hold = settle(Streaks(1, 2), AttemptEnd("CRASHED", None, fenced=True), POLICY)
    assert s == Streaks(2, 0) and hold is not None


def test_limits_are_settings() -> None:
    """Read by agent/settings.py: the flag beats the variable, which beats the default."""
    from cmbuyer.agent.settings import load_agent_settings

    policy = load_agent_settings(
        environ={"CMBUYER_AGENT_CRASH_LOOP_LIMIT": "5", "CMBUYER_AGENT_FAILURE_LIMIT": "1"}
    ).holds
    assert policy == HoldPolicy(5, 1)
    flag = load_agent_settings({"crash_loop_limit": 3}, {"CMBUYER_AGENT_CRASH_LOOP_LIMIT": "5"})
    assert flag.holds.crash_loop_limit == 3
    assert load_agent_settings(environ={}).holds == HoldPolicy(2, 3)
    _, hold = settle(Streaks(), AttemptEnd("FAILED", "OUT_OF_STOCK", fenced=False), policy)
    assert hold is not None and hold.startswith("REPEATED_FAILURES")
    for bad in (
        {"CMBUYER_AGENT_FAILURE_LIMIT": "0"},
        {"CMBUYER_AGENT_CRASH_LOOP_LIMIT": "two"},
        {"CMBUYER_AGENT_FAILURE_LIMIT": "-1"},
    ):
        with pytest.raises(ValueError):
            load_agent_settings(environ=bad)


def test_cli_refuses_a_bad_limit_before_touching_anything(tmp_path: Path) -> None:
    agent = str(Path(sys.executable).parent / "cmbuyer-agent")
    out = subprocess.run(
        [agent, "run", "--device", "x", "--failure-limit", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "CMBUYER_AGENT_STATE_DIR": str(tmp_path)},
    )
    assert out.returncode == 2 and "failure_limit 必须是 >= 1 的整数" in out.stderr
    assert list(tmp_path.iterdir()) == []


# --- journal storage ---------------------------------------------------------------------------
def _decide(end: AttemptEnd, policy: HoldPolicy = POLICY):  # type: ignore[no-untyped-def]
    def decide(crashes: int, failures: int) -> tuple[int, int, str | None]:
        after, hold = settle(Streaks(crashes, failures), end, policy)
        return after.crashes, after.failures, hold

    return decide


def test_streaks_survive_a_restart_count_each_attempt_once_and_clear_with_the_hold(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    j = Journal(path)
    crash = AttemptEnd("CRASHED", None, fenced=False)
    assert j.settle_attempt("a1", _decide(crash)) is None
    assert j.settle_attempt("a1", _decide(crash)) is None  # the same attempt seen on a second restart
    assert j.streaks() == (1, 1)
    j.close()
    j = Journal(path)
    hold = j.settle_attempt("a2", _decide(crash))
    assert hold is not None and j.hold() == hold and j.streaks() == (2, 2)
    assert j.summary()["streaks"] == {"crashes": 2, "failures": 2}
    j.clear_hold()
    assert j.hold() is None and j.streaks() == (0, 0)


def test_an_earlier_hold_is_kept(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.sqlite3")
    j.set_hold("the server refused fail: a person must act")
    shown = j.settle_attempt("a1", _decide(AttemptEnd("FAILED", "RISK_WALL", fenced=False)))
    assert j.hold() == shown == "the server refused fail: a person must act"


# --- risk walls ----------------------------------------------------------------
def _app_dump(*texts: str) -> str:
    nodes = "".join(
        f'<node text="{t}" package="com.xunmeng.pinduoduo" bounds="[0,{i * 10}][9,{i * 10 + 9}]"/>'
        for i, t in enumerate(texts)
    )
    return (
        f'<hierarchy rotation="0"><node package="com.xunmeng.pinduoduo" bounds="[0,0][9,99]">{nodes}</node></hierarchy>'
    )


@pytest.mark.parametrize(
    "text,term",
    [
        ("请将正脸置于框内", "请将正脸置于框内"),
        ("您的账号存在风险", "账号存在风险"),
        ("检测到账户存在风险，已限制部分操作", "账户存在风险"),
        ("请提交实名信息", "提交实名信息"),
        ("请完成实名后继续", "请完成实名"),
        ("上传身份证正反面", "上传身份证"),
        ("活动太火爆，请稍后", "活动太火爆"),
    ],
)
def test_new_risk_walls(text: str, term: str) -> None:
    assert term in safety.risk_walls(parse_dump(_app_dump("标题", text)))


def test_real_name_words_in_ordinary_texts_are_not_walls() -> None:
    assert safety.risk_walls(parse_dump(_app_dump("实名制购票", "官方实名商家", "¥12.88"))) == []
