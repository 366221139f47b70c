"""End-to-end fixtures: the real processes (server, phone simulator, agents) through demo.stack."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from demo.stack import Stack, free_port

SCENARIO = Path(__file__).resolve().parents[2] / "demo" / "scenario.yaml"


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    """A fresh stack on free ports; every child process is stopped at the end of the test."""
    s = Stack(
        tmp_path / "data",
        server_port=free_port(),
        env={"CMBUYER_CLAIM_LEASE_TTL": "20", "CMBUYER_SWEEP_INTERVAL": "1", "CMBUYER_SUPERVISED_ORDERS": "0"},
    )
    s.init()
    try:
        yield s
    finally:
        stop_and_show_logs(s)


def stop_and_show_logs(stack: Stack) -> None:
    """Stop every process of ``stack``, then print the last lines of each child's log (shown by pytest
    for a failing test)."""
    stack.stop()
    for log in sorted(stack.logs.glob("*.log")):
        text = log.read_text(errors="replace")
        if text.strip():
            print(f"--- {log.name} (last 40 lines)\n" + "\n".join(text.splitlines()[-40:]))
