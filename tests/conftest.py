"""Repository-wide test configuration."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import threading
from typing import Any

import pytest

from tests.soak import DEFAULT_SECONDS_PER_ITERATION, timeout_for

# Helper modules whose asserts are part of the tests get pytest's assertion rewriting, like test
# modules and conftest files (detailed failure messages). Must run before they are first imported.
pytest.register_assert_rewrite(
    "tests.agent.fake_approval",
    "tests.agent.fakes",
    "tests.agent.realserver",
    "tests.cli_help",
    "tests.phonesim.helpers",
    "tests.server.admin.seed",
    "tests.server.datadir",
    "tests.server.evidence.pngs",
    "tests.server.inproc",
    "tests.server.submissions.helpers",
    "tests.server.submissions.live",
    "tests.server.supervision.helpers",
    "tests.state_tables",
)

# Keep tests away from a developer's real data dir.
os.environ.pop("CMBUYER_DATA_DIR", None)

# `cmbuyer-agent run` locks each phone host-wide (agent/instance.py: /tmp/cmbuyer-agent-<uid>): each test session
# gets its own lock dir, so test runs side by side (simulated phones are all called sim-1, sim-2 …) never see each
# other's agents. Agents the tests start inherit it.
_RUNTIME_DIR = tempfile.mkdtemp(prefix="cmbuyer-test-locks-")
os.environ["CMBUYER_AGENT_LOCK_DIR"] = _RUNTIME_DIR
atexit.register(shutil.rmtree, _RUNTIME_DIR, ignore_errors=True)

_exit_status: list[int] = []


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    _exit_status.append(int(exitstatus))


def pytest_unconfigure(config: Any) -> None:
    """Never hang after the summary: a test that failed before closing a database can leave a
    non-daemon aiosqlite worker thread behind, and the interpreter would wait for it forever."""
    leftovers = [t for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive() and not t.daemon]
    if leftovers and _exit_status:
        names = ", ".join(sorted({t.name for t in leftovers}))
        sys.stderr.write(
            f"\nwarning: {len(leftovers)} non-daemon thread(s) still running ({names}); "
            "exiting without waiting for them\n"
        )
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(_exit_status[-1])


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """A ``slow`` (soak) test's timeout grows with ``CMBUYER_SOAK_ITERATIONS`` (tests/soak.py); an
    explicit ``timeout`` marker on the test wins."""
    base = float(config.getini("timeout") or 300)
    for item in items:
        slow = item.get_closest_marker("slow")
        if slow is None or item.get_closest_marker("timeout") is not None:
            continue
        per = float(slow.kwargs.get("seconds_per_iteration", DEFAULT_SECONDS_PER_ITERATION))
        item.add_marker(pytest.mark.timeout(timeout_for(base, per)))
