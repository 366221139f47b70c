"""End-to-end fixtures: the real processes (server, phone simulator, agents) through demo.stack."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from demo.stack import Stack, free_port

SCENARIO = Path(__file__).resolve().parents[2] / "demo" / "scenario.yaml"


# The e2e stacks' server settings: a 20 s lease, a sweep every second, supervision off (tests of supervised
# orders set their N); :func:`new_stack`'s keywords add or override.
STACK_ENV = {"CMBUYER_CLAIM_LEASE_TTL": "20", "CMBUYER_SWEEP_INTERVAL": "1", "CMBUYER_SUPERVISED_ORDERS": "0"}


def new_stack(tmp_path: Path, **env: str) -> Stack:
    """An initialized (not started) stack in ``tmp_path/data`` on a free port, with :data:`STACK_ENV` and
    ``env`` (``CMBUYER_*`` names) as its processes' settings. The caller stops it (:func:`stop_and_show_logs`)."""
    s = Stack(tmp_path / "data", server_port=free_port(), env={**STACK_ENV, **env})
    s.init()
    return s


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    """A fresh stack on free ports; every child process is stopped at the end of the test."""
    s = new_stack(tmp_path)
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


def agent_log(stack: Stack, serial: str) -> str:
    """What the agent process of ``serial`` has logged so far ("" before its log exists)."""
    path = stack.logs / f"agent-{serial}.log"
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def wait_until(cond: Callable[[], bool], seconds: float, what: str, log: Callable[[], str], poll: float) -> None:
    """Poll ``cond`` every ``poll`` seconds for up to ``seconds``; if it never holds, fail with ``what``
    and ``log()`` (the agent's log, which says why the processes did not get there)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(poll)
    raise AssertionError(f"{what} not reached in {seconds}s; agent log:\n{log()}")


def admin_page(browser: Any, stack: Stack, problems: list[str]) -> Any:
    """A new 1440×900 zh-CN page of a sync Playwright ``browser``, logged in as the stack's admin through the
    real /login form; page errors and console errors are appended to ``problems``, dialogs accepted."""
    page = browser.new_context(viewport={"width": 1440, "height": 900}, locale="zh-CN").new_page()
    page.set_default_timeout(15_000)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("dialog", lambda d: d.accept())
    page.goto(f"{stack.url}/login")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", stack.admin_password)
    page.click("button:has-text('登录')")
    page.wait_for_url(f"{stack.url}/tasks")
    return page
