"""``cmbuyer-agent inspect`` core: recognize a dump and produce the readings JSON.

Output shape (tools rely on it; absent readings are null, money is a canonical decimal string)::

    {"screen": "product"|"sku_panel"|"confirm_order"|"order_created"|"payment"|
               "security_challenge"|"leave_order_dialog"|"unknown",
     "package": str, "pack": str|null, "layout": "sku_sheet"|"order_sheet"|null,
     "readings": {"goods_id", "unit_price", "quantity", "confirm_amount",
                  "selected": {header as shown: value|null}, "options": {header: [values]},
                  "sold_out": {header: [values]},
                  "submit_controls": int, "payment_controls": [text], "risk_walls": [text],
                  "payment_mode": row text|null, "payment_problems": [text]},
     "dimension_names": {header: [names a task may write for it]}}   # only when option groups are shown

``selected`` is what gate 3 would read: one selected tile per group and, where the pack declares the
``已选:`` label, a label that agrees (else null). ``options`` never contains the payment row, ``添加``,
the address row or the submit bar (readers.read_groups ends a group at any non-tile row); ``sold_out``
names the tiles of each group that are sold out or disabled (they stay in ``options``: the app shows
them). ``payment_controls`` and ``payment_mode`` are printed in the same form, NFKC (the form every
reader compares: ``使用#微信支付，更换支付方式`` prints as ``使用#微信支付,更换支付方式``).
``layout`` is the pack layout whose options live on the recognized screen (or the pack's only
layout, except on the screen holding the submit control: null there for a pack without the
order-sheet layout, since one dump cannot tell its confirm page from a real order sheet);
``payment_mode``/``payment_problems`` come from the payment-mode gate's reader on the screen holding
the submit control.

``dimension_names`` says how a task may name each option group shown (docs/agent.md "SKU model"): the header itself or a
synonym from the pack's alias table (``dimension_aliases``: ``颜色``/``颜色分类``/``色号`` …).

Without an explicit pack every shipped pack is tried (first that recognizes a screen wins; when more
than one does, ``pack_candidates`` lists them all, because a pack of another version can recognize a
screen and misread it — pass ``--pack``/``--version``); the
version-independent safety readers (payment controls, risk walls, submit text ``提交订单 ¥<amount>``)
always run. A reading that is ambiguous is reported as null — never a guess.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from cmbuyer.agent.errors import AgentError
from cmbuyer.agent.screens import readers, safety
from cmbuyer.agent.screens.dump import APP_PACKAGE, Dump
from cmbuyer.agent.screens.packmodel import Pack
from cmbuyer.agent.screens.text import money_str, normalize

SYSTEM_PACKAGES = frozenset({"com.android.systemui", ""})


def _package(dump: Dump) -> str:
    if dump.app_nodes():
        return APP_PACKAGE
    counts = Counter(n.package for n in dump.nodes if n.package not in SYSTEM_PACKAGES)
    return counts.most_common(1)[0][0] if counts else ""


def _safe(fn: Any, *args: Any) -> Any:
    """Run one reader; an ambiguity/unreadable error becomes null (inspect never guesses)."""
    try:
        return fn(*args)
    except AgentError:
        return None


def _money(value: Decimal | None) -> str | None:
    return None if value is None else money_str(value)


def inspect_dump(dump: Dump, packs: Sequence[Pack]) -> dict[str, Any]:
    """Readings for ``dump`` using the first of ``packs`` that recognizes it (or none)."""
    screen, pack = "unknown", None
    recognizing: list[str] = []
    for candidate in packs:
        found = readers.recognize(dump, candidate)
        if found != "unknown":
            recognizing.append(candidate.id)
            if pack is None:
                screen, pack = found, candidate
    if pack is None and safety.risk_walls(dump):
        screen = "security_challenge"

    generic_amounts = safety.submit_amounts(dump)
    readings: dict[str, Any] = {
        "goods_id": None,
        "unit_price": None,
        "quantity": None,
        "confirm_amount": _money(generic_amounts[0]) if len(set(generic_amounts)) == 1 else None,
        "selected": {},
        "options": {},
        "sold_out": {},
        "submit_controls": len(safety.submit_controls(dump)),
        "payment_controls": safety.payment_controls(dump),
        "risk_walls": safety.risk_walls(dump),
        "payment_mode": None,
        "payment_problems": [],
    }
    reader = readers.reader_for(pack, screen) if pack is not None else None
    if reader is not None:
        readings["goods_id"] = _safe(readers.read_goods_id, dump, reader)
        readings["unit_price"] = _money(_safe(readers.read_money, dump, reader.unit_price))
        readings["quantity"] = _safe(readers.read_quantity, dump, reader)
        if reader.amount is not None:
            amount = _safe(readers.read_money, dump, reader.amount)
            # The pack reader and the generic submit-text reader must agree, else null.
            generic = readings["confirm_amount"]
            readings["confirm_amount"] = (
                _money(amount) if amount is not None and generic in (None, _money(amount)) else None
            )
        groups = _safe(readers.read_options, dump, reader)
        if groups:
            readings["options"] = {dim: [t.text for t in tiles] for dim, tiles in groups.items()}
            readings["sold_out"] = {
                dim: [t.text for t in tiles if not t.available]
                for dim, tiles in groups.items()
                if any(not t.available for t in tiles)
            }
            readings["selected"] = readers.selected_readings(dump, reader, groups)
    if pack is not None and screen == "confirm_order":
        payment = readers.read_payment(dump, pack)
        readings["payment_mode"] = normalize(payment.row) if payment.row is not None else None
        readings["payment_problems"] = list(payment.problems)
    layout = None
    if pack is not None:
        on_screen = pack.layout_on(screen)
        # the screen holding the submit control names a layout only when options live there: for a
        # pack without the order_sheet layout that screen may be a real order sheet, never
        # labelled as its sku_sheet
        only = pack.layouts[0].id if len(pack.layouts) == 1 and screen != "confirm_order" else None
        layout = on_screen.id if on_screen is not None else only
    out: dict[str, Any] = {
        "screen": screen,
        "package": _package(dump),
        "pack": pack.id if pack else None,
        "layout": layout,
        "readings": readings,
    }
    if pack is not None and readings["options"]:
        # how a task may name each option group shown: the header itself or a synonym from the
        # pack's alias table (docs/agent.md "SKU model")
        out["dimension_names"] = {h: list(pack.aliases_of(h)) for h in readings["options"]}
    if len(recognizing) > 1:
        out["pack_candidates"] = recognizing
    return out
