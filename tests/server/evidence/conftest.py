"""Fixtures of the evidence tests: ``gc``, the real ``cmbuyer-server evidence gc`` entry point run in-process."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cmbuyer.server.cli import main as cli_main
from cmbuyer.server.config import Settings


class EvidenceGc:
    """``gc(*extra)``: ``cmbuyer-server evidence gc --json *extra`` on the test data dir; the exit code, the
    JSON report (empty unless the code is 0) and stderr. ``gc.ok(*extra)``: the report of a run that exits 0."""

    def __init__(self, settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
        self.settings, self.capsys = settings, capsys

    def __call__(self, *extra: str) -> tuple[int, dict[str, Any], str]:
        self.capsys.readouterr()
        code = cli_main(["--data-dir", str(self.settings.data_dir), "evidence", "gc", "--json", *extra])
        out = self.capsys.readouterr()
        return code, (json.loads(out.out) if code == 0 else {}), out.err

    def ok(self, *extra: str) -> dict[str, Any]:
        code, report, err = self(*extra)
        assert code == 0, err
        return report


@pytest.fixture
def gc(settings: Settings, capsys: pytest.CaptureFixture[str]) -> EvidenceGc:
    return EvidenceGc(settings, capsys)
