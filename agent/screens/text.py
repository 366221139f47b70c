"""Text normalization and money parsing (docs/agent.md "Text and money rules").

Normalization is ONE documented step: Unicode NFKC, nothing else — no case folding, no whitespace
collapsing, no bracket mapping. NFKC maps full-width forms (``￥``→``¥``, ``（``→``(``, full-width
digits → ASCII) but does NOT unify ``【】`` with ``[]``: the option tile's text is authoritative for
SKU comparison, the chosen-SKU label is only evidence.

Money: the currency sign ``¥`` (after NFKC), optional single space, then ``0|[1-9]\\d{0,8}`` with an
optional 1–2 digit fraction. Output is a :class:`~decimal.Decimal` quantized to cents and, on the
wire, its canonical two-decimal string (``"269.00"``).
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal

from cmbuyer.agent.errors import MoneyAmbiguous, MoneyError

CENT = Decimal("0.01")
# One price token: '¥' then digits; the lookarounds stop '¥12.888' or '¥1,234' from yielding a price.
AMOUNT = r"(?:0|[1-9][0-9]{0,8})(?:\.[0-9]{1,2})?"
_PRICE_TOKEN_RE = re.compile(r"¥ ?(" + AMOUNT + r")(?![0-9.,])", re.ASCII)
_YEN_RE = re.compile(r"¥")
_AMOUNT_RE = re.compile(AMOUNT, re.ASCII)


def normalize(text: str) -> str:
    """The one normalization step: NFKC. Documented in docs/agent.md."""
    return unicodedata.normalize("NFKC", text)


def to_money(amount: str) -> Decimal:
    """``"269"``/``"12.8"``/``"12.88"`` → Decimal with two decimals. Raises MoneyError otherwise."""
    if _AMOUNT_RE.fullmatch(amount) is None:
        raise MoneyError("amount is not a plain decimal")
    return Decimal(amount).quantize(CENT)


def money_str(value: Decimal) -> str:
    """Canonical wire money string (``common.json#/$defs/money``): two decimals, no sign."""
    return str(value.quantize(CENT))


def price_candidates(text: str) -> list[Decimal]:
    """Every ``¥<amount>`` token in ``normalize(text)``; a ``¥`` not followed by a clean amount
    makes the whole text unreadable (MoneyError) rather than silently skipped."""
    norm = normalize(text)
    found = [to_money(m.group(1)) for m in _PRICE_TOKEN_RE.finditer(norm)]
    if len(_YEN_RE.findall(norm)) != len(found):
        raise MoneyError("a currency sign without a readable amount")
    return found


def single_price(text: str) -> Decimal:
    """Exactly one price in the text (``最后3件 ¥269`` → 269.00). None → MoneyError; two or more
    (``¥12.88 ¥19.90``) → MoneyAmbiguous (never pick the "closest" one)."""
    found = price_candidates(text)
    if not found:
        raise MoneyError("no price in text")
    if len(found) > 1:
        raise MoneyAmbiguous("more than one price in text")
    return found[0]


def match_amount(pattern: re.Pattern[str], text: str) -> Decimal | None:
    """Full-match ``pattern`` (which must have a group named ``amount``) against ``normalize(text)``;
    None when it does not match. Pack regexes are anchored by construction (fullmatch)."""
    m = pattern.fullmatch(normalize(text))
    if m is None:
        return None
    return to_money(m.group("amount"))
