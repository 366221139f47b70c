"""The fields of a task as people give them (form, CLI, spreadsheet, draft edit) and the one money rule
for people (docs/admin.md "Money typed by people"). Pure functions.

The JSON wire keeps docs/api.md's canonical two-decimal strings (:func:`values.parse_money`); everything a
person types or a spreadsheet holds goes through :func:`person_money` first, so ``50``, ``50.0`` and
``50.00`` mean the same amount everywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from cmbuyer.schemas.sku import legacy_options, legacy_view, options_from_text, options_text
from cmbuyer.server.domain import values
from cmbuyer.server.domain.errors import ValidationFailed

# ASCII digits, no leading zeros, at most two decimals; no sign, exponent, spaces or full-width digits.
_PERSON_MONEY = re.compile(r"(0|[1-9][0-9]{0,8})(?:\.([0-9]{1,2}))?", re.ASCII)
PERSON_MONEY_HINT = "请输入金额数字，最多两位小数，例如 30 或 30.00"
# The task fields, in the order people see them (form, template, export).
FIELDS = ("title", "product_url", "sku_options", "quantity", "max_total_price")


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
    """Validated task fields: canonical URL and goods id, the SKU options in their comparison form (NFKC)
    as canonical text (:func:`cmbuyer.schemas.sku.options_text`, the ``sku_options`` column), quantity, and
    the canonical money text of the cap."""

    title: str
    product_url: str
    goods_id: str
    sku_options: str
    quantity: int
    max_total_price: str

    def identity(self) -> tuple[str, str, int, str]:
        """What makes two purchases the same purchase (re-uploads create no duplicates): goods id,
        SKU options after normalization, quantity and cap — not the title or the URL's spelling."""
        return (self.goods_id, self.sku_options, self.quantity, self.max_total_price)


def hash_fields(fields: TaskFields) -> dict[str, Any]:
    """The fields a create key's request hash covers. Colour/size-shaped options hash as the
    ``sku_color``/``sku_size`` pair they were before migration 0011, so a create retried across the upgrade
    still replays instead of conflicting."""
    out: dict[str, Any] = {f: getattr(fields, f) for f in ("title", "product_url", "goods_id")}
    options = options_from_text(fields.sku_options)
    color, size = legacy_view(options)
    if color is not None:
        out.update(sku_color=color, sku_size=size)
    else:
        out["sku_options"] = fields.sku_options
    out.update(quantity=fields.quantity, max_total_price=fields.max_total_price)
    return out


def parse_options_field(raw: dict[str, Any]) -> str:
    """The canonical ``sku_options`` text of a request that names either ``sku_options`` (a list of
    ``[dimension, value]`` pairs) or the two-dimension special case ``sku_color`` (+ optional ``sku_size``)
    — never both (docs/api.md "SKU options"). Raises ValidationFailed."""
    given = raw.get("sku_options")
    color, size = raw.get("sku_color"), raw.get("sku_size")
    if given is not None:
        if color is not None or size is not None:
            raise ValidationFailed("sku_options", "请只用 sku_options，或只用 sku_color/sku_size，不要同时给出")
        return options_text(values.parse_sku_options("sku_options", given))
    if color is None and size is not None:
        raise ValidationFailed("sku_color", "给出尺码时须同时给出颜色")
    if color is None:
        raise ValidationFailed("sku_options", "请填写规格选项（维度=值），例如 颜色=红色、规格=3层100抽")
    return options_text(
        legacy_options(values.parse_sku("sku_color", color), values.parse_optional_sku("sku_size", size))
    )


def parse_task_fields(raw: dict[str, Any], *, max_quantity: int, max_total_price: Decimal) -> TaskFields:
    """Validate the task fields of ``raw`` (money already canonical text, quantity an ``int``; the options as
    ``sku_options`` or as ``sku_color``/``sku_size``, :func:`parse_options_field`). Raises ValidationFailed
    naming the first bad field in :data:`FIELDS` order — URL first, then money, as the form always did."""
    product = values.parse_product_url(raw.get("product_url"))  # type: ignore[arg-type]
    price = values.parse_money("max_total_price", raw.get("max_total_price"), max_total_price)
    return TaskFields(
        title=values.parse_title(raw.get("title")),
        product_url=product.url,
        goods_id=product.goods_id,
        sku_options=parse_options_field(raw),
        quantity=values.parse_quantity(raw.get("quantity"), max_quantity),
        max_total_price=values.money_text(price),
    )
