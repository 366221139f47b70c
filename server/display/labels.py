"""Chinese display labels for the codes the admin pages (and the CLI's task views) show (pure data, no I/O).

The wire and database keep their English codes (docs/api.md "Conventions", migrations); the domain keeps the state names
(:mod:`cmbuyer.server.domain.states`). People read these labels, with the code next to them in small grey
text so operators and developers can still search for it. ``tests/server/admin/test_labels.py`` checks
that every enum value of ``shared/schemas/common.json`` and every state/close reason of the migrations and
``domain/states.py`` has a label here, so a new code cannot reach the page untranslated. Unknown values
fall back to the raw code (never an error).
"""

from __future__ import annotations

from collections.abc import Mapping

from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import DomainError, InvalidTransition
from cmbuyer.server.domain.states import TaskState

# -- task states (domain/states.py TaskState) -----------------------------------------------------------
TASK_STATE_LABELS: dict[TaskState, str] = {
    TaskState.DRAFT: "草稿",
    TaskState.PENDING: "待领取",
    TaskState.CLAIMED: "已领取",
    TaskState.ORDERING: "下单中",
    TaskState.SUBMITTING: "提交中",
    TaskState.WAITING_PAYMENT: "待付款",
    TaskState.PAID: "已付款",
    TaskState.RECONCILIATION_REQUIRED: "待人工核对",
    TaskState.CLOSED_NOT_CREATED: "确认未创建",
    TaskState.FAILED: "失败",
    TaskState.EXPIRED: "授权过期",
    TaskState.CANCELLED: "已取消",
    TaskState.HELD: "恢复后待核对",
}

# -- device step events (common.json "step") ------------------------------------------------------------
STEP_LABELS: dict[str, str] = {
    "OPEN_PRODUCT": "打开商品页",
    "DISMISS_POPUP": "关闭弹窗",
    "OPEN_SKU_PANEL": "打开规格面板",
    "SELECT_SKU": "选择颜色和尺码",
    "READ_UNIT_PRICE": "读取单价",
    "GATE_1": "闸门一：核对规格和单价",
    "SET_QUANTITY": "设置数量",
    "GATE_2": "闸门二：核对数量和单价",
    "GO_TO_CONFIRM": "进入确认订单页",
    "READ_CONFIRM_PAGE": "读取确认订单页",
    "GATE_3": "闸门三：核对提交页的规格、单价、数量和总价",
    "CHECK_PAYMENT_MODE": "核对支付方式（只允许跳转外部付款）",
    "SCROLL_OPTIONS": "滚动规格列表",
    "FENCE": "取得提交围栏",
    "SUBMIT_TAP": "点击“提交订单”",
    "OBSERVE_RESULT": "观察提交结果",
    "CONFIRM_ORDER_READONLY": "只读核对待付款订单",
    "BACK_OUT": "退出下单（未提交）",
    "LEASE": "租约续期",
    "RECOVERY": "设备重启后恢复",
    "APPROVAL_REQUEST": "请求人工确认（监督下单）",
    "APPROVAL_WAIT": "等待人工确认",
}

# common.json "outcome"
OUTCOME_LABELS: dict[str, str] = {
    "STARTED": "开始",
    "OK": "完成",
    "FAILED": "失败",
}

