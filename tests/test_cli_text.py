"""The language checks of ``tests/cli_text.py`` and ``tests/cli_help.py`` catch what they are for (issue 32 §9):
run on a module and a parser written here, they name the English lines and help texts and pass the Chinese ones."""

from __future__ import annotations

import argparse
from pathlib import Path

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
