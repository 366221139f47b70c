"""Every ``--help`` of a command line: each subcommand and each option must say what it is for,
in Chinese like the rest of what an operator reads.

:func:`undocumented` walks an ``argparse`` tree — the parser, every subcommand, every option and argument —
and names what has no help text; :func:`not_chinese` names every help text (and description) without Chinese;
:func:`help_paths` lists the argv of every ``--help`` so a test can run them all through the real ``main``."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator

import pytest

from cmbuyer.schemas.clihelp import USAGE_PREFIX
from tests.cli_text import has_chinese


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser, str | None]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, sub, helps.get(name)


def walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """``(argv path, parser)`` for the parser and every subcommand below it."""
    yield path, parser
    for name, sub, _ in _subparsers(parser):
        yield from walk(sub, (*path, name))


def undocumented(parser: argparse.ArgumentParser) -> list[str]:
    """``"<command path>: <option>"`` for every subcommand or option without help text (empty = all good)."""
    missing: list[str] = []
    for path, p in walk(parser):
        where = " ".join(path) or "(top)"
        for name, _, help_text in _subparsers(p):
            if not help_text:
                missing.append(f"{where}: subcommand {name}")
        for action in p._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{where}: {'/'.join(action.option_strings) or action.dest}")
    return sorted(set(missing))


def not_chinese(parser: argparse.ArgumentParser) -> list[str]:
    """``"<command path>: <option>: <help>"`` for every description, subcommand or option help (``-h`` and
    ``--version`` included) without a Chinese character (empty = one language)."""
    found: list[str] = []
    for path, p in walk(parser):
        where = " ".join(path) or "(top)"
        if p.description and not has_chinese(p.description):
            found.append(f"{where}: description: {p.description}")
        for name, _, help_text in _subparsers(p):
            if help_text and not has_chinese(help_text):
                found.append(f"{where}: subcommand {name}: {help_text}")
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
                continue
            if action.help and not has_chinese(action.help):
                found.append(f"{where}: {'/'.join(action.option_strings) or action.dest}: {action.help}")
    return sorted(set(found))


def help_paths(parser: argparse.ArgumentParser) -> list[list[str]]:
    """The argv of ``--help`` for the parser and every subcommand."""
    return [[*path, "--help"] for path, _ in walk(parser)]


def check_every_help(
    parser: argparse.ArgumentParser, main: Callable[[list[str]], object], capsys: pytest.CaptureFixture[str]
) -> None:
    """The test of one CLI: nothing :func:`undocumented` or :func:`not_chinese`, and every ``--help`` of
    :func:`help_paths` exits 0 through ``main`` with the parser's (Chinese) usage line and no argparse English
    heading."""
    assert undocumented(parser) == []
    assert not_chinese(parser) == []
    for argv in help_paths(parser):
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 0, argv
        out = capsys.readouterr().out
        assert f"{USAGE_PREFIX}{parser.prog}" in out, argv
        for english in ("usage:", "options:", "positional arguments:", "show this help message"):
            assert english not in out, (argv, english)
