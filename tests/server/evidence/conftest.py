"""Fixtures of the evidence tests: ``gc``, the real ``cmbuyer-server evidence gc`` entry point run in-process, and
``upload_referenced``, an upload over HTTP whose row refers to the stored file."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.server.cli import main as cli_main
from cmbuyer.server.config import Settings
from cmbuyer.server.evidence import files
from tests.server.submissions.helpers import Claim, upload_png


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


Uploader = Callable[[bytes], Awaitable[Path]]


@pytest.fixture
def upload_referenced(server_client: Any, claimed: Claim, settings: Settings) -> Uploader:
    """``await upload_referenced(data)``: ``data`` uploaded over HTTP as evidence of the claimed attempt (201
    asserted); the stored file's path, which the new evidence row refers to."""

    async def upload(data: bytes) -> Path:
        status, raw = await upload_png(server_client, claimed, data)
        assert status == 201, raw
        return files.path_for(settings.evidence_dir, hashlib.sha256(data).hexdigest())

    return upload
