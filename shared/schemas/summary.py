"""The "short non-sensitive summary" rule of events and fail reports (spec 002 事件与证据: no XML,
addresses, phone numbers, page text or tokens), shared by the server (which refuses such a summary
with 400) and the agent (which replaces such a wording with a fixed phrase before sending)."""

from __future__ import annotations

import re
import unicodedata

from cmbuyer.schemas.text import BIDI_CONTROLS

__all__ = ["SUMMARY_MAX", "summary_problem"]

SUMMARY_MAX = 200

# What a "short non-sensitive summary" may not contain (spec 002: no XML, addresses, phone numbers,
# page text or tokens). Checked on the NFKC form, so full-width digits and letters count too.
# Character references count with or without the ";" (HTML decodes "&#60" and "&lt" without it).
_MARKUP = re.compile(r"[<>]|&#|&[a-z][a-z0-9]*;|&(?:lt|gt|amp|quot|apos|nbsp)(?![a-z])"
                     r"|(?<![a-z])hierarchy(?![a-z])|(?<![a-z])xmlns(?![a-z])", re.IGNORECASE)
_PHONE = re.compile(r"\d(?:[ \-]?\d){6,}")
_RUN = re.compile(r"[A-Za-z0-9+/_=\-]{16,}")
# "claim_token", "token2", "X-Bearer": an underscore or a digit does not end a word here.
_SECRET_WORDS = re.compile(r"(?<![a-z])(?:bearer|token|password|passwd|secret)(?![a-z])", re.IGNORECASE)



def _looks_like_token(norm: str) -> bool:
    """A run of 16+ hex digits with a digit in it, or 24+ base64/URL-safe characters mixing letters
    and digits (plain words and reason codes such as ``CONFIRM_AMOUNT_UNREADABLE`` pass)."""
    for m in _RUN.finditer(norm):
        run = m.group(0)
        has_digit = any(c.isdigit() for c in run)
        if has_digit and re.search(r"[0-9a-fA-F]{16,}", run) and re.search(r"[0-9][a-fA-F]|[a-fA-F][0-9]", run):
            return True
        if has_digit and len(run) >= 24 and any(c.isalpha() for c in run):
            return True
    return _SECRET_WORDS.search(norm) is not None



def summary_problem(text: object) -> str | None:
    """None when ``text`` is an acceptable summary, else a short reason (never echoing the text).

    Refused: longer than 200 characters; control characters and bidi controls; anything that looks like markup
    (``<``, ``>``, character entities, ``hierarchy``/``xmlns``); 7 or more digits in a row (separators
    one space or hyphen allowed between digits — phone numbers, order or tracking numbers); a run of 16+
    hex digits (with a digit) or
    24+ base64/URL-safe characters mixing letters and digits, or the words ``bearer``/``token``/
    ``password``/``passwd``/``secret`` (an underscore or digit next to them does not hide them). Other
    invisible format characters (zero-width space, joiners, soft hyphen, BOM) are ignored by the checks
    so they cannot split a number or a word; entities count with or without their ``;``.
    """
    if not isinstance(text, str) or len(text) > SUMMARY_MAX:
        return "summary too long"
    norm = unicodedata.normalize("NFKC", text)
    if any(unicodedata.category(ch) in ("Cc", "Cs") or ch in BIDI_CONTROLS for ch in norm):
        return "control characters"
    # Other format characters (zero-width space/joiners, word joiner, BOM, soft hyphen …) survive NFKC
    # and would split a phone number, a token or a keyword so the checks below miss it: check the text
    # with them removed (emoji ZWJ sequences stay acceptable).
    norm = "".join(ch for ch in norm if unicodedata.category(ch) != "Cf")
    if _MARKUP.search(norm) or _PHONE.search(norm) or _looks_like_token(norm):
        return "summary looks sensitive"
    return None
