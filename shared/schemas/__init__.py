"""Wire schemas shared by the server and the agent (docs/api.md is the authority).

Every request and response body of the device API has one JSON Schema file here
(``<message>.request.json`` / ``<message>.response.json``); ``common.json`` holds the shared
definitions. Both sides validate with :func:`validate`, so a message the server accepts is exactly a
message the agent may send, and vice versa.

JSON Schema ``pattern`` uses search semantics with ECMA-262 anchors: ``$`` is the end of the text.
Python's ``$`` also matches before a final newline (``"ABCDEF\n"`` passed ``^[0-9A-Za-z]{6}$``), so
the validator here reads every ``pattern`` through :func:`pattern_matches`, which gives ``$`` the
ECMA meaning (:func:`ecma_pattern`). The strict scalar forms (UUIDv4, money, UTC time, 64-hex) are
format checkers with :func:`re.fullmatch` on ASCII classes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource

__all__ = [
    "SchemaError",
    "enum_values",
    "is_hex64",
    "is_money",
    "is_pack_id",
    "is_utc_time",
    "is_uuid4",
    "parse_utc_time",
    "pattern_matches",
    "schema_names",
    "validate",
]

UUID4_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", re.ASCII)
HEX64_RE = re.compile(r"[0-9a-f]{64}", re.ASCII)
# Canonical money: no sign, no leading zeros, exactly two decimals (docs/api.md "Conventions").
MONEY_RE = re.compile(r"(0|[1-9][0-9]{0,8})\.[0-9]{2}", re.ASCII)
# Selector pack id (selector_pack.json "id"; heartbeat "pack_id"): lowercase ASCII, at most 64 characters.
PACK_ID_RE = re.compile(r"[a-z0-9][a-z0-9._+-]{0,63}", re.ASCII)
# What the heartbeat's pack_id says when the agent has no valid pack for the installed app version: not a pack id.
NO_PACK = "NO_PACK"
# Wire time: always UTC 'Z', optional 6-digit fraction (docs/api.md "Conventions", "Time on the wire").
UTC_TIME_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{6})?Z", re.ASCII)


class SchemaError(ValueError):
    """A message does not match its wire schema; ``path`` names the offending field (or "")."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


def is_uuid4(value: object) -> bool:
    """True for a lowercase canonical UUIDv4 string (RFC 9562 variant bits), nothing else."""
    return isinstance(value, str) and UUID4_RE.fullmatch(value) is not None


def is_hex64(value: object) -> bool:
    """True for exactly 64 lowercase hex characters (tokens, SHA-256 digests)."""
    return isinstance(value, str) and HEX64_RE.fullmatch(value) is not None


def is_money(value: object) -> bool:
    """True for a canonical money string such as ``"12.88"`` or ``"30.00"`` (CNY, two decimals)."""
    return isinstance(value, str) and MONEY_RE.fullmatch(value) is not None


def is_pack_id(value: object) -> bool:
    """True for a selector pack id such as ``"pdd-8.17.0-81700"`` (1–64 of ``a-z 0-9 . _ + -``, first a
    letter or digit), nothing else — in particular not the heartbeat's ``"NO_PACK"`` marker."""
    return isinstance(value, str) and PACK_ID_RE.fullmatch(value) is not None


def parse_utc_time(value: str) -> datetime:
    """Parse a wire timestamp (``YYYY-MM-DDTHH:MM:SS[.ffffff]Z``) into an aware UTC datetime.

    Raises ``ValueError`` for any other spelling (offsets, lowercase, 24:00, leap seconds, bad dates).
    """
    if not isinstance(value, str) or UTC_TIME_RE.fullmatch(value) is None:
        raise ValueError("not a canonical UTC timestamp")
    # The regex fixed the spelling (digits only, "T", optional 6-digit fraction, "Z"); fromisoformat then
    # checks the calendar (month 13, Feb 30, hour 24, second 60 raise ValueError) and reads "Z" as UTC.
    return datetime.fromisoformat(value)


def is_utc_time(value: object) -> bool:
    """True when :func:`parse_utc_time` accepts ``value``."""
    try:
        parse_utc_time(value)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return False
    return True


def _is_positive_money(value: object) -> bool:
    return is_money(value) and Decimal(value) > 0  # type: ignore[arg-type]


_FORMATS = FormatChecker(formats=())
_FORMATS.checks("uuid4")(is_uuid4)
_FORMATS.checks("hex64")(is_hex64)
_FORMATS.checks("money")(_is_positive_money)
_FORMATS.checks("utc-time")(is_utc_time)
_FORMATS.checks("pack-id")(is_pack_id)


