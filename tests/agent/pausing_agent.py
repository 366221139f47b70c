"""Test-only launcher: the real ``cmbuyer-agent`` whose journal stops the process at one commit point.

Usage: ``python tests/agent/pausing_agent.py <COMMIT_POINT> <cmbuyer-agent arguments …>``, where
``COMMIT_POINT`` is one of :data:`cmbuyer.agent.journal.COMMIT_POINTS`. The agent runs exactly as the
installed entry point does (``cmbuyer.agent.cli.main``), except that every journal it opens carries a
``commit_hook`` that, right after ``COMMIT_POINT`` is committed, writes ``test pause after <point>`` to
stderr and sleeps forever — so tests/agent/test_kill_restart.py can SIGKILL it at exactly that journal
phase. Production code has no such switch: only this launcher installs the hook.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from cmbuyer.agent import cli
from cmbuyer.agent.journal import COMMIT_POINTS, CommitHook, Journal

PAUSE_MARK = "test pause after"


def pause_at(point: str) -> CommitHook:
    """A commit hook that never returns once ``point`` is committed (other points pass through)."""

    def hook(name: str) -> None:
        if name == point:
            sys.stderr.write(f"{PAUSE_MARK} {name}\n")
            sys.stderr.flush()
            while True:
                time.sleep(3600)

    return hook


def main(argv: list[str]) -> int:
    point, agent_args = argv[0], argv[1:]
    if point not in COMMIT_POINTS:
        sys.stderr.write(f"unknown commit point {point!r}; one of {', '.join(COMMIT_POINTS)}\n")
        return 2
    hook = pause_at(point)

    class PausingJournal(Journal):
        def __init__(self, path: Path, *, commit_hook: CommitHook | None = None) -> None:
            super().__init__(path, commit_hook=hook)

    cli.Journal = PausingJournal  # type: ignore[misc]  # the one name cli opens journals through
    return cli.main(agent_args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
