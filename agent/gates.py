"""The gates before the fence (docs/agent.md "Gates (fail closed)", the server re-checks them at the fence),
and the comparison of the last look before the submit tap with the fence request.

Pure functions over readings; each raises FlowStop with the wire reason code on failure. Fail closed:
a reading that is None is a stop with its own code, never "no objection" — no gate here skips a
check because a value could not be read.

SKU comparisons use :func:`cmbuyer.schemas.text.normalize_sku` (trim outer whitespace, then NFKC), the
same function the server uses; the tile names were read in that form (readers.sku_name).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from cmbuyer.agent.errors import FlowStop
from cmbuyer.agent.model import SubmissionProof
from cmbuyer.agent.screens import hit, safety
from cmbuyer.agent.screens.dump import Dump
from cmbuyer.schemas.sku import MAX_OPTIONS, SkuOptions
from cmbuyer.schemas.text import normalize_sku

MAX_DIMENSIONS = MAX_OPTIONS  # the most option groups a task can name (docs/agent.md "SKU model")
# how long a header may be in a stop summary (event summaries are at most 200 characters)
_HEADER_SHOWN = 24


def wanted_options(options: SkuOptions) -> dict[str, str]:
    """``{dimension: wanted value}`` of the task's options, both normalized
    (:func:`normalize_sku`), in the task's order. The dimension names key every selection reading and are
    the names the fence body reports (docs/api.md "SKU options")."""
    return {normalize_sku(d): normalize_sku(v) for d, v in options}


def _shown(header: str) -> str:
    return header if len(header) <= _HEADER_SHOWN else header[: _HEADER_SHOWN - 1] + "…"


def map_dimensions(headers: list[str], matched: dict[str, str | None], wanted: dict[str, str]) -> dict[str, str]:
    """``{task dimension: header}`` for the option groups on the sheet, before any tap.

    ``headers`` are the group headers as shown; ``matched`` maps each to the task dimension it stands for
    (``Pack.task_dimension``: the same name or a synonym from the pack's alias table; None = none).
    Every header shown must stand for a dimension the task names (else that group's default option would
    be bought unchecked), no two headers for the same one, and every named dimension must be shown;
    anything else → SKU_DIMENSION_UNNAMED with a summary naming the header and how to write the task."""
    if len(headers) > MAX_DIMENSIONS:
        shown = "、".join(map(_shown, headers[:4]))
        raise FlowStop(
            f"商品页有 {len(headers)} 个规格维度（{shown}），任务最多可写 {MAX_DIMENSIONS} 个", "SKU_DIMENSION_UNNAMED"
        )
    out: dict[str, str] = {}
    for header in headers:
        dimension = matched.get(header)
        if dimension is None or dimension not in wanted:
            raise FlowStop(
                f"商品页的规格维度“{_shown(header)}”任务未指定：请在任务里加上 {_shown(header)}=（页面上的选项名）（共"
                f" {len(headers)} 项：{'、'.join(map(_shown, headers))}）",
                "SKU_DIMENSION_UNNAMED",
            )
        if dimension in out:
            raise FlowStop(
                f"商品页的“{_shown(out[dimension])}”和“{_shown(header)}”都对应任务的“{_shown(dimension)}”："
                "请按页面显示的名称分别写出",
                "SKU_DIMENSION_UNNAMED",
            )
        out[dimension] = header
    for dimension in wanted:
        if dimension not in out:
            shown = "、".join(map(_shown, headers)) or "（无）"
            raise FlowStop(
                f"任务写了规格维度“{_shown(dimension)}”，商品页没有：页面显示的是 {shown}", "SKU_DIMENSION_UNNAMED"
            )
    return out


def gate1(selected: dict[str, str | None], wanted: dict[str, str], unit_price: Decimal | None) -> Decimal:
    """Gate 1 (options screen): each named dimension reads back exactly the requested value and the unit
    price reads unambiguously. Returns the unit price."""
    for dimension, value in wanted.items():
        read = selected.get(dimension)
        if read is None or read != normalize_sku(value):
            raise FlowStop(f"gate 1: {_shown(dimension)} does not read back", "SKU_NOT_SELECTED")
    if unit_price is None:
        raise FlowStop("gate 1: unit price unreadable", "UNIT_PRICE_UNREADABLE")
    return unit_price


def gate2(quantity_read: int | None, wanted: int, gate1_price: Decimal, price_now: Decimal | None) -> Decimal:
    """Gate 2: quantity set and read back exactly; unit price read again and unchanged since gate 1.
    Returns the unit price read now."""
    if quantity_read is None:
        raise FlowStop("gate 2: quantity unreadable", "QUANTITY_UNREADABLE")
    if quantity_read != wanted:
        raise FlowStop("gate 2: quantity does not read back", "QUANTITY_MISMATCH")
    if price_now is None:
        raise FlowStop("gate 2: unit price unreadable", "UNIT_PRICE_UNREADABLE")
    if price_now != gate1_price:
        raise FlowStop("gate 2: unit price changed", "PRICE_CHANGED")
    return price_now


@dataclass(frozen=True)
class Gate3Reading:
    """What the screen holding the submit control shows: ``selected`` maps each named dimension (the task's
    name) to the selected option read there (None = unreadable), ``unit_price``/``quantity``/``total`` (None =
    unreadable; total from ``提交订单 ¥<total>``), ``submit_controls`` the number of submit controls."""

    selected: dict[str, str | None]
    unit_price: Decimal | None
    quantity: int | None
    total: Decimal | None
    submit_controls: int


def gate3(
    reading: Gate3Reading, *, wanted: dict[str, str], gate1_price: Decimal, quantity: int, max_total: Decimal
) -> str:
    """Gate 3. Every reading must be present: each named dimension
    (SKU_SELECTION_UNREADABLE), unit price (UNIT_PRICE_UNREADABLE), quantity (QUANTITY_UNREADABLE), total
    (CONFIRM_AMOUNT_UNREADABLE). Then: each dimension equals the task's value (SKU_MISMATCH_ON_CONFIRM),
    quantity equals (QUANTITY_MISMATCH), unit price equals gate 1's (PRICE_CHANGED), unit × quantity
    and total ≤ cap (PRICE_OVER_CAP), total > unit × quantity (fees) → TOTAL_ABOVE_ITEMS, exactly one
    submit control (SUBMIT_CONTROL_COUNT). A total below unit × quantity (a discount) passes and is
    named in the returned event summary."""
    for dimension in wanted:
        if reading.selected.get(dimension) is None:
            raise FlowStop(f"gate 3: selected {_shown(dimension)} unreadable", "SKU_SELECTION_UNREADABLE")
    if reading.unit_price is None:
        raise FlowStop("gate 3: unit price unreadable", "UNIT_PRICE_UNREADABLE")
    if reading.quantity is None:
        raise FlowStop("gate 3: quantity unreadable", "QUANTITY_UNREADABLE")
    if reading.total is None:
        raise FlowStop("gate 3: total unreadable", "CONFIRM_AMOUNT_UNREADABLE")
    for dimension, value in wanted.items():
        if reading.selected[dimension] != normalize_sku(value):
            raise FlowStop(f"gate 3: selected {_shown(dimension)} differs", "SKU_MISMATCH_ON_CONFIRM")
    if reading.quantity != quantity:
        raise FlowStop("gate 3: quantity differs", "QUANTITY_MISMATCH")
    if reading.unit_price != gate1_price:
        raise FlowStop("gate 3: unit price changed", "PRICE_CHANGED")
    items = reading.unit_price * reading.quantity
    if items > max_total or reading.total > max_total:
        raise FlowStop("gate 3: total over the cap", "PRICE_OVER_CAP")
    if reading.total > items:
        raise FlowStop("gate 3: total above unit price × quantity", "TOTAL_ABOVE_ITEMS")
    if reading.submit_controls != 1:
        raise FlowStop(f"gate 3: {reading.submit_controls} submit controls", "SUBMIT_CONTROL_COUNT")
    if reading.total < items:
        return f"gate 3 ok; discount: total {reading.total} < items {items}"
    return f"gate 3 ok; total {reading.total}"


def submit_on_top(dump: Dump) -> None:
    """Gate 3's last check, on the dump gate 3 read: the one submit control is on top at
    its tap point (:func:`cmbuyer.agent.screens.hit.hit_test`: across windows and in drawing order). A
    popup, a toast or another app's window over it would take the one tap; found here, before the fence,
    nothing is spent → POPUP_UNHANDLED. (The last look before the tap checks again.)"""
    controls = safety.submit_controls(dump)
    if len(controls) != 1:
        raise FlowStop(f"gate 3: {len(controls)} submit controls", "SUBMIT_CONTROL_COUNT")
    verdict = hit.hit_test(dump, controls[0], controls[0].bounds.center)
    if not verdict.clear:
        raise FlowStop(f"gate 3: submit control covered ({verdict.why})", "POPUP_UNHANDLED")


def payment_gate(problems: tuple[str, ...], mode: str | None) -> str:
    """The payment-mode gate: no problem found and a mode read → the mode name;
    anything else → PAYMENT_MODE_UNSAFE (the one tap could pay without a person)."""
    if problems or mode is None:
        raise FlowStop("payment mode unsafe: " + "; ".join(problems or ("no mode",)), "PAYMENT_MODE_UNSAFE")
    return mode


def fenced_differences(reading: Gate3Reading, payment_mode: str | None, proof: SubmissionProof) -> list[str]:
    """What the screen reads now that differs from the fence request ``proof`` (the last
    dump before the submit tap must give the same gate-3 readings). ``reading`` comes from the gate-3
    reader (capabilities.confirm_reading), ``payment_mode`` is the mode that passed the payment-mode gate
    on the same dump (None when it did not pass). Returns the names of the readings that differ —
    ``option <dimension>`` for each SKU dimension (per dimension by the task's name, in the
    proof's order), then ``unit_price``, ``quantity``, ``total``, ``submit_controls``, ``payment_mode`` —
    in that order; empty = the same readings. A reading that cannot be read (None) differs, and so does a
    dimension read now that the proof does not carry. The request's submit-control count is always 1
    (gate 3 and the fence refuse any other)."""
    fenced_options = dict(proof.selected_options)
    names = [*fenced_options, *(d for d in reading.selected if d not in fenced_options)]
    now: dict[str, object] = {f"option {d}": reading.selected.get(d) for d in names}
    fenced: dict[str, object] = {f"option {d}": fenced_options.get(d) for d in names}
    now |= {
        "unit_price": reading.unit_price,
        "quantity": reading.quantity,
        "total": reading.total,
        "submit_controls": reading.submit_controls,
        "payment_mode": payment_mode,
    }
    fenced |= {
        "unit_price": proof.gate3_unit_price,
        "quantity": proof.quantity_read,
        "total": proof.confirm_page_amount,
        "submit_controls": proof.submit_control_match_count,
        "payment_mode": proof.payment_mode,
    }
    return [name for name in now if now[name] != fenced[name]]
