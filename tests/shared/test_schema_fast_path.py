"""The accept-only fast path of ``cmbuyer.schemas.validate`` never accepts what jsonschema refuses.

The fast path exists for throughput (docs/performance.md); correctness rests on one implication: for
every schema it compiles, ``fast(x)`` ⇒ jsonschema accepts ``x``. Rejections always go through
jsonschema, so error messages and paths are untouched. Hypothesis drives near-valid and hostile
instances (missing/extra keys, bool/float/None, str subclasses, boundary lengths and numbers).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cmbuyer import schemas
from cmbuyer.schemas import SchemaError, validate
from tests.device_bodies import fence_request

FAST = [name for name in schemas.schema_names() if schemas._fast(name) is not None]
DEVICE_HOT_PATH = ["claim_next.request", "lease_renew.request"]


class Str(str):
    pass


def test_the_hot_device_schemas_have_a_fast_path() -> None:
    assert set(DEVICE_HOT_PATH) <= set(FAST)
    assert schemas._fast("heartbeat.request") is None  # oneOf / pattern: jsonschema only


uuids = st.builds(lambda: str(uuid.uuid4()))
uuid_like = st.one_of(
    uuids,
    uuids.map(str.upper),
    uuids.map(lambda u: u[:14] + "1" + u[15:]),
    uuids.map(lambda u: u + "\n"),
    uuids.map(lambda u: u[:35]),
)
hex64 = st.text("0123456789abcdef", min_size=63, max_size=65)
times = st.sampled_from(
    [
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:00:00.000000Z",
        "2026-02-30T00:00:00Z",
        "2026-01-01T24:00:00Z",
        "2026-01-01T00:00:00+00:00",
        "2026-01-01t00:00:00z",
        "2026-01-01T00:00:00.000Z",
        "２026-01-01T00:00:00Z",
    ]
)
money = st.sampled_from(["0.00", "0.01", "30.00", "012.00", "1.5", "999999999.99", "1000000000.00", "-1.00"])
numbers = st.one_of(
    st.integers(-3, 3),
    st.integers(999_990, 1_000_010),
    st.integers(2_147_483_640, 2_147_483_660),
    st.integers(),
    st.sampled_from([True, False, 1.0, 2.5, float("nan")]),
)
junk = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
texts = st.one_of(
    st.text(max_size=3),
    st.text(min_size=60, max_size=70),
    st.text(min_size=195, max_size=210),
    st.text(min_size=508, max_size=516),
)
strings = st.one_of(uuid_like, hex64, times, money, texts)
values = st.one_of(strings, strings.map(Str), numbers, junk)


def _valid_value(name: str, key: str) -> st.SearchStrategy[Any]:
    """Values inside the field's own definition (so that complete, valid objects are common)."""
    d = schemas._resolve_def(schemas._load(name)["properties"][key]) or {}
    if d.get("type") == "integer":
        return st.integers(d.get("minimum"), d.get("maximum"))
    fmt = d.get("format")
    if fmt == "uuid4":
        return uuids
    if fmt == "hex64":
        return st.text("0123456789abcdef", min_size=64, max_size=64)
    if fmt == "money":
        return st.sampled_from(["0.01", "30.00", "999999999.99"])
    if fmt == "utc-time":
        return st.sampled_from(["2026-01-01T00:00:00Z", "2026-12-31T23:59:59.999999Z"])
    return st.text(min_size=d.get("minLength", 0), max_size=d.get("maxLength", 8) or 8)


@st.composite
def instances(draw: st.DrawFn, name: str) -> Any:
    """Valid objects, valid objects with one thing changed, and random mixtures."""
    schema = schemas._load(name)
    props = list(schema["properties"])
    required = list(schema.get("required", []))
    optional = [k for k in props if k not in required]
    keys = required + draw(st.lists(st.sampled_from(optional), unique=True)) if optional else list(required)
    obj: dict[Any, Any] = {key: draw(_valid_value(name, key)) for key in keys}
    mode = draw(st.sampled_from(["valid", "change", "change", "random"]))
    if mode == "change":
        key = draw(st.sampled_from([*props, "extra"]))
        action = draw(st.sampled_from(["value", "value", "drop", "subclass-key"]))
        if action == "drop":
            obj.pop(key, None)
        elif action == "subclass-key" and key in obj:
            obj[Str(key)] = obj.pop(key)
        else:
            obj[key] = draw(values)
    elif mode == "random":
        obj = {
            key: draw(st.one_of(values, _valid_value(name, key)))
            for key in draw(st.lists(st.sampled_from(props), unique=True))
        }
        if draw(st.booleans()):
            obj[draw(st.sampled_from(["extra", 1, Str(props[0])]))] = draw(values)
    return draw(st.sampled_from([obj] * 6 + [[obj], None, Str("x")]))


@pytest.mark.parametrize("name", FAST)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_fast_accept_implies_jsonschema_accepts(name: str, data: st.DataObject) -> None:
    instance = data.draw(instances(name))
    fast = schemas._fast(name)
    assert fast is not None
    slow_ok = not list(schemas._validator(name).iter_errors(instance))
    if fast(instance):
        assert slow_ok, instance
    # validate() as a whole still decides exactly as jsonschema does
    try:
        validate(name, instance)
    except SchemaError:
        assert not slow_ok
    else:
        assert slow_ok


def test_fast_path_accepts_real_requests() -> None:
    claim = {"session_id": str(uuid.uuid4()), "claim_request_id": str(uuid.uuid4())}
    renew = {
        "renew_request_id": str(uuid.uuid4()),
        "session_id": str(uuid.uuid4()),
        "attempt_id": str(uuid.uuid4()),
        "claim_generation": 1,
        "claim_token": "ab" * 32,
        "expected_lease_expires_at": "2026-01-01T00:00:00.000001Z",
    }
    claim_fast, renew_fast = schemas._fast("claim_next.request"), schemas._fast("lease_renew.request")
    assert claim_fast is not None and renew_fast is not None
    assert claim_fast(claim) and renew_fast(renew)
    # and leaves the unusual-but-valid and the invalid to jsonschema
    assert not renew_fast({**renew, "claim_generation": 1.0})
    validate("lease_renew.request", {**renew, "claim_generation": 1.0})  # jsonschema: 1.0 is an integer
    for bad in (
        {**renew, "claim_generation": True},
        {**renew, "claim_generation": 0},
        {**renew, "x": 1},
        {**claim, "session_id": claim["session_id"].upper()},
        {"session_id": claim["session_id"]},
    ):
        name = "lease_renew.request" if "attempt_id" in bad else "claim_next.request"
        assert not schemas._fast(name)(bad)  # type: ignore[misc]
        with pytest.raises(SchemaError):
            validate(name, bad)


def test_fast_path_takes_nullable_fields() -> None:
    # a sku_text or null (the old agents' selected_size): both forms stay on the fast path. The fence
    # body itself now names its options in one of two forms (oneOf), so it takes the full path.
    nullable = {
        "type": "object",
        "additionalProperties": False,
        "required": ["selected_size"],
        "properties": {"selected_size": {"$ref": "common.json#/$defs/sku_text_or_null"}},
    }
    fast = schemas._compile_fast(nullable)
    assert fast is not None
    assert fast({"selected_size": None}) and fast({"selected_size": "M"})
    for bad in ("", "x" * 65, Str("M"), 0, False):
        assert not fast({"selected_size": bad}), bad
    fence = fence_request(expected_task_version=3, claim_token="ab" * 32, selected_size=None)
    validate("submission_fence.request", fence)
    with pytest.raises(SchemaError):
        validate("submission_fence.request", {**fence, "selected_size": ""})
