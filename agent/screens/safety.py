"""Version-independent safety readers (docs/agent.md "Authoring a pack"). Applied with or without a pack.

- Payment denylist: a tap is refused when the target node, its clickable tap node, any ancestor,
  anything inside the tapped node, or any app node under the tap point carries a denylisted word in
  its text or content-desc (after NFKC). Checked in code before *every* tap, not only in packs.
- Risk walls: texts that mean "stop and report, never solve" (slider, captcha, login, rate limit,
  identity checks).
- Submit control: the text ``提交订单`` optionally followed by ``¥<amount>`` (the total
  sits inside the button text). Its amount is the confirm-page amount when no pack says otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from decimal import Decimal

from cmbuyer.agent.screens.dump import Bounds, Dump, Node
from cmbuyer.agent.screens.text import AMOUNT, normalize, to_money
from cmbuyer.schemas.payment import PAYMENT_WORDS

# the words of every payment control (cmbuyer.schemas.payment), plus the cashier's and the retention dialog's
# own: docs/agent.md "Payment safety"
PAYMENT_DENYLIST: tuple[str, ...] = (*PAYMENT_WORDS, "收银台", "仅¥", "银行卡", "指纹", "密码")
# the risk walls seen on real phones. Real-name walls are matched by
# their phrases, not by a bare 实名: that word also appears in ordinary goods and service texts
# (实名制, 实名认证商家), and a wall word on a normal page would stop every task on the phone.
RISK_WALLS: tuple[str, ...] = (
    "拖动滑块",
    "向右滑动",
    "验证码",
    "安全验证",
    "登录拼多多",
    "请先登录",
    "操作过于频繁",
    "稍后再试",
    "实名认证",
    "身份验证",
    "请将正脸置于框内",
    "账号存在风险",
    "账户存在风险",
    "限制部分操作",
    "提交实名信息",
    "请完成实名",
    "上传身份证",
    "活动太火爆",
)
SUBMIT_TEXT_RE = re.compile(r"提交订单(?: ?¥(?P<amount>" + AMOUNT + r"))?", re.ASCII)


def _labels(node: Node) -> Iterable[str]:
    yield normalize(node.text)
    yield normalize(node.desc)


def payment_term(node: Node) -> str | None:
    """The first denylist term found in the node's own text/desc, else None."""
    for label in _labels(node):
        for term in PAYMENT_DENYLIST:
            if term in label:
                return term
    return None


def is_payment_control(node: Node) -> bool:
    return payment_term(node) is not None


def tap_denial(dump: Dump, target: Node, point: tuple[int, int]) -> str | None:
    """Why a tap on ``target`` at ``point`` must not happen (a short reason), or None if allowed.

    Looks at: the target, its ancestors (labels of containers), the nodes inside the tapped node,
    and every app node whose bounds contain the point (an overlay or row the finger would hit)."""
    suspects: list[Node] = [target, *target.ancestors(), *target.descendants()]
    x, y = point
    suspects.extend(n for n in dump.app_nodes() if n.bounds.contains(x, y))
    for node in suspects:
        term = payment_term(node)
        if term is not None:
            return f"payment denylist hit near node #{node.order}"
    return None


def payment_controls(dump: Dump) -> list[str]:
    """Normalized labels of app nodes carrying a denylisted word (for inspect / observation)."""
    out: list[str] = []
    for node in dump.app_nodes():
        if payment_term(node) is not None:
            out.append(normalize(node.text) or normalize(node.desc))
    return out


def risk_walls(dump: Dump) -> list[str]:
    """Risk-wall terms present in app nodes (system UI is ignored: an SMS notification that says
    验证码 is not a wall in the app). Deduplicated, in list order."""
    found: list[str] = []
    for node in dump.app_nodes():
        for label in _labels(node):
            for term in RISK_WALLS:
                if term in label and term not in found:
                    found.append(term)
    return found


def submit_nodes(dump: Dump) -> list[Node]:
    """App nodes whose text or desc is exactly the submit text (with or without an amount)."""
    return [n for n in dump.app_nodes() if any(SUBMIT_TEXT_RE.fullmatch(label) for label in _labels(n) if label)]


def submit_controls(dump: Dump) -> list[Node]:
    """Distinct tap targets of submit nodes (a text node and its clickable parent are one control)."""
    seen: dict[int, Node] = {}
    for node in submit_nodes(dump):
        target = node.clickable_self_or_ancestor() or node
        seen.setdefault(target.order, target)
    return list(seen.values())


