"""The Pinduoduo app as a state machine, driven by taps (node actions), keys, swipes and deep links.

Pages form a back stack (``product`` → ``confirm`` → ``order``/``challenge``/``blank``/``paid``,
plus the pending-payment list ``orders``); overlays sit on the top page: the SKU sheet or the
order sheet (layout ``order_sheet``: options, stepper, payment row and submit on one sheet),
the payment sheet, a dialog (``retention``, ``order_success``, ``stock_short``) and popups
(update, coupon, splash, risk walls …). An external cashier app (``foreign``) can sit in
front of the whole app after the submit tap.
Rendering lives in :mod:`.screens`; this module only changes state and reports effects.
Not thread-safe: the owning :class:`~.phone.Phone` serialises access with its lock.
"""

from __future__ import annotations

import itertools
import re
import urllib.parse
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from .faults import WALLS
from .scenario import Goods, PhoneConfig
from .system_ui import LAUNCHER

GOODS_URL = re.compile(
    r"^(?:pinduoduo://com\.xunmeng\.pinduoduo/|https?://mobile\.yangkeduo\.com/)goods\d?\.html\?(?P<query>.*)$"
)
ORDERS_URL = re.compile(r"^pinduoduo://com\.xunmeng\.pinduoduo/orders\.html\?(?P<query>.*)$")
# the cashier apps public scripts detect after the submit tap
CASHIERS = {
    "EXTERNAL_CASHIER_ALIPAY": ("com.eg.android.AlipayGphone", "com.alipay.android.msp.ui.views.MspContainerActivity"),
    "EXTERNAL_CASHIER_WECHAT": ("com.tencent.mm", "com.tencent.mm.plugin.wallet_index.ui.OrderHandlerUI"),
}
_order_ids = itertools.count(1)


@dataclass
class Order:
    """An order the simulated shop created (always pending payment: payment is never simulated)."""

    order_sn: str
    goods_id: str
    options: dict[str, str]
    quantity: int
    unit_price: Decimal
    total: Decimal
    outcome: str
    status: str = "pending_payment"

    def as_dict(self) -> dict[str, Any]:
        return {
            "order_sn": self.order_sn,
            "goods_id": self.goods_id,
            "options": dict(self.options),
            "quantity": self.quantity,
            "unit_price": str(self.unit_price),
            "total": str(self.total),
            "outcome": self.outcome,
            "status": self.status,
        }


@dataclass
class Page:
    name: str  # home | product | confirm | order | challenge | blank | paid | orders
    goods_id: str | None = None
    order: Order | None = None


