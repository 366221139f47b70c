"""The one text normalization both sides use for SKU values (design §7.5, spec 002 文本和金额校验).

Rule: Unicode NFKC, nothing else — no trimming, no case folding, no bracket unification. NFKC maps
full-width ASCII and ``￥`` to their plain forms but does *not* unify ``【】`` with ``[]``; the option
tile's text is the authoritative node on the phone (phone-facts), so the requested value must equal
the tile after NFKC, exactly.
"""

from __future__ import annotations

import unicodedata

__all__ = ["has_control_chars", "normalize_sku"]


def normalize_sku(value: str) -> str:
    """Return ``value`` in NFKC form (the documented comparison form of colour/size values)."""
    return unicodedata.normalize("NFKC", value)


def has_control_chars(value: str) -> bool:
    """True when ``value`` holds C0/C1 controls, lone surrogates or other ``Cc``/``Cs`` characters."""
    return any(unicodedata.category(ch) in ("Cc", "Cs") for ch in value)
