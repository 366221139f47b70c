"""demo/stack.py and demo/run.py around the processes: the demo says which of its processes
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
        assert stack.dead() == [f"代理 sim-2 已退出（退出码 3）；见 {stack.logs / 'agent-sim-2.log'}"]
        with pytest.raises(StackError, match="代理 sim-2 已退出（退出码 3）"):
            check_alive(stack)
        assert " ! 代理 sim-2 已退出（退出码 3）" in capsys.readouterr().out
    finally:
        alive.kill()
        alive.wait(30)


def test_the_demo_says_which_font_its_screenshots_use(monkeypatch: pytest.MonkeyPatch) -> None:
    from cmbuyer.phonesim import screenshot

    monkeypatch.setattr(screenshot, "font_path", lambda: screenshot.NON_CJK_FALLBACK)
    assert font_line().startswith("没有中文字体：")
    monkeypatch.setattr(screenshot, "font_path", lambda: "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")
    assert font_line() == "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc（截图能显示中文）"


def test_the_demo_prints_chinese() -> None:
    """The demo's status lines (管理页面, 手机, 字体, the end line …) and the process deaths it
    names are Chinese, with commands, paths and codes as they are."""
    import demo.run
    import demo.stack
    from tests.cli_text import english_messages

    command = "demo：127.0.0.1:{} 已被占用；请停掉占用它的进程，或换一个端口：`make demo DEMO_PORT=8090`"
    assert english_messages(Path(str(demo.run.__file__)), codes={command}) == []
    assert english_messages(Path(str(demo.stack.__file__))) == []