# common.json "reason_code" (meanings: docs/agent.md "Reason codes")
REASON_CODE_LABELS: dict[str, str] = {
    "WRONG_GOODS": "打开的不是目标商品",
    "WRONG_PACKAGE": "拼多多不在前台",
    "APP_VERSION_UNSUPPORTED": "拼多多版本不受支持",
    "NO_SELECTOR_PACK": "没有适配此拼多多版本的识别包",
    "SCREEN_UNRECOGNIZED": "无法识别当前画面",
    "DUMP_EMPTY": "读取到的界面为空",
    "DUMP_INVALID": "界面读取结果无效",
    "DUMP_UNSTABLE": "界面一直在变化，读取不稳定",
    "SKU_VALUE_MISSING": "商品没有所需的颜色或尺码",
    "SKU_AMBIGUOUS": "颜色或尺码选项不明确",
    "SKU_NOT_SELECTED": "颜色或尺码未能选中",
    "UNIT_PRICE_UNREADABLE": "读不到单价",
    "UNIT_PRICE_AMBIGUOUS": "单价不唯一",
    "PRICE_CHANGED": "价格发生了变化",
    "PRICE_OVER_CAP": "确认页总价超过上限",
    "QUANTITY_MISMATCH": "数量不一致",
    "QUANTITY_CAPPED_BY_STOCK": "库存不足，数量加不上去",
    "OUT_OF_STOCK": "所选规格缺货",
    "CONFIRM_AMOUNT_UNREADABLE": "读不到确认页金额",
    "SUBMIT_CONTROL_COUNT": "确认页“提交订单”按钮不唯一",
    "SKU_MISMATCH_ON_CONFIRM": "确认页规格与任务不一致",
    "RISK_WALL": "遇到风控拦截",
    "SECURITY_CHALLENGE": "出现安全验证",
    "POPUP_UNHANDLED": "出现无法处理的弹窗",
    "PAYMENT_CONTROL_BLOCKED": "已拦截可能触发付款的点击",
    "ADB_ERROR": "手机连接（adb）出错",
    "PHONE_TIMEOUT": "手机响应超时",
    "LEASE_LOST": "租约丢失",
    "LEASE_TOO_SHORT": "租约剩余时间不足",
    "SERVER_UNREACHABLE": "连不上服务器",
    "FENCE_REFUSED": "服务器拒绝了提交围栏",
    "SHUTDOWN": "采购工具被停止",
    "INTERNAL_ERROR": "采购工具内部错误",
    "PAYMENT_MODE_UNSAFE": "支付方式不安全（可能直接扣款）",
    "SKU_DIMENSION_UNNAMED": "页面上有任务未指定的规格维度",
    "SKU_SELECTION_UNREADABLE": "读不到已选规格",
    "QUANTITY_UNREADABLE": "读不到数量",
    "TOTAL_ABOVE_ITEMS": "总价高于单价乘数量（有额外费用）",
    "APP_UPDATE_PROMPT": "拼多多要求升级",
    "PAYMENT_SUSPECTED": "疑似已付款",
    "REPEATED_FAILURES": "连续失败，手机已暂停",
    "APPROVAL_TIMEOUT": "等待人工确认超时",
    "SCREEN_CHANGED_WHILE_WAITING": "等待确认期间页面发生变化",
    "REJECTED_BY_REVIEWER": "人工确认时被驳回",
}

# common.json "observation" (what the phone saw after tapping 提交订单)
OBSERVATION_LABELS: dict[str, str] = {
    "SUBMITTED": "已提交，出现待付款",
    "EXTERNAL_PAYMENT_HANDOFF": "跳转到了付款",
    "SECURITY_CHALLENGE": "出现安全验证",
    "UNKNOWN": "结果不明",
}

# common.json "evidence_kind"
EVIDENCE_KIND_LABELS: dict[str, str] = {
    "SKU_PANEL_GATE_1": "闸门一：规格面板",
    "QUANTITY_GATE_2": "闸门二：数量",
    "CONFIRM_PAGE_GATE_3": "闸门三：确认订单页",
    "POST_SUBMIT_OBSERVATION": "提交后的画面",
    "FAILURE": "失败时的画面",
    "ORDER_CONFIRMATION": "待付款订单核对页",
}

# common.json "observation_reason" (why an observation is what it is)
OBSERVATION_REASON_LABELS: dict[str, str] = {
    "PAYMENT_SUSPECTED": "疑似已付款",
    "NO_KNOWN_SCREEN": "提交后没有出现可识别的画面",
    "SUBMIT_CONTROL_GONE": "点击前“提交订单”已消失",
    "NOT_TAPPED_SCREEN_CHANGED": "未点击：点击前画面与闸门三读数不同",
    "NOT_TAPPED_OBSCURED": "未点击：“提交订单”被弹窗或其他窗口遮挡",
    "TAP_OUTCOME_UNKNOWN": "点击结果不明",
    "SECURITY_CHALLENGE_AFTER_TAP": "提交后出现安全验证",
}

