"""Every ``cmbuyer-agent … --help`` runs and documents each subcommand and option (issue 32 §9)."""

from __future__ import annotations

import pytest

from cmbuyer.agent.cli import build_parser, main
from tests.cli_help import check_every_help


def test_every_command_and_option_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    check_every_help(build_parser(), main, capsys)
