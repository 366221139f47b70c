"""The part of the purchase flow that runs before the submission fence (docs/agent.md "The run loop" and "Layouts"),
shared by
the real flow (:class:`cmbuyer.agent.flow.PurchaseFlow`) and the server-less dry run
(:mod:`cmbuyer.agent.authoring.dryrun`).

open product → buy button (the pack's buy path) → the layout follows from the sheet that opens →
[order sheet: payment-mode gate at once] → select options → gate 1 (+gate screenshot) → [SKU sheet
with the stepper elsewhere: confirm control] → quantity → gate 2 (+gate screenshot) → [confirm page]
→ read the screen holding the submit control → payment-mode gate → gate 3 (+gate screenshot) → the
:class:`~cmbuyer.agent.model.SubmissionProof` holding the values READ there.

The engine never asks for a fence and cannot tap the submit control: it imports neither ``permit``
nor ``submit`` nor any result sink (tests/agent/test_layers.py). Whatever it does is reported to a
:class:`PrefenceObserver` — step events, gate screenshots and between-step checkpoints — which is the
server outbox for the real flow and the local capture writer for the dry run. Every stop is an
:class:`~cmbuyer.agent.errors.AgentError` carrying its wire reason code; the caller backs out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol, TypeVar

from cmbuyer.agent import capabilities as cap
from cmbuyer.agent import gates
from cmbuyer.agent.errors import FlowStop
from cmbuyer.agent.model import SubmissionProof
from cmbuyer.agent.phone.adapter import PhoneAdapter
from cmbuyer.agent.screens.packmodel import Layout, Pack
from cmbuyer.agent.waits import FlowWaits
from cmbuyer.schemas.sku import SkuOptions

T = TypeVar("T")

# The gate steps, in flow order; a dry run prints one verdict line for each.
GATE_STEPS = ("GATE_1", "GATE_2", "CHECK_PAYMENT_MODE", "GATE_3")


class PrefenceObserver(Protocol):
    """Where the engine reports. ``event``: one step event (step/outcome/reason codes of
    ``common.json``, summary ≤200 chars). ``gate_evidence``: take the gate screenshot NOW (before the
    next tap); ``read`` holds what the gate judged (``selected`` keyed by the task's dimension names,
    Decimal ``unit_price``/``confirm_amount``, int ``quantity``/``submit_controls``, str ``payment_mode``)
    for observers that compare it. ``checkpoint``: between steps; raise an AgentError to stop (stop request, lost lease,
    failed send)."""

    def event(self, step: str, outcome: str, reason: str | None = None, summary: str = "") -> None: ...

    def gate_evidence(self, kind: str, read: dict[str, Any]) -> None: ...

    def checkpoint(self) -> None: ...


@dataclass(frozen=True)
class PrefenceOrder:
    """What to buy: the task's goods id, its SKU options as the task names them (1–3 ``(dimension,
    value)`` pairs, docs/agent.md "SKU model"), quantity and the cap on the total (yuan)."""

    goods_id: str
    sku_options: SkuOptions
    quantity: int
    max_total: Decimal


@dataclass(frozen=True)
class PrefenceOutcome:
    """Everything passed: the proof for the fence (values read on the screen), the layout that was
    recognized, the final reading of the submit screen and gate 3's summary line."""

    proof: SubmissionProof
    layout: Layout
    reading: cap.ConfirmReading
    gate3_summary: str