def submit_amounts(dump: Dump) -> list[Decimal]:
    """Amounts printed inside submit texts (``提交订单 ¥25.76`` → 25.76), one per distinct control."""
    amounts: dict[int, Decimal] = {}
    for node in submit_nodes(dump):
        for label in _labels(node):
            m = SUBMIT_TEXT_RE.fullmatch(label) if label else None
            if m is not None and m.group("amount") is not None:
                target = node.clickable_self_or_ancestor() or node
                amounts.setdefault(target.order, to_money(m.group("amount")))
    return list(amounts.values())


# Generic taps (and so the dry run) refuse anything a person could read as the submit control: 提交订单
# with any spacing, followed by anything — an amount in any format (``¥ 29.90``, ``¥1,299.00``,
# ``29.9元``) or none. Deliberately looser than SUBMIT_TEXT_RE, which reads the submit amount.
_SUBMIT_LIKE_RE = re.compile(r"\s*提\s*交\s*订\s*单.*", re.DOTALL)


def looks_like_submit(node: Node) -> bool:
    """True when the node's NFKC text or content-desc reads as the submit control (any spacing, any
    amount after it)."""
    return any(_SUBMIT_LIKE_RE.fullmatch(label) for label in _labels(node) if label)


def _overlap(a: Bounds, b: Bounds) -> bool:
    return a.left < b.right and b.left < a.right and a.top < b.bottom and b.top < a.bottom


def submit_denial(dump: Dump, node: Node) -> str | None:
    """Why a generic tap on ``node`` (at its clickable target's centre) could hit the submit control,
    or None: the node, its target, an ancestor or a descendant reads as the submit control
    (:func:`looks_like_submit`), or the target's centre lies on — or its bounds overlap — any node of
    the dump that reads as the submit control or that control's clickable target
    (:func:`submit_area_hit`)."""
    target = node.clickable_self_or_ancestor() or node
    for n in (node, target, *target.ancestors(), *node.descendants(), *target.descendants()):
        if looks_like_submit(n):
            return "the tap target reads as the submit control"
    return submit_area_hit(dump, target.bounds, [target.bounds.center])


def submit_area_hit(dump: Dump, bounds: Bounds, points: Sequence[tuple[int, int]]) -> str | None:
    """Why a gesture on ``bounds`` at ``points`` could land on the submit control, or None: a point lies
    on, or ``bounds`` overlap, any node that reads as the submit control or that control's clickable
    target."""
    for submit in dump.app_nodes():
        if not looks_like_submit(submit):
            continue
        for area in (submit.bounds, (submit.clickable_self_or_ancestor() or submit).bounds):
            if area.empty:
                continue
            if any(area.contains(x, y) for x, y in points) or _overlap(bounds, area):
                return "the gesture lies on the submit control"
    return None


def is_submit_related(node: Node) -> bool:
    """True when the node, an ancestor or a descendant is a submit text — generic taps refuse it."""
    for n in (node, *node.ancestors(), *node.descendants()):
        if any(SUBMIT_TEXT_RE.fullmatch(label) for label in _labels(n) if label):
            return True
    return False


# --- payment-mode gate backstops -------------------
# Words that make the one submit tap a possible payment wherever they appear on the sheet.
UNSAFE_SHEET_WORDS: tuple[str, ...] = ("先用后付", "免密")
# Submit labels other than 提交订单 (0元下单 = 先用后付; the others pay directly).
UNSAFE_SUBMIT_RE = re.compile(r"\s*(0元下单|立即支付|确认支付|免密支付|去支付|立即付款|确认付款).*")
PAYMENT_ROW_WORD = "更换支付方式"
UPDATE_PROMPT_WORDS: tuple[str, ...] = ("发现新版本", "立即升级", "立即更新", "版本更新")


def unsafe_sheet_words(dump: Dump) -> list[str]:
    """Unsafe payment words (先用后付, 免密) on any app node, deduplicated in list order."""
    found = [w for w in UNSAFE_SHEET_WORDS if any(w in label for n in dump.app_nodes() for label in _labels(n))]
    return found


def unsafe_submit_labels(dump: Dump) -> list[str]:
    """App node labels that look like a submit button that pays (``立即支付 ¥x``, ``0元下单 ¥x`` …)."""
    return [label for n in dump.app_nodes() for label in _labels(n) if label and UNSAFE_SUBMIT_RE.fullmatch(label)]


def payment_row_targets(dump: Dump) -> int:
    """Distinct tap targets whose label offers ``更换支付方式`` (one payment row = 1)."""
    return len(
        {
            (n.clickable_self_or_ancestor() or n).order
            for n in dump.app_nodes()
            if any(PAYMENT_ROW_WORD in label for label in _labels(n))
        }
    )


def update_prompt(dump: Dump) -> bool:
    """True when an app-update prompt is on screen (新版本 / 立即升级)."""
    return any(w in label for n in dump.app_nodes() for label in _labels(n) for w in UPDATE_PROMPT_WORDS)
