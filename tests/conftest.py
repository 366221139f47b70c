"""Repository-wide test configuration."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

# Keep tests away from a developer's real data dir.
os.environ.pop("CMBUYER_DATA_DIR", None)

_exit_status: list[int] = []


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    _exit_status.append(int(exitstatus))


def pytest_unconfigure(config: Any) -> None:
    """Never hang after the summary: a test that failed before closing a database can leave a
    non-daemon aiosqlite worker thread behind, and the interpreter would wait for it forever."""
    leftovers = [t for t in threading.enumerate()
                 if t is not threading.main_thread() and t.is_alive() and not t.daemon]
    if leftovers and _exit_status:
        names = ", ".join(sorted({t.name for t in leftovers}))
        sys.stderr.write(f"\nwarning: {len(leftovers)} non-daemon thread(s) still running ({names}); "
                         "exiting without waiting for them\n")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(_exit_status[-1])