@dataclass(kw_only=True, eq=False)
class PrefenceEngine:
    """Runs every pre-fence step on ``phone`` with ``pack``; ``buy_path`` is ``single`` or ``group``;
    ``waits``: how long a screen or a tap's effect may take."""

    phone: PhoneAdapter
    pack: Pack
    observer: PrefenceObserver
    buy_path: str
    waits: FlowWaits

    def _step(self, step: str, fn: Callable[[], T]) -> T:
        self.observer.checkpoint()
        self.observer.event(step, "STARTED")
        value = fn()
        self.observer.event(step, "OK")
        return value

    def run(self, order: PrefenceOrder) -> PrefenceOutcome:
        """Every step up to and including gate 3's screenshot and the checkpoint after it. Raises
        AgentError (FlowStop with the gate's reason code, phone/dump errors) on any stop; the phone is
        left where it stopped (the caller backs out)."""
        phone, pack, waits = self.phone, self.pack, self.waits
        wanted = gates.wanted_options(order.sku_options)
        self._step("OPEN_PRODUCT", lambda: cap.open_product(phone, pack, order.goods_id, waits=waits))
        layout = self._step("OPEN_SKU_PANEL", lambda: cap.open_buy_sheet(phone, pack, self.buy_path, waits=waits))
        early_mode = None
        if layout.options_screen == "confirm_order":
            # The order sheet shows the payment row from the start: refuse an unsafe mode before any
            # option or quantity tap.
            early_mode = self._step("CHECK_PAYMENT_MODE", lambda: cap.check_payment_mode(phone, pack))
        selected, swipes = self._step(
            "SELECT_SKU", lambda: cap.select_sku_options(phone, pack, layout.options_screen, wanted, waits=waits)
        )
        if swipes:
            self.observer.event("SCROLL_OPTIONS", "OK", None, f"{swipes} swipes inside option lists")
        read1 = self._step("READ_UNIT_PRICE", lambda: cap.read_unit_price(phone, pack, layout.options_screen))
        price1 = self._step("GATE_1", lambda: gates.gate1(selected, wanted, read1))
        self.observer.gate_evidence("SKU_PANEL_GATE_1", {"selected": dict(selected), "unit_price": price1})
        if layout.quantity_screen != layout.options_screen:
            self._step("GO_TO_CONFIRM", lambda: cap.go_to_order_confirm(phone, pack, layout, waits=waits))
        qty = self._step(
            "SET_QUANTITY",
            lambda: cap.set_quantity_and_readback(phone, pack, layout.quantity_screen, order.quantity, waits=waits),
        )
        price2 = self._step(
            "GATE_2",
            lambda: gates.gate2(qty, order.quantity, price1, cap.read_unit_price(phone, pack, layout.quantity_screen)),
        )
        self.observer.gate_evidence("QUANTITY_GATE_2", {"quantity": qty, "unit_price": price2})
        if layout.quantity_screen != "confirm_order":
            self._step("GO_TO_CONFIRM", lambda: cap.go_to_order_confirm(phone, pack, layout, waits=waits))
        reading = self._step("READ_CONFIRM_PAGE", lambda: cap.read_confirm_page(phone, pack, wanted))
        mode = self._step("CHECK_PAYMENT_MODE", lambda: payment_mode(reading, early_mode))
        self.observer.checkpoint()
        self.observer.event("GATE_3", "STARTED")
        summary = gates.gate3(
            reading.gate3, wanted=wanted, gate1_price=price1, quantity=order.quantity, max_total=order.max_total
        )
        gates.submit_on_top(phone.last_read_dump() or phone.dump())  # the dump READ_CONFIRM_PAGE read
        self.observer.event("GATE_3", "OK", None, summary)
        g3 = reading.gate3
        self.observer.gate_evidence(
            "CONFIRM_PAGE_GATE_3",
            {
                "selected": dict(g3.selected),
                "unit_price": g3.unit_price,
                "quantity": g3.quantity,
                "confirm_amount": g3.total,
                "submit_controls": g3.submit_controls,
                "payment_mode": mode,
            },
        )
        self.observer.checkpoint()
        # The fence body carries the values READ on the screen, never the task's own.
        read = tuple((dimension, g3.selected[dimension]) for dimension in wanted)
        # gate3 above refused any reading that was missing
        assert g3.unit_price is not None and g3.quantity is not None and g3.total is not None
        proof = SubmissionProof(
            selected_options=tuple((d, v) for d, v in read if v is not None),
            gate1_unit_price=price1,
            gate2_unit_price=price2,
            gate3_unit_price=g3.unit_price,
            quantity_read=g3.quantity,
            confirm_page_amount=g3.total,
            submit_control_match_count=g3.submit_controls,
            payment_mode=mode,
        )
        return PrefenceOutcome(proof, layout, reading, summary)


def payment_mode(reading: cap.ConfirmReading, early_mode: str | None) -> str:
    """The payment-mode gate on the final reading; on the order sheet it must also name the mode read
    when the sheet opened (a changed mode is unsafe → PAYMENT_MODE_UNSAFE)."""
    mode = gates.payment_gate(reading.payment.problems, reading.payment.mode)
    if early_mode is not None and mode != early_mode:
        raise FlowStop("payment mode changed on the sheet", "PAYMENT_MODE_UNSAFE")
    return mode