# common.json "device_state"
DEVICE_STATE_LABELS: dict[str, str] = {
    "READY": "空闲",
    "BUSY": "采购中",
    "NO_PACK": "缺少识别包",
    "APP_MISSING": "未安装拼多多",
    "ADB_OFFLINE": "手机未连接",
    "PAUSED": "已暂停",
    "NEEDS_PERSON": "需要人工处理",
}

# devices.state (domain/states.py DeviceState): the registration, not what the phone reports
DEVICE_REGISTRATION_LABELS: dict[str, str] = {"ACTIVE": "启用", "REVOKED": "已撤销"}

# -- states (migrations 0001/0002, domain/states.py) ---------------------------------------------------
AUTHORIZATION_STATE_LABELS: dict[str, str] = {
    "ACTIVE": "有效，待领取",
    "CLAIMED": "已被领取",
    "FENCED": "已取得围栏",
    "CONSUMED": "已用完",
    "CLOSED": "已关闭",
    "EXPIRED": "已过期",
}

ATTEMPT_STATE_LABELS: dict[str, str] = {"OPEN": "进行中", "CLOSED": "已结束"}

SUBMISSION_STATE_LABELS: dict[str, str] = {
    "FENCED": "已取得围栏，等待结果",
    "SUBMITTED": "已提交",
    "RECONCILIATION_REQUIRED": "待人工核对",
    "CREATED": "已核对：已创建",
    "NOT_CREATED": "已核对：未创建",
}

# attempts.close_reason (migration 0002 CHECK)
ATTEMPT_CLOSE_REASON_LABELS: dict[str, str] = {
    "REPORTED": "已上报提交结果",
    "FAILED": "设备报告失败",
    "RESET": "已重置为草稿",
    "CANCELLED": "任务已取消",
    "RECONCILED": "已人工核对",
    "LEASE_EXPIRED_AFTER_FENCE": "提交后租约过期",
}

# tasks.state_reason and authorizations.close_reason written by the services (grep ``reason=``);
# ``result:<observation>`` and ``device_fail:<reason_code>`` are composed in :func:`reason_label`.
STATE_REASON_LABELS: dict[str, str] = {
    "RESET": "已重置为草稿",
    "CANCELLED": "已取消",
    "PAID_BY_PERSON": "人工标记已付款",
    "RECONCILED": "已人工核对",
    "RECONCILED_CREATED": "人工核对：已创建待付款订单",
    "RECONCILED_NOT_CREATED": "人工核对：确认未创建",
    "LEASE_EXPIRED_NO_RESULT": "提交后租约过期，未收到结果",
    "authorization_expired": "授权已过期，无设备领取",
    "RESULT": "已上报提交结果",
    "FAILED": "设备报告失败",
    "released_after_restore": "恢复后核对放行",
}

