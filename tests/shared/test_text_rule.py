"""The shared rule for text a person reads or a gate compares (cmbuyer.schemas.text.text_problem
item 8), and its CLI paths: ``task add`` (title, colour, size) and ``device add`` (name) refuse bidi and
invisible characters with a Chinese message naming the code point, exit 1, and write nothing. The admin
form and JSON paths: tests/server/admin/test_hidden_text.py."""

from __future__ import annotations

import sqlite3
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cmbuyer.schemas.text import BIDI_CONTROLS, text_problem
from tests.server.test_cli import URL, cli, cli_json

REFUSED = {
    "rlo": "价格\u202e88.21",
    "lre": "\u202aa",
    "rle": "\u202ba",
    "pdf": "a\u202c",
    "lro": "\u202da",
    "lri": "\u2066a\u2069",
    "rli": "\u2067a",
    "fsi": "\u2068a",
    "lrm": "a\u200e",
    "rlm": "a\u200f",
    "alm": "a\u061c",
    "zwsp": "黑\u200b色",
    "zwnj": "黑\u200c色",
    "zwj": "黑\u200d色",
    "word_joiner": "a\u2060b",
    "bom": "\ufeffM",
    "soft_hyphen": "a\u00adb",
    "tag_char": "a\U000e0041",
    "nul": "a\x00",
    "esc": "\x1b[31m",
    "del": "a\x7f",
    "c1": "a\x85",
    "tab": "a\tb",
    "newline": "a\nb",
    "cr": "a\rb",
    "line_sep": "a\u2028b",
    "para_sep": "a\u2029b",
    "lone_surrogate": "a\ud800",
    "low_surrogate": "\udc00",
}
ACCEPTED = [
    "纯棉短袖",
    "黑色CHA(纯棉)",
    "M(建议100-115)",
    "【限定】黑色",
    "🎉 T恤",
    "👍🏽",
    "Ａ　全角",
    "a b",
    "«新款»",
    "é",
    "e\u0301",
    "ﾊﾝｶｸ",
    "🇨🇳",
]


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused(name: str) -> None:
    value = REFUSED[name]
    problem = text_problem(value)
    assert problem is not None
    bad = next(ch for ch in value if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp"))
    assert f"U+{ord(bad):04X}" in problem and bad not in problem


@pytest.mark.parametrize("value", ACCEPTED)
def test_accepted(value: str) -> None:
    assert text_problem(value) is None


def test_multiline_allows_line_breaks_and_tabs_only() -> None:
    assert text_problem("一行\r\n二行\t", multiline=True) is None
    assert text_problem("a\u202eb\n", multiline=True) is not None
    assert text_problem("a\x00\n", multiline=True) is not None


@pytest.mark.serial  # Hypothesis' default 200 ms deadline per example
@given(st.text(max_size=40))
def test_accepted_text_has_no_control_or_format_character(value: str) -> None:
    if text_problem(value) is None:
        assert not any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") for ch in value)
        assert not BIDI_CONTROLS.intersection(value)


def _tables(data_dir: Path) -> tuple[int, int, int]:
    conn = sqlite3.connect(data_dir / "cmbuyer.sqlite3")
    try:
        return tuple(
            conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # type: ignore[return-value]
            for t in ("tasks", "devices", "audit_log")
        )
    finally:
        conn.close()


@pytest.fixture
def ddir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    cli_json(d, "init")
    assert (d / "cmbuyer.sqlite3").exists()
    return d


def test_cli_refuses_hidden_characters_in_every_text(ddir: Path) -> None:
    base = {"--title": "纯棉短袖", "--color": "黑色", "--size": "M"}
    cases = [
        ("--title", "\u202e", "标题"),
        ("--color", "\u200b", "规格"),
        ("--size", "\u2066", "规格"),
        ("--title", "\ufeff", "标题"),
    ]
    before = _tables(ddir)
    for flag, ch, what in cases:
        values = {**base, flag: f"纯棉{ch}短袖"}
        args = [x for pair in values.items() for x in pair]
        result = cli(ddir, "task", "add", "--url", URL, *args, "--quantity", "1", "--max-total-price", "9.90")
        assert result.returncode == 1, (flag, result.stderr)
        assert f"U+{ord(ch):04X}" in result.stderr and what in result.stderr
    for ch in ("\u202e", "\u200d"):
        result = cli(ddir, "device", "add", "--name", f"phone{ch}1")
        assert result.returncode == 1 and "设备名称" in result.stderr and f"U+{ord(ch):04X}" in result.stderr
    assert _tables(ddir) == before
    assert cli_json(ddir, "device", "add", "--name", "手机 1")["device_id"]


@pytest.mark.parametrize("value", REFUSED.values(), ids=REFUSED.keys())
def test_visible_writes_every_refused_character_as_an_escape(value: str) -> None:
    """Text a person reads in a terminal or log (dry-run verdicts, agent progress) shows a
    bidi or invisible character as ``\\uXXXX`` instead of obeying it."""
    from cmbuyer.schemas.text import visible

    shown = visible(value)
    assert text_problem(shown) is None and "\\u" in shown
    assert visible("黑色 M ¥29.90") == "黑色 M ¥29.90"


@pytest.mark.serial  # Hypothesis' default 200 ms deadline per example
@given(st.text())
def test_visible_output_always_passes_the_rule(value: str) -> None:
    from cmbuyer.schemas.text import visible

    assert text_problem(visible(value)) is None
