"""Every ``cmbuyer-agent … --help`` runs and documents each subcommand and option."""

from __future__ import annotations

import pytest

from cmbuyer.agent.cli import build_parser, main
from tests.cli_help import check_every_help


def test_every_command_and_option_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    check_every_help(build_parser(), main, capsys)


def test_operator_facing_text_is_chinese() -> None:
    """What ``cmbuyer-agent`` prints — its own lines, doctor's details, ``run``'s console lines
    and hold reasons, the 401 line — is Chinese (codes, option names and paths as they are); doctor's check
    names stay as ``--json`` names them and are printed beside their Chinese label."""
    from pathlib import Path

    from cmbuyer.agent import cli, errors, holds, instance, recovery, runner
    from tests.cli_text import english_messages, has_chinese

    for module in (cli, runner, holds, instance):
        assert english_messages(Path(str(module.__file__)), codes=cli.DOCTOR_CHECKS) == []
    # recovery's notes and hold reasons are read by people; the journal's internal claim-state notes and the
    # developer log line stay as they are
    internal = (
        "result refused: {}",
        "{}; fail refused: {}",
        "fail delivered but not journaled; recovery will re-send it (same key)",
    )
    assert english_messages(Path(str(recovery.__file__)), codes=internal) == []
    assert has_chinese(errors.Unauthorized.HINT) and "401" in errors.Unauthorized.HINT
    assert "--credentials-file" in errors.Unauthorized.HINT
    assert all(has_chinese(label) for label in cli.DOCTOR_CHECKS.values())
