"""Validation of task fields (docs/api.md "Conventions"; docs/admin.md "Routes", `POST /tasks`). Pure functions.

Each ``parse_*`` returns the canonical value or raises :class:`ValidationFailed` naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from urllib.parse import parse_qs, urlsplit

from cmbuyer.schemas import MONEY_RE
from cmbuyer.schemas.sku import MAX_OPTIONS, SkuOptions
from cmbuyer.schemas.text import has_control_chars, normalize_sku, text_problem
from cmbuyer.server.domain.errors import ValidationFailed

# Hosts that serve Pinduoduo goods pages (mobile web and the main site).
PDD_HOSTS = frozenset({"mobile.yangkeduo.com", "yangkeduo.com", "mobile.pinduoduo.com", "pinduoduo.com"})
CANONICAL_URL = "https://mobile.yangkeduo.com/goods.html?goods_id={goods_id}"
SKU_MAX = 64
TITLE_MAX = 200
URL_MAX = 512


@dataclass(frozen=True)
class ProductRef:
    """A validated product: the canonical URL and its goods id (ASCII digits)."""

    url: str
    goods_id: str


def parse_product_url(raw: str) -> ProductRef:
    """Canonicalize a Pinduoduo goods URL; exactly one numeric ``goods_id`` on an allowed host.

    Raises ValidationFailed("product_url", …) for other hosts, schemes, userinfo/ports, a missing,
    repeated, non-numeric or ambiguous goods id.
    """
    if not isinstance(raw, str) or not raw or len(raw) > URL_MAX or has_control_chars(raw) or raw != raw.strip():
        raise ValidationFailed("product_url", "商品链接无效")
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError:
        raise ValidationFailed("product_url", "商品链接无效") from None
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("https", "http") or host not in PDD_HOSTS or parts.username or port is not None:
        raise ValidationFailed("product_url", "只接受拼多多商品链接")
    if parts.path not in ("/goods.html", "/goods2.html"):
        raise ValidationFailed("product_url", "只接受拼多多商品详情页链接")
    query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=False)
    ids = query.get("goods_id", [])
    if len(ids) != 1:
        raise ValidationFailed("product_url", "链接必须恰好包含一个 goods_id")
    goods_id = ids[0]
    if not (goods_id.isascii() and goods_id.isdigit()) or len(goods_id) > 20 or goods_id.startswith("0"):
        raise ValidationFailed("product_url", "goods_id 必须是十进制数字")
    return ProductRef(CANONICAL_URL.format(goods_id=goods_id), goods_id)


def check_text(field: str, what: str, value: str, *, multiline: bool = False) -> None:
    """Refuse text a person reads or a gate compares when it holds controls, bidi or invisible
    characters (the shared rule :func:`cmbuyer.schemas.text.text_problem`).

    Raises ValidationFailed(field, "<what>含…（U+XXXX）") — e.g. ``标题含不可见字符或文字方向控制符（U+202E）``.
    Every path that stores a title, SKU value, device name or note calls this before writing.
    """
    problem = text_problem(value, multiline=multiline)
    if problem is not None:
        raise ValidationFailed(field, what + problem)


def parse_sku(field: str, raw: object) -> str:
    """A colour/size value in the documented comparison form (``normalize_sku``: outer whitespace
    trimmed, then NFKC); 1–64 characters. Input with outer whitespace is refused rather than silently
    trimmed, so what a person typed is what the task shows."""
    if not isinstance(raw, str):
        raise ValidationFailed(field, "规格必须是文本")
    check_text(field, "规格", raw)
    value = normalize_sku(raw)
    if not value or len(value) > SKU_MAX or raw != raw.strip() or has_control_chars(value):
        raise ValidationFailed(field, "规格为空、过长或含控制字符")
    return value


def parse_optional_sku(field: str, raw: object) -> str | None:
    """:func:`parse_sku`, except that ``None`` — "this goods has no such dimension" — is kept as ``None``.

    Only the size is optional (one-dimension goods: docs/api.md "SKU options by dimension name").
    An empty string is not "none" here: a caller that means "empty = none" (the admin form) converts first.
    """
    return None if raw is None else parse_sku(field, raw)


def parse_sku_options(field: str, raw: object) -> SkuOptions:
    """The ordered SKU options of a task (docs/api.md "SKU options"): a list of one to
    :data:`~cmbuyer.schemas.sku.MAX_OPTIONS` ``[dimension, value]`` pairs, each text checked like a colour
    (:func:`parse_sku`: 1–64 characters, no outer whitespace, no hidden characters, NFKC form), the
    dimension names distinct. Raises ValidationFailed(field, …) naming the first problem."""
    if not isinstance(raw, (list, tuple)) or not 1 <= len(raw) <= MAX_OPTIONS:
        raise ValidationFailed(field, f"规格选项须为 1–{MAX_OPTIONS} 项（维度=值）")
    out: list[tuple[str, str]] = []
    for pair in raw:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ValidationFailed(field, "每个规格选项须为 [维度, 值]")
        dim, value = parse_sku(field, pair[0]), parse_sku(field, pair[1])
        if any(d == dim for d, _ in out):
            raise ValidationFailed(field, f"规格维度“{dim}”重复")
        out.append((dim, value))
    return tuple(out)


def parse_title(raw: object) -> str:
    """Trimmed title, 1–200 characters, no control, bidi or invisible characters (:func:`check_text`)."""
    if not isinstance(raw, str):
        raise ValidationFailed("title", "标题必须是文本")
    check_text("title", "标题", raw)
    value = raw.strip()
    if not value or len(value) > TITLE_MAX or has_control_chars(value):
        raise ValidationFailed("title", "标题为空、过长或含控制字符")
    return value


def parse_quantity(raw: object, cap: int) -> int:
    """A JSON integer (``type(x) is int``; bools and floats refused), 1 ≤ q ≤ cap."""
    if type(raw) is not int or not 1 <= raw <= cap:
        raise ValidationFailed("quantity", f"数量必须是 1 到 {cap} 的整数")
    return raw


def parse_money(field: str, raw: object, cap: Decimal) -> Decimal:
    """Canonical decimal string (``"12.88"``), 0.01 ≤ amount ≤ cap; returns a Decimal."""
    if not isinstance(raw, str) or MONEY_RE.fullmatch(raw) is None:
        raise ValidationFailed(field, "金额必须是规范的两位小数，例如 30.00")
    value = Decimal(raw)
    if not Decimal("0.01") <= value <= cap:
        raise ValidationFailed(field, f"金额必须在 0.01 到 {cap} 之间")
    return value


def money_text(value: Decimal) -> str:
    """Canonical text of a money Decimal (two decimals)."""
    return f"{value.quantize(Decimal('0.01'))}"
