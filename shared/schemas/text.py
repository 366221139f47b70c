"""Text rules both sides share: the one normalization of SKU values (docs/api.md "Conventions")
and the one check of text a person reads or a gate compares (:func:`text_problem`).

SKU rule (docs/agent.md "SKU names", docs/api.md): trim outer whitespace, then Unicode
NFKC — nothing else: no case folding, no inner whitespace collapsing, no bracket unification, no
removal of ``#`` or any other character inside a name. Real option tiles carry leading spaces
(``"  奶白色+礼盒"``), hence the trim. NFKC maps full-width ASCII and ``￥`` to their plain forms but
does *not* unify ``【】`` with ``[]``; the option tile is the authoritative node on the
phone, so the requested value must equal the tile's name in this form, exactly. The server
(task create, fence re-check) and the agent (tile names, gate comparisons) both call
:func:`normalize_sku` — this is the one implementation.
"""

from __future__ import annotations

import unicodedata

__all__ = ["BIDI_CONTROLS", "has_control_chars", "normalize_sku", "text_problem", "visible"]

# Bidirectional embeddings, overrides, isolates and marks: they reorder what a person sees (U+202E shows
# "price 88.21" for the stored "price 12.88"). All are in category Cf; named here for the summary rule.
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def normalize_sku(value: str) -> str:
    """``value`` with outer whitespace trimmed, then in NFKC form (the documented comparison form of
    colour/size values on both sides). Never changes anything inside the name."""
    return unicodedata.normalize("NFKC", value.strip())


def has_control_chars(value: str) -> bool:
    """True when ``value`` holds C0/C1 controls, lone surrogates or other ``Cc``/``Cs`` characters."""
    return any(unicodedata.category(ch) in ("Cc", "Cs") for ch in value)


def text_problem(value: str, *, multiline: bool = False) -> str | None:
    """None when ``value`` may be stored as text a person reads or a gate compares (task titles, SKU
    values, device names, notes), else a short Chinese reason naming the first offending code point,
    e.g. ``"含不可见字符或文字方向控制符（U+202E）"``.

    Refused (checked on the text as given, so NFKC cannot hide anything): control characters
    (category ``Cc``: NUL, C0, DEL, C1 — except line feed, carriage return and tab when ``multiline``), lone surrogates
    (``Cs``), every format character (``Cf``: the bidi controls U+202A–U+202E, U+2066–U+2069,
    U+200E/U+200F, U+061C; zero-width U+200B–U+200D, U+2060; BOM U+FEFF; soft hyphen; tag characters)
    and the line/paragraph separators U+2028/U+2029. They make a page show one thing while the stored
    text says another, or make two values that look equal compare unequal.
    """
    for ch in value:
        category = unicodedata.category(ch)
        if category == "Cc":
            if multiline and ch in "\n\r\t":
                continue
            return f"含控制字符（U+{ord(ch):04X}）"
        if category == "Cs":
            return f"含无效字符（U+{ord(ch):04X}）"
        if category in _HIDDEN:
            return f"含不可见字符或文字方向控制符（U+{ord(ch):04X}）"
    return None


_HIDDEN = frozenset({"Cf", "Zl", "Zp"})


def visible(value: str) -> str:
    """``value`` for a terminal or log line a person reads: every character :func:`text_problem` would
    refuse (controls — line breaks included —, lone surrogates, bidi/invisible format characters,
    line/paragraph separators) written as ``\\uXXXX``, so ``"\\u202e色黑"`` is shown as
    ``\\u202e色黑``, never as 黑色. Everything else is left as it is."""
    return "".join(
        f"\\u{ord(ch):04x}" if unicodedata.category(ch) in ("Cc", "Cs") or unicodedata.category(ch) in _HIDDEN else ch
        for ch in value
    )
