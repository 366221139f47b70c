"""What the screen says after the single submit tap, and the pack's read-only confirmation data
(docs/architecture.md "Safety rules"). Pure functions over dumps: nothing
here taps, and nothing here imports the submit or permit modules.

Observation rules (version-independent, so they live in code, not in packs):

- a **paid state** in the app (:data:`PAID_WORDS`: ``支付成功``, ``已支付``, ``待发货``, ``拼单成功``)
  → ``UNKNOWN`` with reason ``PAYMENT_SUSPECTED`` — it wins over everything else, a paid word next
  to a pending one is still a paid word (fail closed: a person looks);
- an **external cashier** in front (:data:`CASHIER_PACKAGES`: Alipay ``com.eg.android.AlipayGphone``,
  WeChat ``com.tencent.mm``; seen as nodes of that package in the dump or as the focused window) or
  the app's **own cashier sheet** (the pack's ``payment`` screen) → ``EXTERNAL_PAYMENT_HANDOFF``.
  After the tap — and only here — a dump without Pinduoduo nodes is a valid observation;
- a **pending-payment order** (:data:`PENDING_WORDS`: ``待支付``, ``待付款``) → ``SUBMITTED``;
- a risk wall / the pack's ``security_challenge`` screen → ``SECURITY_CHALLENGE``;
- anything else is not (yet) an outcome: the observer keeps looking until its deadline, then
  reports ``UNKNOWN`` with ``NO_KNOWN_SCREEN``.

The pack's optional top-level ``after_submit`` section (``shared/schemas/selector_pack.json``)
declares the read-only confirmation: the retention dialog and its one non-payment leave control,
the deep link of the pending-payment order list, how that list is recognised, and how one order
card is read (goods title, amount, ``订单编号``). :mod:`cmbuyer.agent.pack.compile` validates it at pack
load (PackError); :func:`read_order_cards` reads the list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from cmbuyer.agent.errors import MoneyError
from cmbuyer.agent.screens import readers, safety
from cmbuyer.agent.screens.dump import Dump, Node
from cmbuyer.agent.screens.text import match_amount, normalize

CASHIER_PACKAGES: dict[str, str] = {
    "com.eg.android.AlipayGphone": "支付宝",
    "com.tencent.mm": "微信",
}
PAID_WORDS: tuple[str, ...] = ("支付成功", "已支付", "待发货", "拼单成功")
PENDING_WORDS: tuple[str, ...] = ("待支付", "待付款")
# The wire pattern of common.json#/$defs/order_sn; a pack regex that yields anything else is a miss.
_SYSTEM_PACKAGES = frozenset({"", "com.android.systemui", "android"})
ORDER_SN_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]{5,39}", re.ASCII)
# The only deep links the confirmation may open: a Pinduoduo page with plain query values.
DEEP_LINK_RE = re.compile(
    r"pinduoduo://com\.xunmeng\.pinduoduo/[a-z_]{1,40}\.html\?[a-z_]{1,20}=[0-9a-z_]{1,20}", re.ASCII
)


@dataclass(frozen=True)
class Observed:
    """One classification of one dump. ``observation`` is None while nothing decisive is shown.

    ``package``: the foreign package in front (a cashier or another app), else None — recorded
    instead of a screenshot. ``app_in_front``: the dump shows the app and no foreign window, the
    precondition for any screenshot."""

    observation: str | None
    reason: str | None
    package: str | None
    app_in_front: bool
    what: str  # short, for the event summary (never personal data)


def _app_labels(dump: Dump) -> list[str]:
    return [label for n in dump.app_nodes() for label in (normalize(n.text), normalize(n.desc)) if label]


def foreign_package(dump: Dump, focus: str | None, app_package: str) -> str | None:
    """The package in front that is not the app: a cashier package present in the dump or focused
    wins; else a focused non-app package; else, for a dump without app nodes, the most frequent
    non-system package in it. None when the app is in front."""
    in_dump = {n.package for n in dump.nodes}
    for pkg in CASHIER_PACKAGES:
        if pkg in in_dump or pkg == focus:
            return pkg
    if focus is not None and focus != app_package:
        return focus
    if not dump.app_nodes():
        others = [n.package for n in dump.nodes if n.package not in _SYSTEM_PACKAGES]
        return max(set(others), key=others.count) if others else ""
    return None


def classify(dump: Dump, focus: str | None, pack: Any) -> Observed:
    """Classify one post-tap dump (rules in the module docstring). ``focus`` is the focused
    window's package from the adapter (None when unreadable); ``pack`` a loaded Pack."""
    foreign = foreign_package(dump, focus, dump.app_package)
    labels = _app_labels(dump)
    paid = next((w for w in PAID_WORDS if any(w in label for label in labels)), None)
    if paid is not None:
        return Observed("UNKNOWN", "PAYMENT_SUSPECTED", foreign, foreign is None, f"paid state seen: {paid}")
    if foreign in CASHIER_PACKAGES:
        return Observed("EXTERNAL_PAYMENT_HANDOFF", None, foreign, False, f"external cashier in front: {foreign}")
    if foreign is not None:
        return Observed(None, "NO_KNOWN_SCREEN", foreign, False, f"foreign app in front: {foreign or 'none'}")
    screen = readers.recognize(dump, pack)
    if screen == "payment":
        return Observed("EXTERNAL_PAYMENT_HANDOFF", None, None, True, "the app's cashier sheet")
    if screen == "security_challenge":
        return Observed("SECURITY_CHALLENGE", "SECURITY_CHALLENGE_AFTER_TAP", None, True, "security challenge")
    if any(w in label for w in PENDING_WORDS for label in labels):
        return Observed("SUBMITTED", None, None, True, "pending-payment order")
    return Observed(None, "NO_KNOWN_SCREEN", None, True, f"screen {screen}")


