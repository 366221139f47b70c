"""Shared steps of the Chromium tests (test_browser*.py): a page that records console errors, and the
login through the real form. (The older browser tests still spell the login out inline.)"""

from __future__ import annotations

import re
from typing import Any

from .conftest import ADMIN_PASSWORD, ADMIN_USER


async def admin_page(browser: Any, problems: list[str], *, accept_dialogs: bool = True) -> Any:
    """A fresh zh-CN context and page (1440×900, 10 s default timeout) whose console errors and page
    errors are appended to ``problems``; confirmation prompts are accepted unless told otherwise."""
    context = await browser.new_context(viewport={"width": 1440, "height": 900}, locale="zh-CN")
    page = await context.new_page()
    page.set_default_timeout(10_000)
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    if accept_dialogs:
        page.on("dialog", lambda d: d.accept())
    return page


async def log_in(page: Any, base: str, username: str = ADMIN_USER, password: str = ADMIN_PASSWORD) -> None:
    """Log in through the real login form at ``base`` and wait for the task list."""
    from playwright.async_api import expect

    await page.goto(base + "/login")
    await page.fill("input[name=username]", username)
    await page.fill("input[name=password]", password)
    await page.click("button:has-text('登录')")
    await expect(page).to_have_url(re.compile(r"/tasks$"))