# audit_log.action values written by the services (grep ``action=``)
AUDIT_ACTION_LABELS: dict[str, str] = {
    "admin.add": "新增管理员",
    "admin.login": "管理员登录",
    "admin.login_failed": "登录失败",
    "admin.login_locked": "登录尝试过多，暂时锁定",
    "admin.login_unlocked": "解除登录锁定",
    "admin.logout": "管理员退出",
    "admin.passwd": "修改密码",
    "approval.request": "设备请求人工确认",
    "approval.void": "人工确认请求作废",
    "attempt.fail": "设备报告失败",
    "attempt.lease_renew": "租约续期",
    "authorization.expire": "授权过期",
    "claim.resume": "设备恢复领取",
    "device.add": "新增设备",
    "device.heartbeat": "设备心跳",
    "device.revoke": "撤销设备",
    "device.supervision": "设置人工监督",
    "device.pause": "暂停领取",
    "device.resume": "恢复领取",
    "device.pacing": "设置领取节奏",
    "device.hold": "手机需要人工处理",
    "device.hold_cleared": "手机不再需要人工处理",
    "device.hold_release": "释放手机",
    "device.screen_request": "请求查看当前屏幕",
    "device.screen": "手机回传屏幕",
    "events.append": "设备上报进展",
    "evidence.upload": "上传截图",
    "evidence.gc": "清理无引用的截图文件",
    "submission.fence": "取得提交围栏",
    "submission.lease_expired": "提交后租约过期",
    "submission.reconcile": "人工核对",
    "submission.result": "上报提交结果",
    "task.claim": "设备领取任务",
    "task.create": "创建草稿",
    "task.mark_paid": "标记已付款",
    "task.ordering": "开始下单",
    "task.start_purchase": "开始采购",
    "task.reset_to_draft": "重置为草稿",
    "task.cancel": "取消任务",
    "task.restore_hold": "数据库恢复后暂停，待核对",
    "task.release": "核对后放行（回到草稿）",
    "task.release_fenced": "核对后放行（已有提交围栏，待人工核对）",
}

# -- supervised first orders, admin side (kept in one block so merges stay simple) -------------------
AUDIT_ACTION_LABELS.update(
    {
        "approval.approve": "批准提交前的人工确认",
        "approval.reject": "驳回提交前的人工确认",
        "supervision.verdict": "记录监督订单的核对结论",
        "supervision.resupervise": "重新人工监督设备",
        # written by the device side (services/supervision.py, tx/supervision.py)
        "approval.request": "设备请求提交前人工确认",
        "approval.void": "人工确认请求作废",
    }
)

# -- tasks in and out -----------------------------------------------------------------------------
AUDIT_ACTION_LABELS.update(
    {
        "task.import": "从表格导入草稿",
        "task.edit": "修改草稿",
    }
)

# the fence's refusal words (domain/fence.py check_gates), shown when the readings awaiting approval
# would not pass the fence; "unreadable" = the readings are not the 8 well-formed values
FENCE_REFUSAL_LABELS: dict[str, str] = {
    "sku_mismatch": "规格与任务不符",
    "sku_options_required": "手机程序版本过旧：此任务的规格须按维度上报，请升级手机程序",
    "quantity_mismatch": "数量与任务不符",
    "unit_price_changed": "三次读取的单价不一致",
    "total_over_cap": "单价 × 数量超过最高总价",
    "confirm_amount_over_cap": "提交金额超过最高总价",
    "total_above_items": "提交金额高于单价 × 数量（有附加费用）",
    "payment_mode_not_allowed": "支付方式不在允许列表中",
    "submit_control_count": "提交按钮不止一个",
    "unreadable": "读取的数值不完整或无法识别",
}

_PREFIXES: dict[str, tuple[str, Mapping[str, str]]] = {
    "result": ("提交结果", OBSERVATION_LABELS),
    "device_fail": ("设备失败", REASON_CODE_LABELS),
    # services/restore_hold.py HOLD_REASON + the state the task was held from
    "restored_from_replica": ("数据库恢复后暂停，恢复时为", {str(k): v for k, v in TASK_STATE_LABELS.items()}),
}


# The template globals that label a code through :func:`label`: the global's name → its table.
TEMPLATE_LABELS: dict[str, Mapping[str, str]] = {
    "step_label": STEP_LABELS,
    "outcome_label": OUTCOME_LABELS,
    "reason_code_label": REASON_CODE_LABELS,
    "observation_label": OBSERVATION_LABELS,
    "observation_reason_label": OBSERVATION_REASON_LABELS,
    "evidence_label": EVIDENCE_KIND_LABELS,
    "device_state_label": DEVICE_STATE_LABELS,
    "authorization_state_label": AUTHORIZATION_STATE_LABELS,
    "attempt_state_label": ATTEMPT_STATE_LABELS,
    "submission_state_label": SUBMISSION_STATE_LABELS,
    "audit_action_label": AUDIT_ACTION_LABELS,
    "fence_refusal_label": FENCE_REFUSAL_LABELS,
}


