"""The optional read-only order confirmation after the tap (step
``CONFIRM_ORDER_READONLY``). Runs only after the observation is journaled, only for
``EXTERNAL_PAYMENT_HANDOFF`` and ``SUBMITTED``, and only when the pack has an ``after_submit``
section. It never changes the observation; its result is an optional ``order_sn`` and an
ORDER_CONFIRMATION screenshot that travel with the result report.

What it may do, each step journaled (``Journal.record_confirm_step``) *before* it is done:

1. ``BACK_FROM_CASHIER``  one system BACK while a cashier is in front (an external cashier app or
   the app's own cashier sheet); still a cashier after it → stop.
2. ``LEAVE_RETENTION_DIALOG``  one tap on the pack's declared non-payment leave control of the
   retention dialog (``先去逛逛``): exactly one node must match, and neither it, its tap target nor
   anything inside may carry a payment-denylist word (``继续支付``, ``，仅¥x`` …); the adapter checks
   the denylist again before the tap. The unlabeled close icon is used only if the pack declares it.
3. ``OPEN_ORDER_LIST``  the pack's deep link to the pending-payment order list.
4. ``READ_ORDER_LIST``  two consecutive dumps agree on the list; our order is the one pending order
   whose amount equals the gate-3 total and whose number no earlier attempt on this phone reported
   as its own (the journal), narrowed by the goods title when several remain; then a
   screenshot while the app is in front. Still several → no number, logged with the count.

Anything else — a foreign app that is not a cashier, a paid word, a risk wall, an unknown screen,
a second cashier or dialog, an ambiguous match, the deadline — stops: no order number, nothing more
is touched, the result is still reported and a person takes it from there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from cmbuyer.agent.errors import AgentError
from cmbuyer.agent.journal import Journal
from cmbuyer.agent.phone.adapter import PhoneAdapter
from cmbuyer.agent.screens import readers
from cmbuyer.agent.screens.after_submit import (
    CASHIER_PACKAGES,
    PAID_WORDS,
    AfterSubmit,
    OrderCard,
    foreign_package,
    is_order_list,
    leave_control,
    match_order,
    read_order_cards,
)
from cmbuyer.agent.screens.dump import Dump
from cmbuyer.agent.screens.packmodel import Pack
from cmbuyer.agent.screens.text import normalize
from cmbuyer.agent.waits import FlowWaits

# the deadlines (the whole confirmation, the list after the deep link): FlowWaits.confirm and .order_list
POLL_SECONDS = 0.1
CONFIRMABLE = ("EXTERNAL_PAYMENT_HANDOFF", "SUBMITTED")


@dataclass(frozen=True)
class Confirmation:
    """``order_sn``: our order's number when exactly one pending order matched; ``screenshot``:
    PNG of the order list (app in front); ``note``: why it ended (event summary, no personal data);
    ``read``: the list was reached and read."""

    order_sn: str | None
    screenshot: bytes | None
    note: str
    read: bool


def wanted(pack: Pack, observation: str) -> bool:
    """Does this pack declare a confirmation, and is the observation one it may follow?"""
    return pack.after_submit is not None and observation in CONFIRMABLE


def _where(dump: Dump, focus: str | None, pack: Pack, conf: AfterSubmit) -> str:
    """cashier | foreign | retention | order_list | paid | wall | app."""
    foreign = foreign_package(dump, focus, dump.app_package)
    if foreign in CASHIER_PACKAGES:
        return "cashier"
    if foreign is not None:
        return "foreign"
    if conf.retention_dialog.find(dump):
        return "retention"
    if is_order_list(dump, conf):
        return "order_list"
    labels = [normalize(n.text) + normalize(n.desc) for n in dump.app_nodes()]
    if any(w in label for w in PAID_WORDS for label in labels):
        return "paid"
    screen = readers.recognize(dump, pack)
    if screen == "security_challenge":
        return "wall"
    if screen == "payment":
        return "cashier"
    return "app"


class _Look:
    def __init__(self, where: str, dump: Dump, cards: tuple[OrderCard, ...]) -> None:
        self.where, self.dump, self.cards = where, dump, cards

    def key(self) -> tuple[object, ...]:
        return (self.where, self.cards)


def _seen(dump: Dump, focus: str | None, pack: Pack, conf: AfterSubmit) -> _Look:
    where = _where(dump, focus, pack, conf)
    cards = tuple(read_order_cards(dump, conf)) if where == "order_list" else ()
    return _Look(where, dump, cards)


def _look(phone: PhoneAdapter, pack: Pack, conf: AfterSubmit) -> _Look:
    return _seen(*phone.look_after_tap(), pack, conf)


def _stable(
    phone: PhoneAdapter, pack: Pack, conf: AfterSubmit, deadline: float, *, new_look: bool = False
) -> _Look | None:
    """Two consecutive looks that agree (screen kind and, on the list, every card); None at the
    deadline. The looks the adapter remembers since its last action count (the observation's last
    look and its screenshot's masking look, :meth:`PhoneAdapter.recent_looks`): two that agree need no
    new dump. ``new_look=True`` (waiting for the screen to change) takes at least one new look."""
    previous: _Look | None = None
    try:
        for dump, focus in phone.recent_looks(new_look=new_look):
            look = _seen(dump, focus, pack, conf)
            if previous is not None and previous.key() == look.key():
                return look
            previous = look
    except AgentError:  # a remembered look that does not read: start afresh
        previous = None
    while time.monotonic() < deadline:
        try:
            look = _look(phone, pack, conf)
        except AgentError:
            previous = None
            time.sleep(POLL_SECONDS)
            continue
        if previous is not None and previous.key() == look.key():
            return look
        previous = look
        if look.where == "order_list" and look.dump.app_nodes():
            # the list may be seen again by the next look: its screenshot between the two
            phone.shoot_before_next_look()
        else:
            time.sleep(POLL_SECONDS)
    return None


def confirm_order_readonly(
    phone: PhoneAdapter,
    pack: Pack,
    journal: Journal,
    attempt_id: str,
    *,
    amount: Decimal | None,
    title: str | None,
    should_stop: Callable[[], bool] = lambda: False,
    progress: Callable[[str], None] = lambda line: None,
    waits: FlowWaits,
    taken: frozenset[str] = frozenset(),
) -> Confirmation:
    """Run the confirmation (module docstring). ``amount``: the gate-3 total read on the submit
    screen; ``title``: the goods title if known; ``waits``: ``confirm`` bounds the whole confirmation,
    ``order_list`` the wait for the list after the deep link; ``taken``: order numbers earlier attempts on
    this phone already reported as theirs (never this order's). Never raises AgentError (a failure is a note);
    JournalError propagates (the caller stops the agent, fail closed)."""
    conf = pack.after_submit
    if conf is None:
        return Confirmation(None, None, "the pack declares no confirmation", False)
    deadline = time.monotonic() + waits.confirm
    done: set[str] = set()
    linked_at = 0.0
    waiting = False

    def step(name: str) -> None:
        journal.record_confirm_step(attempt_id, name)
        progress(f"CONFIRM {name}")
        done.add(name)

    try:
        while True:
            if should_stop():
                return Confirmation(None, None, "stopped: shutdown or lease", False)
            # the first look may be the observation's; after a wait on the same screen, a new one
            look = _stable(phone, pack, conf, deadline, new_look=waiting)
            waiting = False
            if look is None:
                return Confirmation(None, None, f"no stable screen in time after {sorted(done)}", False)
            if look.where == "cashier":
                if "BACK_FROM_CASHIER" in done:
                    return Confirmation(None, None, "a cashier is still in front after BACK", False)
                step("BACK_FROM_CASHIER")
                phone.press_back()
            elif look.where == "retention":
                if "LEAVE_RETENTION_DIALOG" in done:
                    return Confirmation(None, None, "the retention dialog is still shown", False)
                node = leave_control(look.dump, conf)
                if node is None:
                    return Confirmation(None, None, "no unique non-payment leave control in the dialog", False)
                step("LEAVE_RETENTION_DIALOG")
                phone.tap_node(look.dump, node)  # the denylist check there refuses a payment tap
            elif look.where == "app" and "OPEN_ORDER_LIST" not in done:
                step("OPEN_ORDER_LIST")
                phone.open_app_link(conf.order_list_link)
                linked_at = time.monotonic()
            elif look.where == "order_list":
                step("READ_ORDER_LIST")
                order_sn, why = match_order(list(look.cards), amount, title, taken)
                shot = phone.app_screenshot_png()
                return Confirmation(order_sn, shot, f"order list read: {why}", True)
            elif look.where == "app":
                if time.monotonic() - linked_at > waits.order_list:
                    return Confirmation(None, None, "the order list did not open after the deep link", False)
                time.sleep(POLL_SECONDS)  # the list is still loading after the deep link
                waiting = True
            else:
                return Confirmation(None, None, f"stopped on a {look.where} screen", False)
            if time.monotonic() >= deadline:
                return Confirmation(None, None, f"deadline after {sorted(done)}", False)
    except AgentError as exc:
        return Confirmation(None, None, f"stopped: {exc.reason_code or type(exc).__name__}", False)
