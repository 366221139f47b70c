"""Exact patterns everywhere: no pattern accepts a valid text with a newline after it.

Python's ``$`` also matches before a final newline, so ``^[0-9A-Za-z-]{6,40}$`` let ``"ABCDEF\\n"`` through.
Two tables:

* every ``pattern`` in ``shared/schemas/*.json`` (JSON Schema, ECMA-262 anchors): a text drawn from the
  pattern (Hypothesis) passes, the same text plus ``"\\n"`` is refused — through the validator's own
  :func:`cmbuyer.schemas.pattern_matches`;
* every regular expression in ``server/``, ``agent/`` and ``shared/`` (module-level compiled patterns,
  found by importing every module, and every literal handed to ``re.compile``/``re.fullmatch``/
  ``re.match``/``re.search``, found by parsing the source): none uses ``$`` as an end anchor (``fullmatch``
  or ``\\Z`` instead), ``re.match`` is not used at all, and a text the pattern matches in full is no
  longer a full match with ``"\\n"`` after it.
"""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cmbuyer.agent
import cmbuyer.schemas
import cmbuyer.schemas.clihelp
import cmbuyer.server
from cmbuyer.schemas import ecma_pattern, pattern_matches

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "shared" / "schemas"
SOURCES = [ROOT / "server", ROOT / "agent", ROOT / "shared"]

# Patterns that are *meant* to match inside a longer text or across lines; each says why a newline
# after a full match is harmless there.
NOT_WHOLE_TEXT = {
    # one line of `dumpsys package` output, read line by line (MULTILINE): "\s*$" is the line's end
    r"^\s*versionName=(\S+)\s*$",
    # a refusal, not a reading: generic taps refuse "提交订单" followed by anything, a newline included
    r"\s*提\s*交\s*订\s*单.*",
    # a tokenizer (findall over help text, cutting it into words, Chinese characters and spaces), never
    # a whole-text match: a newline is a space token by design
    cmbuyer.schemas.clihelp._TOKENS.pattern,
}


def _schema_patterns() -> Iterator[tuple[str, str]]:
    def walk(node: Any, where: str) -> Iterator[tuple[str, str]]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "pattern" and isinstance(value, str):
                    yield where, value
                else:
                    yield from walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                yield from walk(value, f"{where}/{i}")

    for path in sorted(SCHEMAS.glob("*.json")):
        yield from walk(json.loads(path.read_text(encoding="utf-8")), path.name)


SCHEMA_PATTERNS = sorted(set(_schema_patterns()))


def test_the_schemas_have_patterns() -> None:
    assert len(SCHEMA_PATTERNS) >= 10  # the walk found them (order_sn, short_text, pack ids, …)
    assert any(where.endswith("order_sn") for where, _ in SCHEMA_PATTERNS)


@pytest.mark.parametrize(("where", "pattern"), SCHEMA_PATTERNS, ids=[w for w, _ in SCHEMA_PATTERNS])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_schema_pattern_refuses_a_trailing_newline(where: str, pattern: str, data: st.DataObject) -> None:
    assert pattern.startswith("^") and pattern.endswith("$"), f"{where}: a schema pattern is anchored at both ends"
    valid = data.draw(st.from_regex(ecma_pattern(pattern)))
    assert pattern_matches(pattern, valid)
    for tail in ("\n", "\r\n", "\n\n"):
        assert not pattern_matches(pattern, valid + tail), (where, valid)


def test_the_validator_uses_the_exact_reading() -> None:
    """The validator itself, not only the helper: short_text and order_sn with a newline are refused."""
    schema = cmbuyer.schemas
    with pytest.raises(schema.SchemaError):
        schema.validate("heartbeat.request", _heartbeat(client_version="0.1.0\n"))
    schema.validate("heartbeat.request", _heartbeat(client_version="0.1.0"))
    assert schema.explain("selector_pack", {"id": "pdd-1\n"}) is not None


def _heartbeat(**over: Any) -> dict[str, Any]:
    body = {
        "device_id": "5277bd07-5707-44db-b0ca-9b976a14fbd9",
        "client_version": "0.1.0",
        "adb_serial": "emulator-5554",
        "android_release": "13",
        "pdd_version": "8.22.0",
        "state": "READY",
    }
    body.update(over)
    return body


# -- every regular expression in the Python sources -----------------------------------------------------


def _compiled_patterns() -> dict[str, re.Pattern[Any]]:
    found: dict[str, re.Pattern[Any]] = {}
    for package in (cmbuyer.server, cmbuyer.agent, cmbuyer.schemas):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if isinstance(value, re.Pattern):
                    found.setdefault(f"{info.name}.{name}", value)
        for name, value in vars(package).items():
            if isinstance(value, re.Pattern):
                found.setdefault(f"{package.__name__}.{name}", value)
    return found


_RE_CALLS = {"compile", "fullmatch", "match", "search"}


def _literal_patterns() -> Iterator[tuple[str, str, str | bytes, int]]:
    """``(where, call, pattern, flags)`` of every ``re.<call>(<literal>, …)`` in the sources."""
    for root in SOURCES:
        for path in sorted(root.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "re"
                    and node.func.attr in _RE_CALLS
                    and node.args
                ):
                    first = node.args[0]
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    if isinstance(first, ast.Constant) and isinstance(first.value, str | bytes):
                        flags = re.MULTILINE if "MULTILINE" in ast.unparse(node) else 0
                        yield where, node.func.attr, first.value, flags


LITERALS = list(_literal_patterns())
COMPILED = _compiled_patterns()


def test_the_scan_finds_the_patterns() -> None:
    assert len(LITERALS) >= 40 and len(COMPILED) >= 30
    assert any(p.pattern == cmbuyer.schemas.UUID4_RE.pattern for p in COMPILED.values())


def _has_end_anchor(pattern: str | bytes) -> bool:
    """True when ``pattern`` has a ``$`` anchor (the only thing :func:`ecma_pattern` rewrites)."""
    text = pattern.decode("latin-1") if isinstance(pattern, bytes) else pattern
    return ecma_pattern(text) != text


def test_no_python_pattern_uses_dollar_as_its_end() -> None:
    offenders = [
        (where, pattern)
        for where, _, pattern, flags in LITERALS
        if _has_end_anchor(pattern) and not (flags & re.MULTILINE and pattern in NOT_WHOLE_TEXT)
    ]
    assert offenders == [], "use fullmatch (or \\Z) instead of a $ anchor"
    assert [where for where, call, _, _ in LITERALS if call == "match"] == [], "re.match reads only a prefix"


# from_regex filters its draws for some patterns (lookarounds, classes), so a run may discard many draws or take
# long under load: neither says anything about the pattern, so those two health checks are off
@pytest.mark.parametrize("name", sorted(COMPILED))
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=st.data())
def test_no_full_match_survives_a_trailing_newline(name: str, data: st.DataObject) -> None:
    compiled = COMPILED[name]
    if compiled.pattern in NOT_WHOLE_TEXT:
        return
    # every code point, lone surrogates included (some patterns exist to find exactly those)
    alphabet = None if isinstance(compiled.pattern, bytes) else st.characters(exclude_categories=())
    valid = data.draw(st.from_regex(compiled, fullmatch=True, alphabet=alphabet))
    newline: Any = b"\n" if isinstance(valid, bytes) else "\n"
    assert compiled.fullmatch(valid + newline) is None, (name, valid)