# -- refusals a service raises as a code and a reason (``DomainError.because``): the sentence a person reads.
# ``{name}`` is the refusal's fact ``name``, worded through REFUSAL_FACT_LABELS when it has a table there.
REFUSAL_TEXTS: dict[tuple[Code, str], str] = {
    (Code.INVALID_REQUEST, "unknown_action"): "未知操作",
    (Code.INVALID_REQUEST, "verdict_word"): "请选择“核对无误”或“有误”",
    (Code.INVALID_REQUEST, "note_format"): "说明格式错误",
    (Code.INVALID_REQUEST, "note_length"): "说明最多 {max} 字",
    (Code.NOT_FOUND, "approval"): "确认请求不存在",
    (Code.NOT_FOUND, "submission"): "提交记录不存在",
    (Code.NOT_FOUND, "device"): "设备不存在",
    (Code.APPROVAL_NOT_WAITING, "void"): "这个确认请求设备重新读取了页面或这次尝试已结束，请求已作废；未做任何更改。",
    (Code.APPROVAL_NOT_WAITING, "decided"): "这个确认请求已由 {who} {approval_state}；未做任何更改。",
    (Code.APPROVAL_NOT_WAITING, "changed"): "确认请求刚刚发生了变化，请刷新后再看；未做任何更改。",
    (Code.ATTEMPT_CLOSED, "approval"): "这次尝试已结束，确认请求不再有效；未做任何更改。",
    (Code.READINGS_UNREADABLE, "approve"): "手机读取的数值不完整或无法识别，不能批准，只能驳回。",
    (Code.NOT_SUPERVISED, "verdict"): "这笔订单不在人工监督中，无需核对结论。",
    (Code.VERDICT_EXISTS, "recorded"): "这笔订单已由 {admin_id} 记录为“{verdict}”，不能再次记录；未做任何更改。",
    (Code.VERDICT_EXISTS, "raced"): "这笔订单刚刚被记录了结论，请刷新；未做任何更改。",
    (Code.INVALID_STATE, "verdict"): "提交状态为“{submission_state}”，现在不能记录这个结论；未做任何更改。",
    # devices and admins (services/devices.py, services/admins.py)
    (Code.INVALID_REQUEST, "device_name"): "设备名称为 1–64 个可打印字符",
    (Code.INVALID_STATE, "revoked_pause"): "设备已撤销，不能暂停或恢复",
    (Code.INVALID_REQUEST, "pacing"): "最短领取间隔为 1–86400 秒、每日最多领取为 1–10000 次，或留空表示不限",
    (Code.INVALID_STATE, "revoked_pacing"): "设备已撤销，不能设置领取节奏",
    (Code.INVALID_REQUEST, "release_note"): "请写明检查了什么（1–500 个字符）",
    (Code.INVALID_STATE, "revoked"): "设备已撤销",
    (Code.INVALID_STATE, "no_hold"): "这台手机没有报告暂停（hold），无需释放",
    (Code.INVALID_STATE, "busy_screen"): "手机正在执行任务，请在任务结束后再查看屏幕",
    (Code.INVALID_REQUEST, "password_length"): "密码至少 {min} 个字符",
    (Code.INVALID_REQUEST, "username"): "用户名为 1–64 个字母、数字或 _.@-",
    (Code.USERNAME_TAKEN, "admin"): "用户名已存在",
    (Code.NOT_FOUND, "admin"): "管理员不存在",
    # tasks: create, start, edit, human actions (services/tasks.py, task_edit.py, admin_actions.py, tx/drafts.py)
    (Code.NOT_FOUND, "task"): "任务不存在",
    (Code.INVALID_REQUEST, "create_key"): "create_key 必须是小写 UUIDv4",
    (Code.IDEMPOTENCY_CONFLICT, "create_key"): "create_key 已用于另一任务",
    (Code.INVALID_REQUEST, "start_key"): "start_key 必须是小写 UUIDv4",
    (Code.IDEMPOTENCY_CONFLICT, "start_key"): "start_key 已用于另一批任务",
    (Code.INVALID_REQUEST, "start_count"): "任务列表不能为空（最多 500 条）",
    (Code.INVALID_REQUEST, "task_item"): "每项需要 task_id 与 expected_task_version",
    (Code.INVALID_REQUEST, "task_item_value"): "task_id 或版本无效",
    (Code.INVALID_REQUEST, "task_repeated"): "任务列表有重复",
    # the same stale-version refusal in two wordings: picking tasks from a list (start, edit) and acting on one
    (Code.VERSION_CONFLICT, "task_changed_pick"): "任务已变化，请刷新后重选",
    (Code.VERSION_CONFLICT, "task_changed"): "任务已变化，请刷新后重试",
    (Code.SUBMISSION_FENCED, "start"): "任务已有提交围栏",
    (Code.VERSION_CONFLICT, "start_not_draft"): "只有草稿任务可以开始采购",
    (Code.INVALID_STATE, "edit_not_draft"): "只有草稿任务可以修改；请先重置为草稿",
    (Code.SUBMISSION_FENCED, "reconcile_only"): "该任务已取得提交围栏，只能人工核对",
    (Code.INVALID_REQUEST, "reconcile_outcome"): "请选择“已创建待付款订单”或“确认未创建”",
    (Code.INVALID_REQUEST, "reconcile_note"): "请填写核对说明（1–{max} 字）",
    (Code.INVALID_REQUEST, "task_version"): "缺少任务版本",
    # the device side (services/submission_result.py, supervision.py, tx/device_tx.py, supervision.py,
    # screens.py): the device is answered with the code alone, so no person reads these; still in English
    (Code.RESULT_CONFLICT, "result"): "the submission already has a result",
    (Code.NOT_FOUND, "device_submission"): "not found",
    (Code.NOT_SUPERVISED, "attempt"): "the attempt is not supervised",
    (Code.NOT_FOUND, "device_approval"): "approval request not found",
    (Code.IDEMPOTENCY_CONFLICT, "device_request"): "idempotency key reused with a different request",
    (Code.APPROVAL_REQUIRED, "fence"): "a person's approval of these readings is required",
    (Code.INVALID_REQUEST, "package_name"): "not an Android package name",
    (Code.INVALID_STATE, "screen_answered"): "this screen request was answered differently",
    (Code.INVALID_STATE, "screen_not_pending"): "no such screen request pending for this device",
}

