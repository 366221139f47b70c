"""agent/instance.py: the host-wide run lock per adb serial — its place, other users' locks, and
a lock dir others could tamper with. (``run``/``doctor`` with different state dirs: tests/agent/test_cli_sim.py.)"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from cmbuyer.agent import instance


@pytest.fixture
def default_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The default lock place (``/tmp/cmbuyer-agent-<uid>``) moved under ``tmp_path``."""
    monkeypatch.setattr(instance, "_LOCK_ROOT", tmp_path)
    return tmp_path


def test_another_users_running_agent_is_seen_by_doctor_and_run(default_place: Path) -> None:
    """root's doctor (or a second run) sees the agent a systemd unit runs as another user, in that user's dir."""
    other = default_place / "cmbuyer-agent-4242"
    other.mkdir(mode=0o700)
    fd = os.open(other / instance.lock_name("192.168.0.173:5555"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        assert instance.agent_running("192.168.0.173:5555", None) is False  # the file alone is no agent
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what that user's run holds
        assert instance.agent_running("192.168.0.173:5555", None) is True
        assert instance.agent_running("sim-1", None) is False
        with (
            pytest.raises(instance.AlreadyRunning, match="另一个用户的锁文件"),
            instance.run_lock("192.168.0.173:5555", None),
        ):
            pass
    finally:
        os.close(fd)
    with instance.run_lock("192.168.0.173:5555", None):
        assert instance.agent_running("192.168.0.173:5555", None) is True
    assert (default_place / f"cmbuyer-agent-{os.getuid()}").stat().st_mode & 0o777 == 0o700


def test_a_lock_dir_open_to_others_or_a_symlink_is_refused(default_place: Path, tmp_path: Path) -> None:
    own = default_place / f"cmbuyer-agent-{os.getuid()}"
    own.mkdir(mode=0o755)
    own.chmod(0o755)
    with pytest.raises(instance.UnsafeRuntimeDir, match="chmod 700"), instance.run_lock("sim-1", None):
        pass
    own.rmdir()
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    own.symlink_to(target)
    with pytest.raises(instance.UnsafeRuntimeDir, match="符号链接"), instance.run_lock("sim-1", None):
        pass
    assert list(target.iterdir()) == []
