"""canonical_json (orjson with a json fallback) writes exactly the reference text of docs/architecture.md "Wire
schemas".

Stored claim bodies are replayed byte for byte and request hashes compare canonical texts, so a change of
encoder must not change a single byte for any value our wire data can hold (dict/list/str/int/bool/None —
the strict reader refuses floats).
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cmbuyer.schemas.canonical import canonical_json
from cmbuyer.server.tx.common import payload_hash


def reference(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


# every code point, control characters, U+2028/2029, DEL and astral planes included
any_text = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=("Cs",)))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | any_text,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(any_text, children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_same_text_as_the_reference_encoder(value: Any) -> None:
    assert canonical_json(value) == reference(value)


@pytest.mark.parametrize(
    "value",
    [
        {"big": 2**64, "neg": -(2**63) - 1, "edge": [2**63 - 1, -(2**63)]},  # beyond 64 bits: the fallback
        {"lone": "\ud800x"},  # a lone surrogate: orjson refuses, the reference keeps it
        {1: "int key", 2: {3: None}},  # non-str keys: the reference turns them into strings
        {"ctl": '\x00\x08\x09\x0a\x0c\x0d\x1f\x7f\u2028\u2029"\\/'},
        {"z": 1, "a": 2, "é": 3, "中": 4, "\U0001f600": 5, "A": 6},  # code-point key order
    ],
)
def test_edge_values_match(value: Any) -> None:
    assert canonical_json(value) == reference(value)


@dataclass
class _Row:
    x: int


@pytest.mark.parametrize("value", [{"at": datetime.datetime(2026, 1, 1)}, {"row": _Row(1)}, {"s": {1, 2}}])
def test_values_json_cannot_hold_still_raise(value: Any) -> None:
    with pytest.raises(TypeError):
        canonical_json(value)


def test_mixed_key_types_fail_like_the_reference() -> None:
    with pytest.raises(TypeError):
        reference({1: "x", "a": "y"})
    with pytest.raises(TypeError):
        canonical_json({1: "x", "a": "y"})


def test_payload_hash_is_stable() -> None:
    # A fixed request hashed by the first release (json.dumps): stored idempotency records compare this
    # hash, so it may never change.
    payload = {"session_id": "7c0d3a8e-0f5e-4b7a-9c1d-2e3f4a5b6c7d", "claim_request_id": "请求-1"}
    assert payload_hash(payload) == "d3ea2afb54abc4df60d0eb8eb6741477b7cf3a74541407eddba9dea6820f1825"
