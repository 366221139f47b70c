"""Whether a ``cmbuyer-agent run`` is running for a phone on this host: one lock file per adb serial, host-wide.

``run`` holds an exclusive ``flock`` on ``<runtime dir>/<serial>.lock`` for as long as it runs (the kernel drops
it when the process ends, however it ends, so a crash leaves no stale lock). ``doctor`` asks :func:`agent_running`
before it sends its heartbeat: the heartbeat carries a state and the phone's hold, and a doctor run beside a
working agent must not overwrite what that agent reports (BUSY, NEEDS_PERSON and its hold …) on the devices page.

The lock is **per host and serial, not per state dir**: an adb serial names one phone on one host, whichever
``$CMBUYER_AGENT_STATE_DIR`` (or working folder, default ./var/agent) a ``run`` or ``doctor`` was started with. The
lock dir is ``/tmp/cmbuyer-agent-<uid>`` — deliberately not ``$XDG_RUNTIME_DIR``, which a login shell has and a
systemd service does not, so a doctor typed in a shell would look elsewhere than the agent's service; it is made
0700 and refused when it is a symlink, not ours, or open to others (``/tmp`` is shared). ``CMBUYER_AGENT_LOCK_DIR``
moves it (the test suite gives each run its own; every agent and doctor of a host must then use the same value).
A second ``run`` for the same phone finds the lock taken and refuses to start: two agents would claim and tap
concurrently. With the default dir, ``run`` and ``doctor`` also look at the other users' ``/tmp/cmbuyer-agent-*``
locks they may read — root may, so ``doctor`` run as root sees the agent a systemd unit runs as ``User=cmbuyer``.
The lock is advisory and local: agents on two hosts driving one phone are not seen.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# a doctor's agent_running probe takes the lock shared for microseconds: a run starting just then waits, not refuses
_TRIES = 10
_WAIT_SECONDS = 0.1
_LOCK_ROOT = Path("/tmp")  # noqa: S108 - per-user dirs made 0700 and checked (_checked_dir), files opened O_NOFOLLOW
_MAX_NAME = 200  # bytes of the encoded serial before the file name falls back to its hash (NAME_MAX is 255)


class AlreadyRunning(Exception):
    """Another ``run`` holds the phone's lock; ``str`` is the one line to print."""


class UnsafeRuntimeDir(OSError):
    """The runtime dir is a symlink, not owned by this user, or open to others; ``str`` says which and the fix."""


def runtime_dir(lock_dir: Path | None) -> Path:
    """Where the per-phone locks live: ``lock_dir`` (the agent's ``CMBUYER_AGENT_LOCK_DIR``, agent/settings.py),
    else ``/tmp/cmbuyer-agent-<uid>``."""
    if lock_dir is not None:
        return lock_dir
    return _LOCK_ROOT / f"cmbuyer-agent-{os.getuid()}"


def lock_name(serial: str) -> str:
    """The serial as one file name: percent-encoded (``/``, ``:``, ``%`` and the rest of non-alphanumerics except
    ``-_.~``), so two serials never share a lock and none escapes the folder; a very long one by its SHA-256."""
    encoded = urllib.parse.quote(serial, safe="")
    if len(encoded) > _MAX_NAME or encoded in ("", ".", ".."):
        encoded = "sha256-" + hashlib.sha256(serial.encode("utf-8")).hexdigest()
    return f"{encoded}.lock"


def lock_path(serial: str, lock_dir: Path | None) -> Path:
    """``<runtime dir>/<encoded serial>.lock``."""
    return runtime_dir(lock_dir) / lock_name(serial)


def _other_locks(serial: str, lock_dir: Path | None) -> list[Path]:
    """Other users' lock files of ``serial`` in the default place (none when ``lock_dir`` is set); the
    encoded name holds no glob characters (``*?[`` are percent-encoded)."""
    if lock_dir is not None:
        return []
    own = lock_path(serial, None)
    return [p for p in sorted(_LOCK_ROOT.glob(f"cmbuyer-agent-[0-9]*/{lock_name(serial)}")) if p != own]


def _held(path: Path) -> bool:
    """True when a ``run`` holds the lock file ``path`` right now; False when it is missing or unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
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


def _checked_dir(lock_dir: Path | None) -> Path:
    """The runtime dir, created 0700 when missing. Raises UnsafeRuntimeDir (see the class) or OSError."""
    path = runtime_dir(lock_dir)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafeRuntimeDir(f"运行锁目录 {path} 不是目录（可能是符号链接）：请删除它后重试")
    if st.st_uid != os.getuid():
        raise UnsafeRuntimeDir(f"运行锁目录 {path} 不属于当前用户：请删除它后重试")
    if st.st_mode & 0o077:
        raise UnsafeRuntimeDir(f"运行锁目录 {path} 对其他用户开放：请运行 chmod 700 {path}")
    return path


@contextmanager
def run_lock(serial: str, lock_dir: Path | None) -> Iterator[None]:
    """Hold the phone's run lock for the ``with`` block (creating the runtime dir 0700 and the file 0600 when
    missing). Raises AlreadyRunning when another process (or another open of the file) holds it;
    UnsafeRuntimeDir / OSError when the runtime dir cannot be used. ``lock_dir``: see :func:`runtime_dir`."""
    path = _checked_dir(lock_dir) / lock_name(serial)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        for attempt in range(_TRIES):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == _TRIES - 1:
                    raise AlreadyRunning(
                        f"已有一个 cmbuyer-agent run 在本机为手机 {serial} 运行（锁文件 {path}，与状态目录无关）；"
                        "同一台手机只能运行一个代理"
                    ) from None
                time.sleep(_WAIT_SECONDS)  # a doctor's probe holds a shared lock for a moment only
        other = next((p for p in _other_locks(serial, lock_dir) if _held(p)), None)
        if other is not None:
            raise AlreadyRunning(
                f"已有一个 cmbuyer-agent run 在本机为手机 {serial} 运行（另一个用户的锁文件 {other}）；"
                "同一台手机只能运行一个代理"
            )
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def agent_running(serial: str, lock_dir: Path | None) -> bool:
    """True when a ``run`` on this host holds the phone's lock right now, whatever its state dir (and, in the
    default place, whichever user's lock this process may read). Never creates a lock file or dir; a missing or
    unreadable lock file means no agent runs there."""
    return _held(lock_path(serial, lock_dir)) or any(_held(p) for p in _other_locks(serial, lock_dir))
