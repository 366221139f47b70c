"""The language checks of ``tests/cli_text.py`` and ``tests/cli_help.py`` catch what they are for:
run on a module and a parser written here, they name the English lines and help texts and pass the Chinese ones."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from tests.cli_help import not_chinese
from tests.cli_text import english_messages

MODULE = """
import sys

def run(progress, path, code):
    progress(f"cannot start: {path}")                       # English: caught
    progress(f"无法启动：{path}")                            # Chinese: fine
    print(f"{path}：请检查 --credentials-file 和 CMBUYER_SERVER_URL")  # option and setting names: fine
    print("INTERNAL_ERROR", file=sys.stderr)                 # a code: fine
    raise ValueError("after a person checked it: 释放 on the page")  # English with one Chinese word: caught
    verb = "would remove" if code else "已删除"               # a wording kept for later: caught
    check("selector pack", True, "已验证")                    # an allowed check name: fine
    data = {"device_id": code}                                # a JSON key: fine
    print(data.get("state_reason"))                           # a key: fine
"""


def test_english_messages_names_english_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "mod.py"
    path.write_text(MODULE, encoding="utf-8")
    found = [line.split(": ", 1)[1] for line in english_messages(path, codes={"selector pack"})]
    assert found == ["cannot start: {}", "after a person checked it: 释放 on the page", "would remove"]
    assert "selector pack" in "\n".join(english_messages(path))  # not allowed without codes=


def test_not_chinese_names_english_help() -> None:
    parser = argparse.ArgumentParser(prog="x", description="中文说明")
    sub = parser.add_subparsers(dest="cmd")
    one = sub.add_parser("one", help="做一件事")
    one.add_argument("--fine", help="数据目录（默认 ./var）")
    one.add_argument("--bad", help="data directory")
    sub.add_parser("two", help="do the other thing")
    assert not_chinese(parser) == [
        "(top): -h/--help: show this help message and exit",
        "(top): subcommand two: do the other thing",
        "one: --bad: data directory",
        "one: -h/--help: show this help message and exit",
        "two: -h/--help: show this help message and exit",
    ]
    from cmbuyer.schemas.clihelp import chinese_help

    chinese_help(parser)  # argparse's own -h lines become Chinese; the options' own texts do not
    assert not_chinese(parser) == ["(top): subcommand two: do the other thing", "one: --bad: data directory"]


def _usage_error(main: Any, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The last stderr line of a command line argparse refuses (exit 2)."""
    with pytest.raises(SystemExit) as ended:
        main(argv)
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("用法：")  # the usage line first, as argparse prints it
    return err.strip().splitlines()[-1]


def test_argparse_errors_are_chinese_in_both_command_lines(capsys: pytest.CaptureFixture[str]) -> None:
    """Argparse's own error lines (required, invalid choice, unrecognized, invalid int) read in
    Chinese in both CLIs; option names and values stay as typed, exit code 2 as before."""
    from cmbuyer.agent.cli import main as agent
    from cmbuyer.server.cli import main as server

    assert _usage_error(server, ["task", "add", "--title", "t"], capsys) == (
        "cmbuyer-server task add：错误：缺少必需的参数：--url, --quantity, --max-total-price"
    )
    assert _usage_error(server, ["task", "list", "--state", "NOPE"], capsys).startswith(
        "cmbuyer-server task list：错误：参数 --state：无效的选择：'NOPE'（可选：'DRAFT', "
    )
    assert _usage_error(agent, ["doctor", "--device", "sim-1", "--bogus"], capsys) == (
        "cmbuyer-agent：错误：无法识别的参数：--bogus"
    )
    assert _usage_error(
        agent, ["dry-run", "--device", "s", "--goods-id", "1", "--quantity", "two", "--max-total", "9"], capsys
    ) == ("cmbuyer-agent dry-run：错误：参数 --quantity：无效的整数值：'two'")
    assert _usage_error(agent, ["nope"], capsys).startswith(
        "cmbuyer-agent：错误：参数 command：无效的选择：'nope'（可选："
    )


def test_an_argparse_line_no_template_knows_is_kept_as_it_is() -> None:
    from cmbuyer.schemas.clihelp import translate_error

    assert translate_error("something new in Python 3.14") == "something new in Python 3.14"
    assert translate_error("argument --x: expected one argument") == "参数 --x：需要一个值"


def test_help_wraps_by_display_width_and_keeps_phrases_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """Help lines are wrapped by terminal columns (a Chinese character takes two), never inside an
    option or path, no line starts with ``：``/``，`` or ends with ``（``; group titles end in a full-width colon."""
    from cmbuyer.agent.cli import build_parser
    from cmbuyer.schemas.clihelp import display_width, wrap_cjk

    assert wrap_cjk("on：按全局规则监督；off：此设备免除", 10) == ["on：按全局", "规则监督；", "off：此设", "备免除"]
    assert wrap_cjk("凭据文件（默认 $CMBUYER_DEVICE_ID）", 10) == ["凭据文件", "（默认", "$CMBUYER_DEVICE_ID）"]

    monkeypatch.setenv("COLUMNS", "80")
    run = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
    text = run.format_help()
    assert "\n选项：\n" in text and "选项:" not in text
    body = [line for line in text.splitlines() if line.startswith(" " * 24)]
    assert len(body) > 5 and all(display_width(line) <= 80 for line in body), body
    assert not any(line.strip().startswith(("：", "，", "）")) or line.endswith("（") for line in body), body
    assert any("$CMBUYER_DEVICE_ID" in line.split() for line in body)  # a setting name is never split
