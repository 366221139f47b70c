"""Chinese for the parts of ``--help`` that ``argparse`` writes itself (issue 32 §9: one language for the CLIs).

``argparse`` words its own ``-h`` line, the group titles and the ``usage:`` prefix in English. Both command lines
(``cmbuyer-server``, ``cmbuyer-agent``) call :func:`chinese_help` on their finished parser tree so that every line of
every ``--help`` is Chinese like their own help texts. argparse's error lines (``the following arguments are
required``) stay as argparse writes them: they come from the standard library, exit 2, and name the option.
"""

from __future__ import annotations

import argparse
from typing import Any

HELP_LINE = "显示此帮助并退出"
USAGE_PREFIX = "用法："


class _Formatter(argparse.HelpFormatter):
    """The help formatter with a Chinese ``usage`` prefix."""

    def add_usage(self, usage: Any, actions: Any, groups: Any, prefix: str | None = None) -> None:
        super().add_usage(usage, actions, groups, USAGE_PREFIX if prefix is None else prefix)


def chinese_help(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` and every subcommand below it the Chinese ``-h`` line, group titles and usage prefix."""
    parser.formatter_class = _Formatter
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