# a person's decision on an approval request as a refusal names it (approval_requests.state)
APPROVAL_DECISION_LABELS: dict[str, str] = {"APPROVED": "已批准", "REJECTED": "已驳回", "VOID": "已作废"}
# supervision_verdicts.verdict as the verdict buttons name it
VERDICT_LABELS: dict[str, str] = {"RIGHT": "核对无误", "WRONG": "有误"}
# the facts of a refusal that are codes, and the table that words each (any other fact is shown as it is)
REFUSAL_FACT_LABELS: dict[str, Mapping[str, str]] = {
    "approval_state": APPROVAL_DECISION_LABELS,
    "verdict": VERDICT_LABELS,
    "submission_state": SUBMISSION_STATE_LABELS,
}


def reason_message(exc: DomainError) -> str:
    """The sentence of a refusal that names its reason (``exc.why``): the one :data:`REFUSAL_TEXTS` holds for
    its code and reason, its facts worded through :data:`REFUSAL_FACT_LABELS`; any other refusal's own
    message. The bulk results, the task create/start forms and the import refusal show this (a refused
    state transition stays in its English message there); everything else shows :func:`refusal_message`."""
    text = REFUSAL_TEXTS.get((exc.code, exc.why)) if exc.why else None
    if text is None:
        return exc.message
    return text.format_map(
        {k: label(REFUSAL_FACT_LABELS[k], v) if k in REFUSAL_FACT_LABELS else v for k, v in exc.facts.items()}
    )


