"""The fields of a task as people give them (form, CLI, spreadsheet, draft edit) and the one money rule
for people (issue 28 item 2; docs/admin.md "Money typed by people"). Pure functions.

The JSON wire keeps spec 002's canonical two-decimal strings (:func:`values.parse_money`); everything a
person types or a spreadsheet holds goes through :func:`person_money` first, so ``50``, ``50.0`` and
``50.00`` mean the same amount everywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from cmbuyer.server.domain import values
from cmbuyer.server.domain.errors import ValidationFailed

# ASCII digits, no leading zeros, at most two decimals; no sign, exponent, spaces or full-width digits.
_PERSON_MONEY = re.compile(r"(0|[1-9][0-9]{0,8})(?:\.([0-9]{1,2}))?", re.ASCII)
PERSON_MONEY_HINT = "请输入金额数字，最多两位小数，例如 30 或 30.00"
# The task fields, in the order people see them (form, template, export).
FIELDS = ("title", "product_url", "sku_color", "sku_size", "quantity", "max_total_price")


def person_money(field: str, raw: object) -> str:
    """Money typed by a person → the canonical two-decimal text (``"50"``/``"50.0"``/``"50.00"`` →
    ``"50.00"``). Only ``str`` is accepted here (a spreadsheet's numeric cell goes through
    :func:`cell_money` first). Raises ValidationFailed(field, …) for anything else; the range is checked
    by :func:`values.parse_money`."""
    m = _PERSON_MONEY.fullmatch(raw) if isinstance(raw, str) else None
    if m is None:
        raise ValidationFailed(field, PERSON_MONEY_HINT)
    return f"{m.group(1)}.{(m.group(2) or '').ljust(2, '0')}"


def decimal_money_text(field: str, value: Decimal) -> str:
    """A stored decimal number (a spreadsheet's numeric cell) as money text: finite, not negative, at
    most two places (``Decimal("30.1")`` → ``"30.10"``); more places, a sign or NaN raise ValidationFailed.
    The amount's range is checked later by :func:`values.parse_money`."""
    exponent = value.normalize().as_tuple().exponent if value.is_finite() else None
    if not isinstance(exponent, int) or value.is_signed() or exponent < -2:
        raise ValidationFailed(field, "金额最多两位小数，且不能为负数")
    return person_money(field, f"{value:.2f}")


@dataclass(frozen=True)
class TaskFields:
    """Validated task fields: canonical URL and goods id, SKU texts in their comparison form (NFKC),
    quantity, and the canonical money text of the cap."""

    title: str
    product_url: str
    goods_id: str
    sku_color: str
    sku_size: str | None
    quantity: int
    max_total_price: str

    def identity(self) -> tuple[str, str, str | None, int, str]:
        """What makes two purchases the same purchase (issue 28: re-uploads create no duplicates): goods id,
        SKU values after normalization, quantity and cap — not the title or the URL's spelling."""
        return (self.goods_id, self.sku_color, self.sku_size, self.quantity, self.max_total_price)


def parse_task_fields(raw: dict[str, Any], *, max_quantity: int, max_total_price: Decimal) -> TaskFields:
    """Validate the task fields of ``raw`` (money already canonical text, quantity an ``int``, ``sku_size``
    None for one-dimension goods). Raises ValidationFailed naming the first bad field in :data:`FIELDS` order
    — URL first, then money, as the form always did."""
    product = values.parse_product_url(raw.get("product_url"))  # type: ignore[arg-type]
    price = values.parse_money("max_total_price", raw.get("max_total_price"), max_total_price)
    return TaskFields(
        title=values.parse_title(raw.get("title")),
        product_url=product.url,
        goods_id=product.goods_id,
        sku_color=values.parse_sku("sku_color", raw.get("sku_color")),
        sku_size=values.parse_optional_sku("sku_size", raw.get("sku_size")),
        quantity=values.parse_quantity(raw.get("quantity"), max_quantity),
        max_total_price=values.money_text(price),
    )