def ecma_pattern(pattern: str) -> str:
    """``pattern`` (a JSON Schema / ECMA-262 regular expression) with every ``$`` anchor spelled ``\\Z``,
    Python's "end of the text": outside a character class an unescaped ``$`` is an anchor, and in
    ECMA-262 (no multiline flag) it matches only at the very end. Everything else is left as written
    (the shipped patterns use only syntax both dialects read alike)."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "]":  # a leading "]" is a literal member in Python
                out.append("[")
                i += 1
                ch = "]"
        elif ch == "$":
            ch = "\\Z"
        out.append(ch)
        i += 1
    return "".join(out)


@cache
def _pattern_re(pattern: str) -> re.Pattern[str]:
    return re.compile(ecma_pattern(pattern))


def pattern_matches(pattern: str, text: str) -> bool:
    """JSON Schema ``pattern`` semantics: True when ``pattern`` (ECMA-262 anchors, see
    :func:`ecma_pattern`) matches somewhere in ``text``. ``"ABCDEF\\n"`` does not match ``^[A-Z]+$``."""
    return _pattern_re(pattern).search(text) is not None


def _pattern_keyword(validator: Any, pattern: str, instance: object, schema: dict[str, Any]) -> Any:
    if validator.is_type(instance, "string") and not pattern_matches(pattern, instance):  # type: ignore[arg-type]
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


# Draft 2020-12 with the one change above: ``pattern`` (and so ``propertyNames.pattern``) ends at "$".
_Validator = validators.extend(Draft202012Validator, {"pattern": _pattern_keyword})


@cache
def _names() -> tuple[str, ...]:
    return tuple(
        sorted(p.name.removesuffix(".json") for p in resources.files(__package__).iterdir() if p.name.endswith(".json"))
    )


def schema_names() -> list[str]:
    """Names of every shipped schema (file names without ``.json``), sorted."""
    return list(_names())


def _load(name: str) -> dict[str, Any]:
    text = resources.files(__package__).joinpath(f"{name}.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@cache
def enum_values(name: str, pointer: str) -> tuple[str, ...]:
    """The ``enum`` list at JSON pointer ``pointer`` of schema ``name``, in the schema's order — e.g.
    ``enum_values("device_error.response", "/properties/error/enum")`` gives every device error code.

    The one source both sides read a closed list from (the server's error catalogue is checked against
    it, the agent maps the server's codes through it). Raises ``KeyError`` for an unknown schema name or
    a pointer that does not lead to a list of strings."""
    if name not in _names() or (pointer and not pointer.startswith("/")):
        raise KeyError(f"{name}.json{pointer}")
    node: Any = _load(name)
    for part in pointer.split("/")[1:]:
        key = part.replace("~1", "/").replace("~0", "~")  # RFC 6901 escapes
        if isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            raise KeyError(f"{name}.json{pointer}")
    if not isinstance(node, list) or not all(isinstance(v, str) for v in node):
        raise KeyError(f"{name}.json{pointer} is not a list of strings")
    return tuple(node)


@cache
def _registry() -> Registry:
    resources_: list[tuple[str, Resource[Any]]] = []
    for name in schema_names():
        resources_.append((f"{name}.json", Resource.from_contents(_load(name))))
    return Registry().with_resources(resources_)


@cache
def _validator(name: str) -> Any:
    schema = _load(name)
    Draft202012Validator.check_schema(schema)
    return _Validator(schema, registry=_registry(), format_checker=_FORMATS)


# --- Accept-only fast path -------------------------------------------------------------------------
# jsonschema costs ≈ 0.2 ms (claim-next) to 0.5 ms (lease renew) per small request body — a large share
# of a device request's CPU (docs/performance.md). For schemas made only of the simplest keywords (a
# closed object of required/optional string and integer fields, reached through ``common.json`` refs) a
# plain-Python check is compiled once. It may only *accept*: when it says "valid" the instance is valid
# under jsonschema too (tests/shared/test_schema_fast_path.py checks this with Hypothesis); any
# other outcome — invalid, or merely unusual types such as bool, float, str subclasses — falls through
# to jsonschema, so every error and its path stay exactly as before.

_Check = Callable[[object], bool]
_FAST_FORMATS: dict[str, _Check] = {
    "uuid4": is_uuid4,
    "hex64": is_hex64,
    "money": _is_positive_money,
    "utc-time": is_utc_time,
    "pack-id": is_pack_id,
}
_OBJECT_KEYS = frozenset(
    {"$schema", "$id", "title", "description", "type", "additionalProperties", "required", "properties"}
)
_ANNOTATIONS = frozenset({"title", "description", "$comment"})


def _resolve_def(schema: dict[str, Any]) -> dict[str, Any] | None:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    if len(schema) != 1 or not isinstance(ref, str) or not ref.startswith("common.json#/$defs/"):
        return None
    target = _load("common").get("$defs", {}).get(ref.removeprefix("common.json#/$defs/"))
    return target if isinstance(target, dict) and "$ref" not in target else None


def _compile_string(d: dict[str, Any]) -> _Check | None:
    lo, hi, fmt = d.get("minLength", 0), d.get("maxLength"), d.get("format")
    if (
        set(d) - _ANNOTATIONS - {"type", "minLength", "maxLength", "format"}
        or not isinstance(lo, int)
        or not (hi is None or isinstance(hi, int))
        or not (fmt is None or fmt in _FAST_FORMATS)
    ):
        return None
    check = _FAST_FORMATS[fmt] if fmt is not None else None

    def string_ok(v: object) -> bool:
        return type(v) is str and lo <= len(v) and (hi is None or len(v) <= hi) and (check is None or check(v))

    return string_ok


def _compile_integer(d: dict[str, Any]) -> _Check | None:
    lo, hi = d.get("minimum"), d.get("maximum")
    if set(d) - _ANNOTATIONS - {"type", "minimum", "maximum"} or not all(b is None or type(b) is int for b in (lo, hi)):
        return None

    def integer_ok(v: object) -> bool:
        return type(v) is int and (lo is None or v >= lo) and (hi is None or v <= hi)

    return integer_ok


def _compile_field(d: dict[str, Any]) -> _Check | None:
    kind = d.get("type")
    return _compile_string(d) if kind == "string" else _compile_integer(d) if kind == "integer" else None


def _compile_nullable(d: dict[str, Any]) -> _Check | None:
    """``{"oneOf": [{"$ref": "#/$defs/<simple>"}, {"type": "null"}]}`` (e.g. ``sku_text_or_null``): None, or
    what the simple definition accepts — the two branches can never both match, so ``oneOf`` holds."""
    branches = d.get("oneOf")
    if (
        set(d) - _ANNOTATIONS != {"oneOf"}
        or not isinstance(branches, list)
        or len(branches) != 2
        or branches[1] != {"type": "null"}
        or not isinstance(branches[0], dict)
    ):
        return None
    ref = branches[0].get("$ref")
    if len(branches[0]) != 1 or not isinstance(ref, str) or not ref.startswith("#/$defs/"):
        return None
    target = _load("common").get("$defs", {}).get(ref.removeprefix("#/$defs/"))
    inner = _compile_field(target) if isinstance(target, dict) and "$ref" not in target else None
    if inner is None:
        return None
    check = inner
    return lambda v: v is None or check(v)


def _compile_fast(schema: dict[str, Any]) -> _Check | None:
    """An accept-only check for ``schema``, or None when it uses anything beyond the simple subset."""
    if (
        set(schema) - _OBJECT_KEYS
        or schema.get("type") != "object"
        or schema.get("additionalProperties") is not False
        or not isinstance(schema.get("properties"), dict)
    ):
        return None
    props: dict[str, Any] = schema["properties"]
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(k, str) and k in props for k in required):
        return None
    checks: dict[str, _Check] = {}
    for key, sub in props.items():
        d = _resolve_def(sub) if isinstance(sub, dict) else None
        check = None if d is None else _compile_field(d) or _compile_nullable(d)
        if check is None:
            return None
        checks[key] = check
    need = frozenset(required)

    def object_ok(instance: object) -> bool:
        if type(instance) is not dict or len(instance) < len(need):
            return False
        for key, value in instance.items():
            check = checks.get(key) if type(key) is str else None
            if check is None or not check(value):
                return False
        return need.issubset(instance)

    return object_ok


@cache
def _fast(name: str) -> _Check | None:
    return _compile_fast(_load(name))


def validate(name: str, instance: object) -> None:
    """Validate ``instance`` against schema ``name`` (e.g. ``"claim_next.request"``).

    Raises :class:`SchemaError` with a short, non-echoing message (field path only, never the value,
    so tokens cannot leak into logs) and ``KeyError`` for an unknown schema name.
    """
    if name not in _names():
        raise KeyError(name)
    fast = _fast(name)
    if fast is not None and fast(instance):
        return
    error: ValidationError | None = next(iter(_validator(name).iter_errors(instance)), None)
    if error is not None:
        path = "/".join(str(p) for p in error.absolute_path)
        raise SchemaError(f"{error.validator} failed at /{path}", path)


def explain(name: str, instance: object) -> tuple[str, str] | None:
    """The most relevant violation of schema ``name`` by ``instance`` as ``(json_path, message)``
    (e.g. ``("$.layouts[0].id", "'foo' is not one of ['sku_sheet', 'order_sheet']")``), or None when it
    is valid. Unlike :func:`validate` the message may echo the offending value: use it only for
    documents that hold no secret (selector packs, scenarios), never for wire messages."""
    from jsonschema.exceptions import best_match

    error = best_match(_validator(name).iter_errors(instance))
    if error is None:
        return None
    return error.json_path, error.message
