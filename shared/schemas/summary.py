"""The "short non-sensitive summary" rule of events and fail reports (docs/api.md "POST /api/v1/tasks/{id}/events": no
XML, addresses, phone numbers, page text or tokens), shared by the server (which refuses such a summary
with 400) and the agent (which replaces such a wording with a fixed phrase before sending)."""

from __future__ import annotations

import re
import unicodedata

from cmbuyer.schemas.text import BIDI_CONTROLS

__all__ = ["SUMMARY_MAX", "summary_problem"]

SUMMARY_MAX = 200

# What a "short non-sensitive summary" may not contain (docs/api.md "POST /api/v1/tasks/{id}/events": no XML, addresses,
# phone numbers, page text or tokens). Checked on the NFKC form, so full-width digits and letters count too.
# Character references count with or without the ";" (HTML decodes "&#60" and "&lt" without it).
_MARKUP = re.compile(
    r"[<>]|&#|&[a-z][a-z0-9]*;|&(?:lt|gt|amp|quot|apos|nbsp)(?![a-z])"
    r"|(?<![a-z])hierarchy(?![a-z])|(?<![a-z])xmlns(?![a-z])",
    re.IGNORECASE,
)
# Personal data of the order sheet: phone numbers, addresses, the recipient's name.
# Phone shapes are matched on the text with every Unicode decimal digit mapped to ASCII. A number only
# counts when no digit touches it on either side, so a 15-digit order number or goods id that merely
# contains "138…" is not a phone number; up to three separators (space, hyphen, dot, dash, slash,
# underscore, middle dot) may sit between the digit groups.
_SEP = r"[\s\-._/·\u2010-\u2015\u2212]{0,3}"
_PHONES = re.compile(
    # mainland mobile, optionally +86 / 0086 / 86: 138 1234 5678
    rf"(?<!\d)(?:(?:\+|00)?86{_SEP})?1[3-9]\d{_SEP}\d{{4}}{_SEP}\d{{4}}(?!\d)"
    # the same with the middle digits masked: 138****5678, 138 **** 5678
    rf"|(?<!\d)1[3-9]\d{_SEP}[*xX×•●]{{3,6}}{_SEP}\d{{4}}(?!\d)"
    # landline with area code: 010-12345678, (0571) 8888 1234
    rf"|(?<!\d)(?:\(0\d{{2,3}}\)|0\d{{2,3}}){_SEP}\d{{3,4}}{_SEP}\d{{4}}(?!\d)"
)
# Resident identity card number (18 characters, birth date inside); confirmed by its check digit below.
_ID_CARD = re.compile(
    r"(?<![0-9A-Za-z])[1-9]\d{5}(?:18|19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])\d{3}"
    r"[\dXx](?![0-9A-Za-z])"
)
_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_CJK = "\u3400-\u9fff"
_PROVINCES = (
    "北京|天津|上海|重庆|河北|山西|辽宁|吉林|黑龙江|江苏|浙江|安徽|福建|江西|山东|河南|湖北|湖南|广东|海南|"
    "四川|贵州|云南|陕西|甘肃|青海|台湾|内蒙古|广西|西藏|宁夏|新疆|香港|澳门"
)
_PERSONAL = re.compile(
    # an address label with something after it: 收货地址 北京市…
    r"(?:收货|收件|详细|配送|联系)地址[\s:：]*\S"
    # a province followed by a city/district/county: 北京市朝阳区, 广东深圳南山区
    rf"|(?:{_PROVINCES})(?:省|市|自治区|特别行政区|壮族自治区|回族自治区|维吾尔自治区)?[{_CJK}]{{1,8}}?(?:市|区|县|州|盟|旗)"
    # a district/county followed by a road: 朝阳区建国路
    rf"|[{_CJK}][区县][{_CJK}]{{1,8}}?(?:路|街|大道|胡同|巷)"
    # a road/street with a house number: 建国路88号, 幸福巷 3 弄
    r"|(?:路|街|道|巷|弄|胡同)\s*\d+\s*(?:号|弄|巷|栋|幢)"
    # building, unit and room numbers: 3号楼2单元501室
    r"|\d+\s*(?:号楼|栋|幢|单元|室)"
    # the recipient's name: 收货人 张三, 收件人：李四
    rf"|(?:收货人|收件人|联系人)(?:姓名)?[\s:：]*[{_CJK}A-Za-z]"
    # a masked name as the order sheet shows it: 张**, 李*
    rf"|[{_CJK}]\*{{1,3}}"
)
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


def _ascii_digits(text: str) -> str:
    return "".join(str(unicodedata.decimal(ch)) if ch.isdecimal() and not ch.isascii() else ch for ch in text)


def looks_like_phone(text: str) -> bool:
    """True when ``text`` (NFKC-normalized by the caller) shows a phone number anywhere: a mainland
    mobile — plain, with ``+86``/``0086``/``86``, masked (``139****1234``), with spaces, dots or dashes
    between the groups (``139.1234.5678``) — or a landline with its area code (``0571-88881234``,
    ``(010) 1234 5678``); digits of any script count. The one phone rule of the summaries and of the
    agent's capture scrubbing."""
    return _PHONES.search(_ascii_digits(text)) is not None


def _looks_like_personal(norm: str) -> bool:
    """A phone number (plain, masked or separated), an identity card number, an address or a
    recipient's name (see :func:`summary_problem`)."""
    ascii_digits = _ascii_digits(norm)
    if _PHONES.search(ascii_digits) or _PERSONAL.search(ascii_digits):
        return True
    for m in _ID_CARD.finditer(ascii_digits):
        number = m.group(0).upper()
        check = (12 - sum(int(d) * w for d, w in zip(number[:17], _ID_WEIGHTS, strict=True)) % 11) % 11
        if number[-1] == ("X" if check == 10 else str(check)):
            return True
    return False


def summary_problem(text: object) -> str | None:
    """None when ``text`` is an acceptable summary, else a short reason (never echoing the text).

    Refused: longer than 200 characters; control characters and bidi controls; anything that looks like
    markup (``<``, ``>``, character entities, ``hierarchy``/``xmlns``); personal data of the order sheet —
    a mainland mobile number (``13812345678``, ``+86 138-1234-5678``, ``138.1234.5678``), a masked one
    (``138****5678``), a landline with area code (``010-12345678``, ``0571 8888 1234``), an identity card
    number (check digit verified), an address (an address label such as ``收货地址`` with text after it,
    a province followed by a city/district, a district followed by a road, a road with a house number,
    building/unit/room numbers), a name after ``收货人``/``收件人``/``联系人`` and a masked name (``张**``);
    a run of 16+ hex digits (with a digit) or 24+ base64/URL-safe characters mixing letters and digits,
    or the words ``bearer``/``token``/``password``/``passwd``/``secret`` (an underscore or digit next to
    them does not hide them). Other invisible format characters (zero-width space, joiners, soft hyphen,
    BOM) are ignored by the checks so they cannot split a number or a word; entities count with or
    without their ``;``; digits of any script count as digits.

    Accepted on purpose: prices (``¥12.88``), quantities, sizes (``M(建议100-115)``), goods ids and order
    numbers — a digit run is a phone number only when its own digits, with nothing but separators
    between them, have a phone's shape (so ``231201-493047618902345`` passes). Known false positive: an
    11-digit id that starts with 13–19 reads as a mobile number.
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
    if _MARKUP.search(norm) or _looks_like_personal(norm) or _looks_like_token(norm):
        return "summary looks sensitive"
    return None