# --- the pack's after_submit section ---------------------------------------------------------
@dataclass(frozen=True)
class OrderCard:
    """One order on the pending-payment list; a value that cannot be read is None."""

    title: str | None
    amount: Decimal | None
    order_sn: str | None
    pending: bool


@dataclass(frozen=True)
class AfterSubmit:
    """Compiled ``after_submit`` section (all selectors compiled; see the schema for meanings)."""

    retention_dialog: Any  # Selector: recognises the dialog
    retention_leave: Any  # Selector: its one non-payment leave control (e.g. 先去逛逛)
    order_list_link: str
    order_list: Any  # ScreenRule
    order_card: Any  # Selector
    card_title: Any  # Selector (inside a card) or None
    card_amount: Any  # MoneyReader (inside a card)
    card_order_sn: tuple[Any, re.Pattern[str]]  # (Selector inside a card, regex with group order_sn)
    card_pending: Any  # Selector (inside a card): the pending-payment status


def _inside(card: Node, selector: Any) -> list[Node]:
    return [n for n in card.descendants() if selector.matches(n)]


def _one_text(nodes: list[Node]) -> str | None:
    values = {normalize(n.text or n.desc).strip() for n in nodes} - {""}
    return values.pop() if len(values) == 1 else None


def _card_amount(card: Node, reader: Any) -> Decimal | None:
    values: set[Decimal] = set()
    for node in _inside(card, reader.selector):
        for label in (node.text, node.desc):
            try:
                value = match_amount(reader.regex, label) if label else None
            except MoneyError:
                return None
            if value is not None:
                values.add(value)
    return values.pop() if len(values) == 1 else None


def _card_order_sn(card: Node, reader: tuple[Any, re.Pattern[str]]) -> str | None:
    selector, regex = reader
    values: set[str] = set()
    for node in _inside(card, selector):
        for label in (normalize(node.text), normalize(node.desc)):
            m = regex.fullmatch(label) if label else None
            if m is not None:
                values.add(m.group("order_sn"))
    if len(values) != 1:
        return None
    sn = values.pop()
    return sn if ORDER_SN_RE.fullmatch(sn) else None


def is_order_list(dump: Dump, conf: AfterSubmit) -> bool:
    return bool(conf.order_list.matches(dump))


def read_order_cards(dump: Dump, conf: AfterSubmit) -> list[OrderCard]:
    """Every order card on the list (outermost matches only: a card inside a card is one card)."""
    cards = conf.order_card.find(dump)
    outer = [c for c in cards if not any(a in cards for a in c.ancestors())]
    return [
        OrderCard(
            title=_one_text(_inside(c, conf.card_title)) if conf.card_title else None,
            amount=_card_amount(c, conf.card_amount),
            order_sn=_card_order_sn(c, conf.card_order_sn),
            pending=bool(_inside(c, conf.card_pending)),
        )
        for c in outer
    ]


def match_order(
    cards: list[OrderCard], amount: Decimal | None, title: str | None, taken: frozenset[str] = frozenset()
) -> tuple[str | None, str]:
    """Our order among the pending ones: amount equal to the gate-3 total, minus the orders an earlier
    attempt on this phone already identified as its own (``taken``: their numbers, from the agent's
    journal — five identical orders back to back each get their own number), narrowed by the
    goods title when that is known and several match. Returns (order_sn or None, why; the why names the
    candidates' count). Several candidates left, none, or a candidate without a readable order number
    → None (no number is better than a wrong one)."""
    pending = [c for c in cards if c.pending]
    if amount is None:
        return None, "no gate-3 total to match"
    by_amount = [c for c in pending if c.amount == amount]
    found = [c for c in by_amount if c.order_sn is None or c.order_sn not in taken]
    if len(found) > 1 and title:
        by_title = [c for c in found if c.title is not None and c.title == normalize(title).strip()]
        found = by_title if len(by_title) == 1 else found  # the title only ever narrows to one
    earlier = len(by_amount) - len([c for c in by_amount if c.order_sn is None or c.order_sn not in taken])
    if not found:
        return None, f"no pending order for this amount among {len(pending)} ({earlier} taken by earlier orders)"
    if len(found) > 1:
        return None, f"{len(found)} pending orders match ({earlier} more taken by earlier orders): ambiguous"
    if found[0].order_sn is None:
        return None, "the matching order's number is unreadable"
    return found[0].order_sn, f"one pending order matches ({earlier} taken by earlier orders)"


def leave_control(dump: Dump, conf: AfterSubmit) -> Node | None:
    """The retention dialog's one declared leave control, or None when it is not exactly one
    node or carries (itself, its tap target or anything inside) a payment-denylist word — so a
    pack that named ``继续支付`` or ``，仅¥x`` could never have it chosen here (the adapter checks
    the denylist again before the tap)."""
    found: list[Node] = conf.retention_leave.find(dump)
    if len(found) != 1:
        return None
    node = found[0]
    target = node.clickable_self_or_ancestor()
    if target is None:
        return None
    for n in (node, target, *target.descendants()):
        if safety.payment_term(n) is not None:
            return None
    return node
