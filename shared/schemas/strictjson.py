"""Strict JSON decoding shared by the server's body readers and the agent (design §4, bad-inputs
"JSON bodies"): strict UTF-8 without BOM, no duplicate keys, no NaN/Infinity, no floats unless asked,
no trailing data (``json.loads`` already refuses it), no lone surrogates. Python's own limits cover
5000-digit integers (ValueError) and deep nesting (RecursionError), both reported as
:class:`StrictJSONError`."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["StrictJSONError", "loads_strict"]


class StrictJSONError(ValueError):
    """The text is not acceptable strict JSON; the message is generic (never echoes the input)."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise StrictJSONError("duplicate key")
        out[key] = value
    return out


def _reject_constant(_name: str) -> Any:
    raise StrictJSONError("NaN or Infinity")


def _reject_float(_text: str) -> Any:
    raise StrictJSONError("float where only integers are allowed")


def loads_strict(raw: bytes | str, *, allow_floats: bool = False) -> Any:
    """Decode ``raw`` (UTF-8 bytes or text) under the strict rules above.

    Returns any JSON value (callers check the top-level type). Raises :class:`StrictJSONError`.
    """
    try:
        if isinstance(raw, bytes):
            if raw.startswith(b"\xef\xbb\xbf"):
                raise StrictJSONError("byte order mark")
            text = raw.decode("utf-8", errors="strict")
        else:
            text = raw
        if text.startswith("\ufeff"):
            raise StrictJSONError("byte order mark")
        value = json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_reject_constant,
            parse_float=None if allow_floats else _reject_float,
        )
        # Escaped lone surrogates ("\ud800") decode to text that cannot be encoded again.
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except StrictJSONError:
        raise
    except (UnicodeError, ValueError, RecursionError):
        raise StrictJSONError("not strict JSON") from None
    return value
