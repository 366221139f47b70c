"""Readable admin pages for a purchasing team: Chinese labels for every code (with the code kept in
small grey text / a title), explained product terms, technical details collapsed, the reconcile action
under 操作, and the friendlier money input of the HTML form (the APIs stay canonical)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.schemas import SchemaError, validate
from cmbuyer.server.display import labels
from cmbuyer.server.display.labels import TASK_STATE_LABELS
from cmbuyer.server.display.times import audit_value
from cmbuyer.server.domain.errors import ValidationFailed
from cmbuyer.server.domain.states import (
    AttemptState,
    AuthorizationState,
    SubmissionState,
    TaskState,
)
from cmbuyer.server.domain.task_fields import person_money as form_money
from cmbuyer.server.tx.common import new_id
from tests.device_bodies import fence_request

from .conftest import AdminClient
from .test_tasks import form

ROOT = Path(__file__).resolve().parents[3]
COMMON = json.loads((ROOT / "shared" / "schemas" / "common.json").read_text(encoding="utf-8"))["$defs"]
ENUM_TABLES = {
    "step": labels.STEP_LABELS,
    "outcome": labels.OUTCOME_LABELS,
    "reason_code": labels.REASON_CODE_LABELS,
    "observation": labels.OBSERVATION_LABELS,
    "evidence_kind": labels.EVIDENCE_KIND_LABELS,
    "observation_reason": labels.OBSERVATION_REASON_LABELS,
    "no_tap_reason": labels.OBSERVATION_REASON_LABELS,
    "device_state": labels.DEVICE_STATE_LABELS,
    "task_state": {s.value: v for s, v in TASK_STATE_LABELS.items()},
}
CJK = re.compile(r"[\u4e00-\u9fff]")


def _check_table(values: list[str], table: dict[str, str]) -> None:
    missing = [v for v in values if v not in table]
    assert not missing, f"no Chinese label for {missing}"
    for v in values:
        assert CJK.search(table[v]), f"label of {v} is not Chinese: {table[v]!r}"


def test_every_enum_of_the_wire_schema_has_a_chinese_label() -> None:
    enums = {name: d["enum"] for name, d in COMMON.items() if "enum" in d}
    unmapped = set(enums) - set(ENUM_TABLES)
    assert not unmapped, f"new enum(s) in common.json need a label table: {unmapped}"
    for name, values in enums.items():
        _check_table(values, ENUM_TABLES[name])


def _check_values(sql: str, column: str) -> list[str]:
    m = re.search(column + r"\s+TEXT[^,]*?CHECK \(" + column + r" IN \(([^)]*)\)", sql, re.S)
    assert m, column
    return re.findall(r"'([A-Z_0-9]+)'", m.group(1))


def test_every_state_and_close_reason_has_a_chinese_label() -> None:
    sql = (ROOT / "migrations" / "0002_claims_submissions.sql").read_text(encoding="utf-8")
    close_reasons = _check_values(sql, "close_reason")
    assert "LEASE_EXPIRED_AFTER_FENCE" in close_reasons
    _check_table(close_reasons, labels.ATTEMPT_CLOSE_REASON_LABELS)
    _check_table(_check_values(sql, "kind"), labels.EVIDENCE_KIND_LABELS)
    _check_table(_check_values(sql, "observation"), labels.OBSERVATION_LABELS)
    _check_table(_check_values(sql, "state"), {**labels.ATTEMPT_STATE_LABELS, **labels.SUBMISSION_STATE_LABELS})
    _check_table([s.value for s in AuthorizationState], labels.AUTHORIZATION_STATE_LABELS)
    _check_table([s.value for s in AttemptState], labels.ATTEMPT_STATE_LABELS)
    _check_table([s.value for s in SubmissionState], labels.SUBMISSION_STATE_LABELS)
    _check_table([s.value for s in TaskState], {s.value: v for s, v in TASK_STATE_LABELS.items()})


def _service_reasons() -> set[str]:
    """Every literal ``reason=`` / close reason the services (and their shared tx/ helpers) write."""
    found: set[str] = set()
    for path in [*(ROOT / "server" / "services").glob("*.py"), *(ROOT / "server" / "tx").glob("*.py")]:
        text = path.read_text(encoding="utf-8")
        found |= set(re.findall(r'reason="([A-Za-z_]+)"', text))
        found |= set(re.findall(r'_REASON = "([A-Za-z_]+)"', text))
        found |= set(re.findall(r'attempt_store\.close\([^)]*"([A-Z_]+)"', text))
        found |= set(re.findall(r'open_attempt_of_task\([^)]*"([A-Z_]+)"', text))
        found |= {m.upper() for m in re.findall(r'"(RESET|CANCELLED)", actor', text)}
    return found


def test_every_state_reason_written_by_the_services_has_a_label() -> None:
    reasons = _service_reasons()
    assert {"PAID_BY_PERSON", "authorization_expired", "LEASE_EXPIRED_NO_RESULT", "RECONCILED"} <= reasons
    for code in [*reasons, "RECONCILED_CREATED", "RECONCILED_NOT_CREATED"]:
        assert labels.reason_label(code) != code and CJK.search(labels.reason_label(code)), code
    # composed reasons: result:<observation>, device_fail:<reason_code>, a bare device reason code
    for obs in COMMON["observation"]["enum"]:
        assert labels.reason_label(f"result:{obs}") == f"提交结果：{labels.OBSERVATION_LABELS[obs]}"
    for code in COMMON["reason_code"]["enum"]:
        assert labels.reason_label(f"device_fail:{code}") == f"设备失败：{labels.REASON_CODE_LABELS[code]}"
        assert labels.reason_label(code) == labels.REASON_CODE_LABELS[code]
    assert labels.reason_label("result:SECURITY_CHALLENGE") == "提交结果：出现安全验证"
    assert labels.reason_label("restored_from_replica:CLAIMED") == "数据库恢复后暂停，恢复时为：已领取"
    assert labels.reason_label("SOMETHING_NEW") == "SOMETHING_NEW"  # unknown: the raw code, never an error
    assert labels.reason_label(None) == ""


def test_every_audit_action_written_by_the_services_has_a_label() -> None:
    actions: set[str] = set()
    for path in [*(ROOT / "server" / "services").glob("*.py"), *(ROOT / "server" / "tx").glob("*.py")]:
        actions |= set(re.findall(r'action="([a-z_.]+)"', path.read_text(encoding="utf-8")))
    actions |= {"task.reset_to_draft", "task.cancel", "task.release"}  # action=f"task.{use_case}"
    missing = sorted(a for a in actions if a not in labels.AUDIT_ACTION_LABELS)
    assert not missing


def test_examples_from_the_purchasing_team() -> None:
    assert labels.REASON_CODE_LABELS["PRICE_OVER_CAP"] == "确认页总价超过上限"
    assert labels.REASON_CODE_LABELS["SECURITY_CHALLENGE"] == "出现安全验证"
    assert labels.STEP_LABELS["OBSERVE_RESULT"] == "观察提交结果"
    assert labels.EVIDENCE_KIND_LABELS["SKU_PANEL_GATE_1"] == "闸门一：规格面板"
    assert TASK_STATE_LABELS[TaskState.RECONCILIATION_REQUIRED] == "待人工核对"
    for word in ("围栏", "闸门", "代次", "锁定版本"):
        assert len(labels.GLOSSARY[word]) > 10


def test_audit_values_in_beijing_time() -> None:
    assert audit_value("2026-08-04T09:00:01.123456Z") == "2026-08-04 17:00:01"
    assert audit_value("2026-08-04T16:30:00Z") == "2026-08-05 00:30:00"
    assert audit_value(None) == "-"
    assert audit_value(3) == "3" and audit_value("30.00") == "30.00"


# -- pages ---------------------------------------------------------------------------------------------------


async def test_list_progress_column_in_chinese_with_codes(
    admin_client: AdminClient, make_task: Any, make_device: Any, seed: Any
) -> None:
    task = make_task(start=True)
    attempt = seed.claim(task.id, make_device().device_id, ordering=True)
    seed.events(
        task.id,
        attempt,
        [
            ("GATE_3", "FAILED", "PRICE_OVER_CAP", "gate 3: total over the cap"),
            ("BACK_OUT", "OK", "PRICE_OVER_CAP", "backed out before fence"),
        ],
    )
    html = await (await admin_client.client.get("/tasks")).text()
    row = html[html.index(f'data-task-id="{task.id}"') :]
    row = row[: row.index("</tr>")]
    assert "退出下单（未提交） · 确认页总价超过上限" in row
    assert 'title="BACK_OUT · OK · PRICE_OVER_CAP"' in row  # the code stays available
    assert ">BACK_OUT" not in row  # not shown as the visible text
    assert 'title="ORDERING">下单中<' in row
    assert 'class="num ver"' in row  # version kept (expected-version checks) but de-emphasized
    assert "术语说明" in html and "围栏" in html


async def test_detail_in_chinese_with_codes_and_tooltips(
    admin_client: AdminClient, make_task: Any, make_device: Any, seed: Any
) -> None:
    task = make_task(start=True)
    device = make_device("核对机")
    attempt = seed.claim(task.id, device.device_id, ordering=True)
    seed.events(
        task.id, attempt, [("OPEN_PRODUCT", "OK", None, "open product"), ("OBSERVE_RESULT", "OK", None, "observed")]
    )
    seed.evidence(task.id, attempt, device.device_id)
    sid = seed.fence(task.id, attempt, device.device_id, observation="SECURITY_CHALLENGE")
    seed._tx(
        lambda c: c.execute("UPDATE tasks SET state_reason = 'result:SECURITY_CHALLENGE' WHERE id = ?", (task.id,))
    )
    html = await (await admin_client.client.get(f"/tasks/{task.id}")).text()
    # reason, states, timeline, evidence: Chinese label first, code in small grey text
    assert '<span class="coded" title="result:SECURITY_CHALLENGE">提交结果：出现安全验证</span>' in html
    assert '<code class="code">result:SECURITY_CHALLENGE</code>' in html
    assert "待人工核对" in html and "已用完" in html and "CONSUMED" in html  # authorization state
    assert "已上报提交结果" in html and "REPORTED" in html  # attempt close reason
    assert "观察提交结果" in html and "打开商品页" in html and "OBSERVE_RESULT" in html
    assert "闸门一：规格面板" in html and "SKU_PANEL_GATE_1" in html
    assert 'alt="闸门一：规格面板"' in html
    # jargon keeps its name but explains itself
    for word in ("锁定版本", "代次", "闸门一", "闸门二"):
        assert re.search(r'<span class="term" title="[^"]{10,}">' + word + "</span>", html), word
    assert "单价（闸门一/二）" not in html
    # the reconcile form is under 操作, before the authorizations
    actions = html[html.index("<h3>操作</h3>") : html.index("<h3>授权</h3>")]
    assert f'action="/order-submissions/{sid}/reconcile"' in actions
    assert "记录核对结果" in actions and "人工调和" not in html
    # ids and the audit trail are collapsed under 技术细节, with Beijing times
    tech = html[html.index('<details class="tech"') : html.index("</details>", html.index('<details class="tech"'))]
    assert "<summary>技术细节</summary>" in tech
    assert task.id in tech and sid in tech and attempt in tech
    assert "开始采购" in tech and "task.start_purchase" in tech
    visible = re.sub(r"<[^>]*>", " ", html)
    assert re.search(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z", visible) is None  # no raw UTC text shown
    assert "expires_at=" in tech  # the audit detail's UTC time, shown in Beijing time
    assert "<dt>任务 id</dt>" not in html[: html.index('<details class="tech"')]


async def test_failed_task_reason_is_the_device_reason_in_chinese(
    admin_client: AdminClient, make_task: Any, make_device: Any, seed: Any
) -> None:
    task = make_task(start=True)
    attempt = seed.claim(task.id, make_device().device_id)
    seed.fail(task.id, attempt)
    seed._tx(lambda c: c.execute("UPDATE tasks SET state_reason = 'PRICE_OVER_CAP' WHERE id = ?", (task.id,)))
    html = await (await admin_client.client.get(f"/tasks/{task.id}")).text()
    assert '<span class="coded" title="PRICE_OVER_CAP">确认页总价超过上限</span>' in html
    assert "设备报告失败" in html  # attempt/authorization close reason FAILED


async def test_labels_are_escaped(admin_client: AdminClient, make_task: Any, seed: Any) -> None:
    task = make_task(start=True)
    seed._tx(
        lambda c: c.execute(
            "UPDATE tasks SET state_reason = ? WHERE id = ?", ('<img src=x onerror=alert(1)>"', task.id)
        )
    )
    html = await (await admin_client.client.get(f"/tasks/{task.id}")).text()
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html


# -- money in the HTML form vs the APIs ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "stored"),
    [("30", "30.00"), ("30.0", "30.00"), ("30.00", "30.00"), ("0.5", "0.50"), ("12.8", "12.80"), ("7", "7.00")],
)
async def test_form_accepts_short_money_and_normalizes(
    admin_client: AdminClient, sync_conn: Any, typed: str, stored: str
) -> None:
    resp = await admin_client.post_form("/tasks", form(max_total_price=typed))
    assert resp.status == 303, await resp.text()
    assert sync_conn.execute("SELECT max_total_price FROM tasks").fetchone()[0] == stored


@pytest.mark.parametrize(
    "typed",
    [
        "30.001",
        "-30",
        "+30",
        "30.",
        ".5",
        "3e1",
        " 30",
        "30 ",
        "３０",
        "030",
        "30,00",
        "",
        "abc",
        "1e2.00",
        "0x1e",
        "٣٠",
    ],
)
async def test_form_still_refuses_malformed_money(admin_client: AdminClient, sync_conn: Any, typed: str) -> None:
    resp = await admin_client.post_form("/tasks", form(max_total_price=typed, title="保留"))
    assert resp.status == 400
    html = await resp.text()
    assert "最高总价" in html and "例如 30 或 30.00" in html and 'value="保留"' in html
    assert sync_conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 0


async def test_form_money_range_still_checked(admin_client: AdminClient, sync_conn: Any, settings: Any) -> None:
    over = str(int(settings.max_total_price) + 1)
    resp = await admin_client.post_form("/tasks", form(max_total_price=over))
    assert resp.status == 400 and "金额必须在" in await resp.text()
    resp = await admin_client.post_form("/tasks", form(max_total_price="0"))
    assert resp.status == 400
    assert sync_conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 0


async def test_form_replay_with_short_money_is_the_same_task(admin_client: AdminClient, sync_conn: Any) -> None:
    key = new_id()
    assert (await admin_client.post_form("/tasks", form(create_key=key, max_total_price="30"))).status == 303
    assert (await admin_client.post_form("/tasks", form(create_key=key, max_total_price="30.00"))).status == 303
    assert sync_conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 1


@pytest.mark.parametrize("value", ["30", "30.0", "30.000", "030.00"])
async def test_json_api_money_stays_canonical(admin_client: AdminClient, sync_conn: Any, value: str) -> None:
    from .test_tasks import body

    resp = await admin_client.post_json("/tasks", body(max_total_price=value))
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == "invalid_request"
    assert sync_conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 0


@pytest.mark.parametrize("value", ["30", "30.0", "12.8"])
def test_device_api_money_stays_canonical(value: str) -> None:
    fence = fence_request()
    validate("submission_fence.request", fence)
    for field in ("gate1_unit_price", "gate2_unit_price", "gate3_unit_price", "confirm_page_amount"):
        with pytest.raises(SchemaError):
            validate("submission_fence.request", {**fence, field: value})


def test_form_money_helper() -> None:
    assert form_money("m", "30") == "30.00" and form_money("m", "0.5") == "0.50"
    assert form_money("m", "123456789.99") == "123456789.99"
    for bad in ("1234567890", "30.", "-1", "1_000", "3e1", None, 30):
        with pytest.raises(ValidationFailed):
            form_money("m", bad)


def test_an_invalid_state_refusal_reads_in_chinese_on_the_pages_and_the_cli() -> None:
    """``mark_paid is not allowed in state FAILED`` is worded from the label tables (the use-case as
    its audit action, the state as its task state label); a refusal without a use-case keeps its message."""
    from cmbuyer.server.display.labels import refusal_message
    from cmbuyer.server.domain.codes import Code
    from cmbuyer.server.domain.errors import InvalidTransition, refusal
    from cmbuyer.server.domain.states import TASK_TRANSITIONS, TaskState, transition
    from cmbuyer.server.web.admin.render import domain_refusal

    with pytest.raises(InvalidTransition) as caught:
        transition(TASK_TRANSITIONS, TaskState.FAILED, "mark_paid")
    assert refusal_message(caught.value) == "任务状态为失败（FAILED）时不能标记已付款"
    assert domain_refusal(caught.value).message == "任务状态为失败（FAILED）时不能标记已付款"
    assert domain_refusal(caught.value).code == "invalid_state"
    other = refusal(Code.INVALID_STATE, "预览已过期")
    assert refusal_message(other) == "预览已过期"


def test_every_reason_a_service_raises_is_worded_in_the_one_table() -> None:
    """Services raise a code and a reason (``DomainError.because``); ``display/labels.py`` ``REFUSAL_TEXTS``
    is the one place that words them. Every reason named under server/ has a sentence, every sentence's
    placeholders are facts some raiser gives, and a fact that is a code is worded through its label table."""
    import ast
    import string
    from pathlib import Path

    from cmbuyer.server.display.labels import REFUSAL_TEXTS, refusal_message
    from cmbuyer.server.domain.codes import Code
    from cmbuyer.server.domain.errors import refusal

    server = Path(labels.__file__).resolve().parents[1]
    raised: dict[str, set[str]] = {}
    for path in server.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "because":
                why = node.args[0]
                assert isinstance(why, ast.Constant), f"{path.name}:{node.lineno}: a reason is a literal"
                raised.setdefault(why.value, set()).update(k.arg for k in node.keywords if k.arg)
    assert {"decided", "verdict", "revoked", "admin"} <= set(raised)  # the scan reads the raisers
    # … and those of the task services, the draft transaction and the device side
    assert {"task", "task_changed", "start_key", "edit_not_draft", "create_key", "result", "screen_answered"} <= set(
        raised
    )
    assert raised["reconcile_note"] == {"max"}
    table_whys = {why for _, why in REFUSAL_TEXTS}
    assert set(raised) <= table_whys, set(raised) - table_whys
    for (code, why), text in REFUSAL_TEXTS.items():
        assert isinstance(code, Code)
        names = {f for _, f, _, _ in string.Formatter().parse(text) if f}
        assert names <= raised.get(why, set()), (code, why, names)
    decided = refusal(Code.APPROVAL_NOT_WAITING).because("decided", who="admin:ops", approval_state="APPROVED")
    assert refusal_message(decided) == "这个确认请求已由 admin:ops 已批准；未做任何更改。"
    wrong_state = refusal(Code.INVALID_STATE).because("verdict", submission_state="FENCED")
    assert refusal_message(wrong_state) == "提交状态为“已取得围栏，等待结果”，现在不能记录这个结论；未做任何更改。"
    assert refusal_message(refusal(Code.INVALID_STATE, "plain")) == "plain"  # no reason: its own message