@dataclass
class AppModel:
    """Mutable app state of one phone. ``cfg`` is the phone's private scenario copy."""

    cfg: PhoneConfig
    running: bool = False
    foreground: bool = False  # False = the launcher is shown (app may still run in background)
    stack: list[Page] = field(default_factory=list)
    sheet_open: bool = False
    buy_button: str = ""
    selection: dict[str, str] = field(default_factory=dict)
    quantity: int = 1
    payment_sheet: bool = False
    dialog: str | None = None
    popups: list[dict[str, Any]] = field(default_factory=list)
    overlays: list[str] = field(default_factory=list)  # windows over the app (phonesim/overlays.py), oldest first
    float_video: bool = False
    focused: str | None = None
    toast: str | None = None
    orders: list[Order] = field(default_factory=list)
    duplicate_submit: bool = False  # ``duplicate_submit`` fault: the confirm page shows two submit controls
    foreign: str | None = None  # package of an external cashier app in front of Pinduoduo, if any
    list_offset: dict[str, int] = field(default_factory=dict)  # order sheet: scroll px per dimension list
    banner_closed: bool = False

    @property
    def layout(self) -> str:
        """``sku_sheet`` or ``order_sheet`` (follows the app version unless the scenario forces one)."""
        return self.cfg.layout

    # --- derived state ----------------------------------------------------------------------
    @property
    def page(self) -> Page | None:
        return self.stack[-1] if (self.running and self.foreground and self.stack) else None

    @property
    def goods(self) -> Goods | None:
        page = self.page
        if page is None or page.goods_id is None:
            return None
        return self.cfg.catalogue.get(page.goods_id)

    @property
    def screen(self) -> str:
        """Name of what is on top, used by journal entries and ``when.on_screen`` triggers:
        launcher, home, product, sku, order_sheet, confirm, payment, order, orders, paid, challenge,
        blank, retention, order_success, stock_short, popup:<kind>, cashier_alipay, cashier_wechat."""
        page = self.page
        if page is None:
            return "launcher"
        if self.foreign:
            return "cashier_alipay" if self.foreign.startswith("com.eg.") else "cashier_wechat"
        if self.popups:
            return "popup:" + str(self.popups[-1]["kind"])
        if self.dialog:
            return self.dialog
        if self.payment_sheet:
            return "payment"
        if self.sheet_open:
            return "order_sheet" if self.layout == "order_sheet" else "sku"
        return page.name

    @property
    def foreground_package(self) -> str:
        """Package of the window in front: a cashier app, Pinduoduo, or the launcher."""
        if self.page is None:
            return LAUNCHER
        return self.foreign or self.cfg.app.package

    def unit_price(self) -> Decimal | None:
        goods = self.goods
        sku = goods.sku(self.selection) if goods else None
        return sku.price if sku else None

    def stock(self) -> int | None:
        goods = self.goods
        sku = goods.sku(self.selection) if goods else None
        return sku.stock if sku else None

    # --- navigation -------------------------------------------------------------------------
    def _reset_overlays(self) -> None:
        self.sheet_open = False
        self.payment_sheet = False
        self.dialog = None
        self.float_video = False
        self.focused = None
        self.foreign = None

    def launch(self) -> bool:
        """Bring the app to the front (launcher icon, ``monkey``, ``am start -n``). Returns cold start."""
        cold = not self.running
        if cold:
            self.running = True
            self.stack = [Page("home")]
        self.foreground = True
        self.foreign = None
        return cold

    def force_stop(self) -> None:
        self.running = False
        self.foreground = False
        self.stack = []
        self.popups = []
        self.overlays = []
        self.selection = {}
        self.quantity = 1
        self._reset_overlays()

    def open_url(self, url: str) -> tuple[bool, str | None]:
        """Handle ``am start -d URL``. Returns (cold start, what opened: a goods id, ``"orders"``
        for the pending-payment list ``orders.html?type=1``, or None when the link is not handled)."""
        m = ORDERS_URL.match(url)
        if m:
            if (urllib.parse.parse_qs(m.group("query")).get("type") or [""])[0] != "1":
                return False, None
            cold = self.launch()
            self._reset_overlays()
            self.sheet_open = False
            self.stack.append(Page("orders"))
            return cold, "orders"
        m = GOODS_URL.match(url)
        if not m:
            return False, None
        goods_id = (urllib.parse.parse_qs(m.group("query")).get("goods_id") or [""])[0]
        cold = self.launch()
        self._reset_overlays()
        self.selection = {}
        self.quantity = 1
        self.stack.append(Page("product", goods_id=goods_id))
        return cold, goods_id

    def home(self) -> str:
        self.foreground = False
        self.focused = None
        self.foreign = None
        return "home"

    def back(self) -> str:
        """KEYCODE_BACK. Returns the effect name for the journal."""
        page = self.page
        if page is None:
            return "none"
        if self.foreign:
            # leaving the cashier app: Pinduoduo comes back with its retention dialog
            self.foreign = None
            self.dialog = "retention" if page.order is not None else None
            return "leave_cashier"
        if self.popups:
            if self.popups[-1]["kind"] in WALLS:
                return "none"  # risk walls cannot be backed out of; the agent must stop and report
            self.popups.pop()
            return "dismiss_popup"
        if self.dialog == "retention":
            self.dialog = None
            return "close_dialog"
        if self.dialog:
            self.dialog = None
            return "close_dialog"
        if self.payment_sheet:
            self.payment_sheet = False
            self.dialog = "retention"
            return "retention"
        if self.sheet_open:
            self.sheet_open = False
            self.focused = None
            return "close_sheet"
        if page.name == "order":
            self.dialog = "retention"
            return "retention"
        self.stack.pop()
        self._reset_overlays()
        if not self.stack:
            self.running = True
            self.foreground = False
            return "to_launcher"
        return "back"

    # --- tap actions ------------------------------------------------------------------------
    def act(self, action: tuple[Any, ...]) -> str:
        """Apply a node action; returns a short effect name for the journal."""
        name, *args = action
        handler = getattr(self, "_do_" + name)
        return str(handler(*args))

    def _do_noop(self) -> str:
        return "none"

    def _do_key(self, key: str) -> str:
        return self.back() if key == "back" else self.home() if key == "home" else "none"

    def _do_launch(self) -> str:
        self.launch()
        return "launch"

    def _do_back(self) -> str:
        return self.back()

    def _do_open_sheet(self, label: str) -> str:
        self.sheet_open = True
        self.buy_button = label
        goods = self.goods
        if self.layout == "order_sheet" and goods is not None:
            # the order sheet always opens with a complete selection (the app's default SKU)
            self.selection = goods.default_selection()
            self.quantity = 1
            self.list_offset = {}
            return "open_order_sheet"
        return "open_sheet"

    def _do_close_banner(self) -> str:
        self.banner_closed = True
        return "close_banner"

    def _do_open_order(self, order_sn: str) -> str:
        order = next((o for o in self.orders if o.order_sn == order_sn), None)
        if order is None:
            return "none"
        self.stack.append(Page("order", goods_id=order.goods_id, order=order))
        return "open_order"

    def scroll_list(self, dim: str, dx: int, max_offset: int) -> int:
        """Scroll a horizontal option list by ``dx`` px (content moves left for dx > 0); returns px moved."""
        old = self.list_offset.get(dim, 0)
        new = max(0, min(old + dx, max_offset))
        self.list_offset[dim] = new
        return new - old

    def _do_close_sheet(self) -> str:
        self.sheet_open = False
        self.focused = None
        return "close_sheet"

    def _do_select(self, dim: str, option: str) -> str:
        goods = self.goods
        if goods is None:
            return "none"
        if not goods.option_available(self.selection, dim, option):
            if self.layout == "order_sheet":  # sold-out tiles stay enabled on the order sheet
                self.toast = "该款式已抢光"
                return "sold_out"
            return "none"
        self.selection[dim] = option
        stock = self.stock()
        if stock is not None and stock > 0:
            self.quantity = max(1, min(self.quantity, stock))
        return "select"

    def _do_qty(self, delta: int) -> str:
        stock = self.stock()
        cap = stock if stock is not None else 200
        new = max(1, min(self.quantity + delta, max(cap, 1)))
        if new == self.quantity:
            self.toast = f"最多购买{cap}件" if delta > 0 else "最少购买1件"
            return "qty_capped"
        self.quantity = new
        return "qty"

    def set_quantity_text(self, value: str) -> str:
        """Text typed into the quantity EditText: digits only, clamped to [1, stock] like the app."""
        digits = "".join(ch for ch in value if ch.isdigit())
        if not digits:
            return "none"
        stock = self.stock()
        cap = stock if stock is not None else 200
        self.quantity = max(1, min(int(digits[:6]), max(cap, 1)))
        return "qty"

    def _do_focus(self, what: str) -> str:
        self.focused = what
        return "focus"

    def _do_confirm_sheet(self) -> str:
        goods = self.goods
        if goods is None:
            return "none"
        missing = [d.name for d in goods.dimensions if d.name not in self.selection]
        if missing:
            self.toast = "请选择 " + " ".join(missing)
            return "select_missing"
        sku = goods.sku(self.selection)
        if sku is None or sku.stock <= 0:
            self.toast = "该规格已售罄"
            return "sold_out"
        self.sheet_open = False
        self.focused = None
        self.stack.append(Page("confirm", goods_id=goods.goods_id))
        return "open_confirm"

    def _do_submit(self) -> str:
        goods = self.goods
        if goods is None:
            return "none"
        if not self.cfg.address:
            self.toast = "请填写收货地址"
            return "no_address"
        sku = goods.sku(self.selection)
        if sku is None or sku.stock < self.quantity:
            self.dialog = "stock_short"
            return "stock_short"
        outcome = goods.outcome or self.cfg.outcome
        on_sheet = self.sheet_open and self.layout == "order_sheet"
        order = None
        if outcome != "SECURITY_CHALLENGE":
            order = Order(
                order_sn=f"250101-{next(_order_ids):09d}",
                goods_id=goods.goods_id,
                options=dict(self.selection),
                quantity=self.quantity,
                unit_price=sku.price,
                total=sku.price * self.quantity,
                outcome=outcome,
            )
            sku.stock -= self.quantity
            self.orders.append(order)

        def show(page: Page) -> None:
            # the order sheet lies over the product page (kept); the old confirm page is replaced
            if on_sheet:
                self.sheet_open = False
                self.stack.append(page)
            else:
                self.stack[-1] = page

        if outcome == "ORDER_CREATED":
            show(Page("order", goods_id=goods.goods_id, order=order))
            if self.cfg.order_success_popup:
                self.popups.append({"kind": "order_success", "text": None})
        elif outcome == "PAYMENT_HANDOFF":
            self.stack[-1].order = order
            self.payment_sheet = True
        elif outcome in CASHIERS:
            self.stack[-1].order = order
            self.foreign = CASHIERS[outcome][0]
        elif outcome == "PAID":
            assert order is not None
            order.status = "paid"  # what a password-free or pay-later mode can do with one tap
            show(Page("paid", goods_id=goods.goods_id, order=order))
        elif outcome == "SECURITY_CHALLENGE":
            self.sheet_open = False
            self.stack.append(Page("challenge", goods_id=goods.goods_id))
        else:  # BLANK: the order exists but the screen tells nothing
            show(Page("blank", goods_id=goods.goods_id, order=order))
        return "submit:" + outcome

    def _do_payment(self, what: str) -> str:
        # payment-linked controls never pay in the simulator; the journal flags the tap instead
        if what == "continue_pay":
            self.dialog = None
            page = self.page
            if page is not None and page.order is not None and page.order.outcome in CASHIERS:
                self.foreign = CASHIERS[page.order.outcome][0]  # back to the cashier app
            else:
                self.payment_sheet = True
        return "payment:" + what

    def _do_leave_order(self) -> str:
        self.dialog = None
        self.payment_sheet = False
        self.sheet_open = False
        while self.stack and self.stack[-1].name != "product":
            self.stack.pop()
        if not self.stack:
            self.foreground = False
        else:
            self.stack[-1].order = None  # the order stays pending in ``orders``; the page forgets it
        return "leave_order"

    def _do_close_dialog(self) -> str:
        self.dialog = None
        return "close_dialog"

    def _do_cancel_order(self) -> str:
        page = self.page
        if page and page.order:
            page.order.status = "cancelled"
        return "cancel_order"

    def _do_dismiss_popup(self) -> str:
        if self.popups:
            self.popups.pop()
        return "dismiss_popup"

    def _do_dismiss_overlay(self, kind: str) -> str:
        if kind in self.overlays:
            self.overlays.remove(kind)
        return "dismiss_overlay"

    def _do_close_float(self) -> str:
        self.float_video = False
        return "close_float"

    def show_popup(self, kind: str, text: str | None = None) -> None:
        if kind == "float_video":
            self.float_video = True
        else:
            self.popups.append({"kind": kind, "text": text})
