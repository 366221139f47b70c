"""Money formatting as the Pinduoduo app shows it.

The app prints yuan amounts with at most two decimals and drops trailing zeros
(``¥269``, ``¥12.88``, ``¥12.8``); readers on the agent side parse these texts, so
the simulator must produce exactly the same shapes.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")


def to_price(value: str | int | float | Decimal) -> Decimal:
    """Parse a scenario price (``"12.88"``, ``12.88`` or ``269``) into a Decimal rounded to cents.

    Floats go through ``str()`` first so YAML's ``12.88`` does not become 12.879999….
    """
    if isinstance(value, float):
        value = str(value)
    amount = Decimal(value).quantize(CENT, rounding=ROUND_HALF_UP)
    if amount < 0:
        raise ValueError(f"negative price: {value!r}")
    return amount


def fmt_amount(amount: Decimal) -> str:
    """``Decimal("25.760")`` -> ``"25.76"``, ``Decimal("269.00")`` -> ``"269"``, ``12.80`` -> ``"12.8"``."""
    text = f"{amount.quantize(CENT, rounding=ROUND_HALF_UP):f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def fmt_yuan(amount: Decimal) -> str:
    """The app's price label: ``¥`` + :func:`fmt_amount`."""
    return "¥" + fmt_amount(amount)
