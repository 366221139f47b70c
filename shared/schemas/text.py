"""The one text normalization both sides use for SKU values (design §7.5, spec 002 文本和金额校验).

Rule (issue 15 §3, docs/agent.md "SKU names", docs/api.md): trim outer whitespace, then Unicode
NFKC — nothing else: no case folding, no inner whitespace collapsing, no bracket unification, no
removal of ``#`` or any other character inside a name. Real option tiles carry leading spaces
(``"  奶白色+礼盒"``), hence the trim. NFKC maps full-width ASCII and ``￥`` to their plain forms but
does *not* unify ``【】`` with ``[]``; the option tile is the authoritative node on the phone
(phone-facts), so the requested value must equal the tile's name in this form, exactly. The server
(task create, fence re-check) and the agent (tile names, gate comparisons) both call
:func:`normalize_sku` — this is the one implementation.
"""

from __future__ import annotations

import unicodedata

__all__ = ["has_control_chars", "normalize_sku"]


def normalize_sku(value: str) -> str:
    """``value`` with outer whitespace trimmed, then in NFKC form (the documented comparison form of
    colour/size values on both sides). Never changes anything inside the name."""
    return unicodedata.normalize("NFKC", value.strip())


def has_control_chars(value: str) -> bool:
    """True when ``value`` holds C0/C1 controls, lone surrogates or other ``Cc``/``Cs`` characters."""
    return any(unicodedata.category(ch) in ("Cc", "Cs") for ch in value)
