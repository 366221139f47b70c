"""Chinese for the parts of ``--help`` that ``argparse`` writes itself (one language for the CLIs).

``argparse`` words its own ``-h`` line, the group titles and the ``usage:`` prefix in English. Both command lines
(``cmbuyer-server``, ``cmbuyer-agent``) call :func:`chinese_help` on their finished parser tree so that every line of
every ``--help`` is Chinese like their own help texts, and argparse's own error lines (``the following arguments are
required: --url``, ``invalid choice``, ``unrecognized arguments``, ``invalid int value`` …) are printed in Chinese by
:func:`chinese_error` — option names, values and the exit code 2 stay as argparse gives them. argparse words those
lines through gettext templates (:data:`ERROR_TEMPLATES` maps each to its Chinese); a line no template matches (a
newer Python's new wording) is printed as it is rather than guessed at.
"""

from __future__ import annotations

import argparse
import re
import sys
import unicodedata
from typing import Any, NoReturn

HELP_LINE = "显示此帮助并退出"
USAGE_PREFIX = "用法："


# argparse's error templates (the msgids its gettext ``_`` is called with, Python 3.11–3.13) → Chinese. The same
# ``%(name)s``/``%s`` fields: a formatted English line is matched against the template and its pieces re-used.
ERROR_TEMPLATES: tuple[tuple[str, str], ...] = (
    ("argument %(argument_name)s: %(message)s", "参数 %(argument_name)s：%(message)s"),
    ("the following arguments are required: %s", "缺少必需的参数：%s"),
    ("unrecognized arguments: %s", "无法识别的参数：%s"),
    ("invalid choice: %(value)r (choose from %(choices)s)", "无效的选择：%(value)r（可选：%(choices)s）"),
    ("invalid %(type)s value: %(value)r", "无效的%(type)s值：%(value)r"),
    ("expected one argument", "需要一个值"),
    ("expected at most one argument", "最多一个值"),
    ("expected at least one argument", "至少需要一个值"),
    ("not allowed with argument %s", "不能与参数 %s 同时使用"),
    ("one of the arguments %s is required", "参数 %s 必须给出其中之一"),
    ("ambiguous option: %(option)s could match %(matches)s", "有歧义的选项：%(option)s 可以是 %(matches)s"),
    ("ignored explicit argument %r", "忽略了多余的值 %r"),
    ("unexpected option string: %s", "意外的选项：%s"),
)
ERROR_PREFIX = "错误"
# the ``type`` of an ``invalid %(type)s value`` line, as a person reads it (another type keeps its name)
TYPE_NAMES = {"int": "整数", "float": "数字"}

_FIELD = re.compile(r"%(?:\((\w+)\))?[sr]")


def _pattern(template: str) -> re.Pattern[str]:
    """The template as a regex: each ``%(name)s`` / ``%s`` field a group (``f0``, ``f1`` … when unnamed)."""
    out, pos, n = [], 0, 0
    for m in _FIELD.finditer(template):
        out.append(re.escape(template[pos : m.start()]))
        out.append(f"(?P<{m.group(1) or f'f{n}'}>.+?)")
        n += 1
        pos = m.end()
    out.append(re.escape(template[pos:]))
    return re.compile("".join(out), re.DOTALL)


_PATTERNS = [(_pattern(en), zh) for en, zh in ERROR_TEMPLATES]


def translate_error(message: str) -> str:
    """argparse's error ``message`` in Chinese (an ``argument X: …`` line's inner message too); unchanged when no
    template matches."""
    for pattern, zh in _PATTERNS:
        m = pattern.fullmatch(message)
        if m is None:
            continue
        fields = m.groupdict()
        if "message" in fields:
            fields["message"] = translate_error(fields["message"])
        if "type" in fields:
            fields["type"] = TYPE_NAMES.get(fields["type"], fields["type"])
        text, n = [], 0
        pos = 0
        for f in _FIELD.finditer(zh):  # fill the Chinese template with the English line's own pieces, as they are
            text.append(zh[pos : f.start()])
            text.append(fields[f.group(1) or f"f{n}"])
            n += 1
            pos = f.end()
        text.append(zh[pos:])
        return "".join(text)
    return message


def chinese_error(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    """What ``parser.error`` does, in Chinese: the usage line, then ``PROG：错误：…`` on stderr, exit 2."""
    parser.print_usage(sys.stderr)
    parser.exit(2, f"{parser.prog}：{ERROR_PREFIX}：{translate_error(message)}\n")


# one Chinese character (or full-width mark) is a token of its own; a run of other non-space characters (an option,
# a path, an English word) is one token that is never split; spaces are where nothing is lost by breaking
_WIDE = "\u2e80-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef"
_TOKENS = re.compile(f"[{_WIDE}]|[^\\s{_WIDE}]+|\\s+")
# marks a line must not start with (they close the phrase before them: "off：" stays together)
_NO_LINE_START = frozenset("，。；：、）》」』！？…,.;:!?)]}")
_NO_LINE_END = frozenset("（《「『")  # and marks a line must not end with: they open the phrase after them


def display_width(text: str) -> int:
    """Terminal columns of ``text``: two for a Chinese character or full-width mark, one for the rest."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def wrap_cjk(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` terminal columns (a token wider than that gets a line of its own):
    broken between Chinese characters or at spaces, never inside an option, path or word, and never so that a line
    starts with closing punctuation (``：``, ``，``, ``）`` …) or ends with an opening bracket (``（``)."""
    lines: list[str] = []
    line, used = "", 0
    for token in _TOKENS.findall(text):
        if token.isspace():
            if line:
                line, used = line + " ", used + 1
            continue
        wide = display_width(token)
        if line.strip() and used + wide > width and token not in _NO_LINE_START:
            carried = line[-1] if line[-1] in _NO_LINE_END and len(line.strip()) > 1 else ""
            lines.append(line[: len(line) - len(carried)].rstrip())
            line, used = carried, display_width(carried)
        line, used = line + token, used + wide
    if line.strip():
        lines.append(line.rstrip())
    return lines


class _Formatter(argparse.HelpFormatter):
    """The help formatter with a Chinese ``usage`` prefix, full-width colons after the group titles, and help
    lines wrapped by display width (:func:`wrap_cjk`; argparse counts a Chinese character as one column and only
    breaks at spaces)."""

    def add_usage(self, usage: Any, actions: Any, groups: Any, prefix: str | None = None) -> None:
        super().add_usage(usage, actions, groups, USAGE_PREFIX if prefix is None else prefix)

    def _split_lines(self, text: str, width: int) -> list[str]:
        return wrap_cjk(" ".join(text.split()), width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(indent + line for line in wrap_cjk(" ".join(text.split()), width - len(indent)))

    def format_help(self) -> str:
        # a group title is a line of its own ending in argparse's ASCII ":" — "选项:" → "选项："
        return _HEADING.sub(lambda m: f"{m.group(1)}：", super().format_help())


_HEADING = re.compile(f"^([^\\s:][^\\n:]*[{_WIDE}]):$", re.MULTILINE)


def chinese_help(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` and every subcommand below it the Chinese ``-h`` line, group titles, usage prefix and
    error lines (:func:`chinese_error`)."""
    parser.formatter_class = _Formatter
    parser.error = lambda message: chinese_error(parser, message)  # type: ignore[method-assign]
    parser._positionals.title = "位置参数"
    parser._optionals.title = "选项"
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            action.help = HELP_LINE
        elif isinstance(action, argparse._VersionAction):
            action.help = "显示版本号并退出"
        elif isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                chinese_help(sub)
