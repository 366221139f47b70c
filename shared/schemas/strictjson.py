"""Strict JSON decoding shared by the server's body readers and the agent (docs/api.md "Conventions"
and "Request bodies"): strict UTF-8 without BOM, no duplicate keys, no NaN/Infinity, no floats unless asked,
no trailing data (``json.loads`` already refuses it), no lone surrogates. Python's own limits cover
5000-digit integers (ValueError) and deep nesting (RecursionError), both reported as
:class:`StrictJSONError`."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["StrictJSONError", "loads_strict", "shape_problem"]

# A complete JSON string (its brackets and commas are text, not structure).
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(rb"[\[\]{}]")


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


def shape_problem(raw: bytes | str, *, max_depth: int, max_values: int) -> str | None:
    """Why ``raw`` is too deep or too big to be parsed, or None — checked on the text, *before* any
    parser runs (a 100,000-deep ``[[[…`` makes Python's decoders raise RecursionError, and anything that
    walks the result recursively would too).

    Values are counted as ``1 + containers + commas`` outside strings, an upper bound of the number of
    JSON values (every value is the root, the first member of its container or follows a comma); depth
    is the deepest nesting of ``[``/``{``. Text that is not JSON is bounded the same way (the parser
    then refuses it). Cost: linear in the text, with the Python-level loop only over brackets after
    the value bound held.
    """
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    structure = _STRING.sub(b'""', data)
    containers = structure.count(b"[") + structure.count(b"{")
    if 1 + containers + structure.count(b",") > max_values:
        return f"more than {max_values} values"
    depth = deepest = 0
    for m in _BRACKETS.finditer(structure):
        if m.group() in (b"[", b"{"):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > max_depth:
                    return f"nested deeper than {max_depth} levels"
        else:
            depth -= 1
    return None
