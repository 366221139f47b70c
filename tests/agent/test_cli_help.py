"""Every ``cmbuyer-agent … --help`` runs and documents each subcommand and option (issue 32 §9)."""

from __future__ import annotations

import pytest

from cmbuyer.agent.cli import build_parser, main
from tests.cli_help import help_paths, undocumented


def test_every_command_and_option_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    assert undocumented(parser) == []
    for argv in help_paths(parser):
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 0, argv
        assert "usage: cmbuyer-agent" in capsys.readouterr().out
