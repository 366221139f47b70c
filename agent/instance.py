"""Whether a ``cmbuyer-agent run`` is running for a phone on this host: a lock file beside the phone's journal.

``run`` holds an exclusive ``flock`` on ``<state dir>/<serial>.lock`` for as long as it runs (the kernel drops it
when the process ends, however it ends, so a crash leaves no stale lock). ``doctor`` asks :func:`agent_running`
before it sends its heartbeat: the heartbeat carries a state, and a doctor run beside a working agent must not
overwrite the state that agent reports (BUSY, READY …) on the devices page (issue 32, found after §3). The device
API has no read-only call a doctor could use instead (shared/spec 002: heartbeat is the only device status call).

A second ``run`` for the same phone finds the lock taken and refuses to start: two agents on one journal would
claim and tap concurrently. The lock is advisory and local: agents on two hosts driving one phone are not seen.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cmbuyer.agent.journal import journal_path

# a doctor's agent_running probe takes the lock shared for microseconds: a run starting just then waits, not refuses
_TRIES = 10
_WAIT_SECONDS = 0.1


class AlreadyRunning(Exception):
    """Another ``run`` holds the phone's lock; ``str`` is the one line to print."""


def lock_path(serial: str, state_dir: Path | None = None) -> Path:
    """``<state dir>/<serial>.lock``, made file-safe like the journal's name."""
    return journal_path(serial, state_dir).with_suffix(".lock")


@contextmanager
def run_lock(serial: str, state_dir: Path | None = None) -> Iterator[None]:
    """Hold the phone's run lock for the ``with`` block (creating the state dir 0700 and the file 0600 when
    missing). Raises AlreadyRunning when another process (or another open of the file) holds it; OSError when
    the state dir cannot be written."""
    path = lock_path(serial, state_dir)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        for attempt in range(_TRIES):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == _TRIES - 1:
                    raise AlreadyRunning(
                        f"已有一个 cmbuyer-agent run 在为手机 {serial} 运行（锁文件 {path}）；"
                        "同一台手机只能运行一个代理"
                    ) from None
                time.sleep(_WAIT_SECONDS)  # a doctor's probe holds a shared lock for a moment only
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def agent_running(serial: str, state_dir: Path | None = None) -> bool:
    """True when a ``run`` holds the phone's lock right now. Never creates the lock file or the state dir;
    a missing or unreadable lock file means no agent runs here."""
    try:
        fd = os.open(lock_path(serial, state_dir), os.O_RDONLY)
    except OSError:
        return False
    try:
        # a shared lock is refused exactly while run holds its exclusive one, and is dropped again at once
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
