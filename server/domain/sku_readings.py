"""The SKU options a phone reports (fence body, approval readings) and the per-dimension comparison with a
task's options (docs/api.md "SKU options" and "Fence refusals"). Pure functions.

A report names its options either as ``selected_options`` (``[[dimension, value], ...]``, the dimensions
being the task's names) or — agents that know only colour/size — as ``selected_color`` + ``selected_size``, which
stand for the colour/size special case (:func:`cmbuyer.schemas.sku.legacy_options`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cmbuyer.schemas.sku import MAX_OPTIONS, SkuOptions, legacy_options, legacy_view
from cmbuyer.schemas.text import normalize_sku, text_problem

__all__ = ["is_legacy_report", "legacy_report_fits", "options_equal", "reported_as_read", "reported_options"]


def _text(raw: object) -> str | None:
    """A reported text in its comparison form; None when it is not text, blank, or holds a control, bidi or
    invisible character (:func:`text_problem`: a person may read it in the approval drawer)."""
    if not isinstance(raw, str) or text_problem(raw) is not None:
        return None
    return normalize_sku(raw) or None


def is_legacy_report(values: Mapping[str, Any]) -> bool:
    """True when the report carries ``selected_color`` (an agent that knows only colour/size) and no
    ``selected_options``."""
    return "selected_options" not in values and "selected_color" in values


def reported_options(values: Mapping[str, Any]) -> SkuOptions | None:
    """The reported options, normalized (:func:`normalize_sku`), in the reported order; None when they are
    missing or malformed (not 1–3 pairs of non-empty texts, hidden characters, a dimension named twice, a
    legacy size key absent) — the callers fail closed on None."""
    if is_legacy_report(values):
        color = _text(values.get("selected_color"))
        if color is None or "selected_size" not in values:
            return None
        size = values["selected_size"]
        if size is None:
            return legacy_options(color, None)
        size_text = _text(size)
        return None if size_text is None else legacy_options(color, size_text)
    raw = values.get("selected_options")
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_OPTIONS:
        return None
    out: list[tuple[str, str]] = []
    for pair in raw:
        if not isinstance(pair, list) or len(pair) != 2:
            return None
        dim, value = _text(pair[0]), _text(pair[1])
        if dim is None or value is None or any(d == dim for d, _ in out):
            return None
        out.append((dim, value))
    return tuple(out)


def reported_as_read(values: Mapping[str, Any]) -> SkuOptions:
    """The reported options exactly as sent (not normalized) — what a submission keeps as evidence of the
    reading; a colour/size report as its options. Call only on a report :func:`reported_options` accepted."""
    if is_legacy_report(values):
        return legacy_options(values["selected_color"], values["selected_size"])
    return tuple((p[0], p[1]) for p in values["selected_options"])


def options_equal(read: SkuOptions, wanted: SkuOptions) -> bool:
    """Per dimension by name: the same set of dimension names (every named dimension read,
    nothing read that the task does not name) and each read value equal to the task's. The order of the
    pairs does not matter; both sides are normalized."""
    return len(read) == len(wanted) and dict(read) == dict(wanted)


def legacy_report_fits(wanted: SkuOptions) -> bool:
    """Whether a colour/size report (an agent that knows only colour/size) can describe ``wanted`` at all: only the
    colour/size special case can. Otherwise the fence refuses ``sku_options_required``."""
    return legacy_view(wanted)[0] is not None
