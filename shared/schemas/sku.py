"""SKU options by dimension name (docs/api.md "SKU options", docs/agent.md "SKU model").

A task names its options as an ordered list of one to three ``(dimension, value)`` pairs: the dimension is
the header text as the shop shows it (``颜色分类``, ``规格``, ``口味`` …), the value the option tile's name.
Both are compared in the one normalized form of :func:`cmbuyer.schemas.text.normalize_sku`.

The colour/size fields of the device API (``sku_color``/``sku_size``) are the special case whose dimensions are
:data:`COLOR_DIMENSION` then, optionally, :data:`SIZE_DIMENSION`: :func:`legacy_options` builds the list
from them, :func:`legacy_view` reads them back (``(None, None)`` for any other list).

Storage and comparison use :func:`options_text` (canonical JSON), so two lists are the same purchase
exactly when their texts are equal. Pure functions, shared by the server and the agent.
"""

from __future__ import annotations

import json

from cmbuyer.schemas.text import normalize_sku

__all__ = [
    "COLOR_DIMENSION",
    "MAX_OPTIONS",
    "SIZE_DIMENSION",
    "SkuOptions",
    "legacy_options",
    "legacy_view",
    "options_from_text",
    "options_label",
    "options_text",
    "split_option",
]

# The dimension names the two legacy fields stand for (the headers the colour/size goods show).
COLOR_DIMENSION = "颜色"
SIZE_DIMENSION = "尺码"
MAX_OPTIONS = 3  # the most dimensions a Pinduoduo SKU panel shows

SkuOptions = tuple[tuple[str, str], ...]


def options_text(options: SkuOptions) -> str:
    """The canonical storage/comparison text of ``options``: a compact JSON array of ``[dimension, value]``
    arrays in the task's order, non-ASCII kept (``[["规格","3层100抽"],["数量","6包"]]``)."""
    return json.dumps([list(o) for o in options], ensure_ascii=False, separators=(",", ":"))


def options_from_text(text: str) -> SkuOptions:
    """The inverse of :func:`options_text`. Raises ValueError when ``text`` is not a list of string pairs
    (a stored row is always valid; this guards against a hand-edited database)."""
    raw = json.loads(text)
    if not isinstance(raw, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in raw
    ):
        raise ValueError("sku options: not a list of [dimension, value] pairs")
    return tuple((p[0], p[1]) for p in raw)


def legacy_options(color: str, size: str | None) -> SkuOptions:
    """``sku_color``/``sku_size`` as options: ``((颜色, color), (尺码, size))``, the size left out when None.
    Values are taken as given (callers validate/normalize them first)."""
    if size is None:
        return ((COLOR_DIMENSION, color),)
    return ((COLOR_DIMENSION, color), (SIZE_DIMENSION, size))


def legacy_view(options: SkuOptions) -> tuple[str | None, str | None]:
    """``(sku_color, sku_size)`` of ``options`` when they are the colour[/size] special case built by
    :func:`legacy_options`; ``(None, None)`` for any other list (e.g. ``规格`` + ``数量``)."""
    dims = tuple(d for d, _ in options)
    if dims == (COLOR_DIMENSION,):
        return options[0][1], None
    if dims == (COLOR_DIMENSION, SIZE_DIMENSION):
        return options[0][1], options[1][1]
    return None, None


def options_label(options: SkuOptions) -> str:
    """What a person reads: ``"规格=3层100抽 / 数量=6包"`` (the CLI's ``--option`` spelling, in order)."""
    return " / ".join(f"{d}={v}" for d, v in options)


def split_option(text: str) -> tuple[str, str]:
    """``"规格=3层100抽"`` → ``("规格", "3层100抽")``, both normalized (:func:`normalize_sku`): split at the
    first ``=`` (a value may contain ``=``; a dimension may not). Raises ValueError when there is no ``=``
    or either side is empty after normalization. Lengths and characters are checked by the server."""
    dim, sep, value = text.partition("=")
    dim, value = normalize_sku(dim), normalize_sku(value)
    if not sep or not dim or not value:
        raise ValueError(f"option {text!r}: write it as 维度=值, e.g. 规格=3层100抽")
    return dim, value
