"""The dump parser under fuzzing: whatever the phone sends — random bytes, random
XML, unpaired UTF-16 surrogates, deep nesting, huge attributes — ``parse_dump`` returns a parse or
raises the agent's own :class:`DumpError` (a reason-coded safe stop), never anything else.

The example count follows ``CMBUYER_SOAK_ITERATIONS`` (``make soak``), small by default."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cmbuyer.agent.errors import DumpError, DumpInvalid
from cmbuyer.agent.screens.dump import MAX_DEPTH, Dump, parse_dump
from cmbuyer.phonesim import hierarchy
from tests.soak import configured

pytestmark = pytest.mark.slow(seconds_per_iteration=1)  # examples grow with CMBUYER_SOAK_ITERATIONS
_SOAK = configured()  # tests/soak.py: CMBUYER_SOAK_ITERATIONS under `make soak`, else None
EXAMPLES = max(150, _SOAK * 4) if _SOAK else 150
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=_SOAK is None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_ATTRS = (
    "text",
    "content-desc",
    "class",
    "package",
    "resource-id",
    "clickable",
    "selected",
    "checked",
    "enabled",
    "focused",
    "bounds",
    "index",
)
# Lone surrogates, astral emoji, controls, XML specials and CJK: what a broken serializer emits.
_CHARS = st.one_of(
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    st.sampled_from(["🎉", "🧧", "\x00", "\x1f", "&", "<", ">", '"', "'", "]", "拼", "¥"]),
    st.characters(),
)
_TEXT = st.text(_CHARS, max_size=40)


def _ok_or_own_error(data: str | bytes) -> Dump | None:
    try:
        return parse_dump(data)
    except DumpError:
        return None


def _attr(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


@st.composite
def _node_xml(draw: st.DrawFn, depth: int = 0) -> str:
    attrs = draw(
        st.dictionaries(
            st.sampled_from(_ATTRS),
            _TEXT | st.sampled_from(["true", "false", "[0,0][1080,2400]", "[-5,3][2,1]", "com.xunmeng.pinduoduo"]),
            max_size=6,
        )
    )
    body = "".join(f' {k}="{_attr(v)}"' for k, v in attrs.items())
    children = draw(st.lists(_node_xml(depth + 1), max_size=3)) if depth < 4 else []
    tag = draw(st.sampled_from(["node", "node", "node", "other"]))
    return f"<{tag}{body}>{''.join(children)}</{tag}>" if children else f"<{tag}{body}/>"


@st.composite
def _hierarchy_xml(draw: st.DrawFn) -> str:
    head = draw(
        st.sampled_from(
            [
                "",
                "<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>",
                '<?xml version="1.0" encoding="utf-16"?>',
                '<?xml version="1.0" encoding="latin-1"?>',
            ]
        )
    )
    nodes = "".join(draw(st.lists(_node_xml(), max_size=4)))
    return f'{head}<hierarchy rotation="{_attr(draw(_TEXT))}">{nodes}</hierarchy>'


@FUZZ
@given(st.binary(max_size=512))
def test_random_bytes(data: bytes) -> None:
    _ok_or_own_error(data)


@FUZZ
@given(st.text(_CHARS, max_size=300))
def test_random_text(data: str) -> None:
    _ok_or_own_error(data)


@FUZZ
@given(_hierarchy_xml())
def test_random_hierarchies(xml: str) -> None:
    _ok_or_own_error(xml)
    _ok_or_own_error(xml.encode("utf-8", "surrogatepass"))  # the same text as (invalid) UTF-8 bytes


@FUZZ
@given(_hierarchy_xml(), st.integers(min_value=0, max_value=400))
def test_mutated_hierarchies(xml: str, cut: int) -> None:
    """Truncated, doubled and surrogate-split variants of generated dumps."""
    for variant in (xml[:cut], xml[cut:], xml + xml, hierarchy.break_emoji(xml + "🎉")):
        _ok_or_own_error(variant)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(st.integers(min_value=MAX_DEPTH - 2, max_value=MAX_DEPTH * 50))
def test_deep_nesting(depth: int) -> None:
    xml = '<hierarchy rotation="0">' + '<node bounds="[0,0][1,1]">' * depth + "</node>" * depth + "</hierarchy>"
    dump = _ok_or_own_error(xml)
    assert (dump is not None) == (depth <= MAX_DEPTH)


@pytest.mark.parametrize("size", [10_000, 1_000_000, 9_000_000])
def test_huge_attributes(size: int) -> None:
    """An attribute of up to 9 MB: parsed below the size cap, DUMP_INVALID above it."""
    big = "拼" * (size // 3)
    xml = (
        f'<hierarchy rotation="0"><node text="{big}" bounds="[0,0][1,1]"><node bounds="[0,0][1,1]"/></node></hierarchy>'
    )
    dump = _ok_or_own_error(xml)
    assert (dump is not None) == (len(xml) <= 8 * 1024 * 1024)
    _ok_or_own_error(xml.encode("utf-8"))


def test_unpaired_surrogate_is_dump_invalid() -> None:
    """The simulator's ``emoji_dump`` fault in ``broken`` mode (the same function) → DUMP_INVALID;
    on main this raised UnicodeEncodeError out of the parser and crashed the agent."""
    xml = hierarchy.break_emoji(
        '<hierarchy rotation="0"><node text="🎉限时秒杀" bounds="[0,0][9,9]">'
        '<node bounds="[0,0][1,1]"/></node></hierarchy>'
    )
    with pytest.raises(DumpInvalid) as info:
        parse_dump(xml)
    assert info.value.reason_code == "DUMP_INVALID"


@pytest.mark.parametrize(
    "xml", [hierarchy.single_node_dump(), '<hierarchy rotation="0"><node package="com.xunmeng.pinduoduo"/></hierarchy>']
)
def test_one_node_dump_is_dump_invalid_not_wrong_package(xml: str) -> None:
    with pytest.raises(DumpInvalid) as info:
        parse_dump(xml).require_app()
    assert info.value.reason_code == "DUMP_INVALID"
