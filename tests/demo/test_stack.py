"""demo/stack.py and demo/run.py around the processes (issue 32 §9): the demo says which of its processes
died, with its exit code and log, instead of waiting for tasks that can no longer move."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from demo.run import check_alive, font_line
from demo.stack import Stack, StackError


def test_a_dead_child_is_named_with_its_code_and_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = Stack(tmp_path / "data")
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    died = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    died.wait(30)
    stack.server, stack.agents = alive, {"sim-2": died}
    try:
        assert stack.dead() == [f"agent sim-2 exited with code 3; see {stack.logs / 'agent-sim-2.log'}"]
        with pytest.raises(StackError, match="agent sim-2 exited with code 3"):
            check_alive(stack)
        assert " ! agent sim-2 exited with code 3" in capsys.readouterr().out
    finally:
        alive.kill()
        alive.wait(30)


def test_the_demo_says_which_font_its_screenshots_use(monkeypatch: pytest.MonkeyPatch) -> None:
    from cmbuyer.phonesim import screenshot

    monkeypatch.setattr(screenshot, "font_path", lambda: screenshot.NON_CJK_FALLBACK)
    assert font_line().startswith("NO CJK FONT")
    monkeypatch.setattr(screenshot, "font_path", lambda: "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")
    assert font_line() == "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc (screenshots show Chinese)"