def refusal_message(exc: DomainError) -> str:
    """What a person reads for a refusal (admin pages and the CLI, which prints the code before it).

    A refusal that names its reason is worded by :func:`reason_message`. An ``invalid_state`` refusal that
    names its use-case and state is worded in Chinese from the tables here (the use-case as its audit action
    label, the state as its task state label), e.g. ``任务状态为失败（FAILED）时不能标记已付款``; any other
    refusal keeps its own message."""
    named = (exc.code, exc.why) in REFUSAL_TEXTS
    if named or not isinstance(exc, InvalidTransition) or exc.use_case is None or exc.state is None:
        return reason_message(exc)
    action = AUDIT_ACTION_LABELS.get(f"task.{exc.use_case}", exc.use_case)
    state = TASK_STATE_LABELS.get(TaskState(exc.state)) if exc.state in TaskState.__members__ else None
    where = f"任务状态为{state}（{exc.state}）" if state else f"状态为 {exc.state}"
    return f"{where}时不能{action}"


def label(table: Mapping[str, str], code: str | None) -> str:
    """The label of ``code`` in ``table``; the raw code when unknown, "" for None/empty."""
    if not code:
        return ""
    return table.get(code, code)


def reason_label(code: str | None) -> str:
    """Label of a task ``state_reason`` / authorization ``close_reason`` / attempt close reason.

    Handles the composed forms ``result:<observation>`` and ``device_fail:<reason_code>`` and bare
    device reason codes (a failed task's ``state_reason`` is the device's reason code)."""
    if not code:
        return ""
    if code in STATE_REASON_LABELS:
        return STATE_REASON_LABELS[code]
    if code in ATTEMPT_CLOSE_REASON_LABELS:
        return ATTEMPT_CLOSE_REASON_LABELS[code]
    if code in REASON_CODE_LABELS:
        return REASON_CODE_LABELS[code]
    prefix, sep, rest = code.partition(":")
    if sep and prefix in _PREFIXES:
        title, table = _PREFIXES[prefix]
        return f"{title}：{table.get(rest, rest)}"
    return code


# -- vocabulary: the product's terms, explained in plain Chinese (tooltips and the legend) --------------
GLOSSARY: dict[str, str] = {
    "围栏": "提交围栏：设备点击“提交订单”之前，必须先向服务器取得的一次性许可，每个任务最多一次。"
    "有了围栏，订单可能已经提交，所以任务不能再重置、取消或重新开始，只能人工核对。",
    "闸门": "设备下单途中的自动核对点。闸门一：选好规格后核对颜色、尺码和单价；闸门二：设好数量后核对数量、单价没变；"
    "闸门三：在有“提交订单”按钮的页面（确认订单页或下单弹层）再读一遍规格、单价、数量、总价和支付方式，"
    "总价不超过上限、支付方式只能是跳转到外部付款的方式。任何一项读不到或不符，设备就退出，不会提交。",
    "代次": "这个任务第几次被设备领取（每领取一次加一）。用来识别旧领取发来的过期请求。",
    "锁定版本": "点击“开始采购”时锁定的任务版本：设备只按这个版本的商品、规格、数量和价格上限下单。",
    "版本": "任务每变化一次版本号加一。页面上的操作会带上版本号，防止在过期页面上误操作。",
    "租约": "设备领取任务后占用它的期限，设备会不断续期；过期后不会自动转给其他设备，需要人工处理。",
    "人工核对": "设备无法确认订单是否已创建（例如出现安全验证或跳转付款）。请在那台手机的拼多多“待付款”订单中查看，"
    "再记录“已创建”或“确认未创建”。",
}
