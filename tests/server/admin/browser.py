"""Shared parts of the admin browser tests (real headless Chromium: Debian ``chromium`` driven by
Playwright for Python): where Chromium and the screenshots live, the skip rules, a page that records
script errors, and the login through the real /login form.

Chromium's path, launch arguments and the skip rule: tests/browser.py.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from tests.browser import ARTIFACTS_ROOT, BROWSER_MARKS, CHROMIUM, LAUNCH_ARGS

from .conftest import ADMIN_PASSWORD, ADMIN_USER

__all__ = [
    "ARTIFACTS",
    "BROWSER_MARKS",
    "CHROMIUM",
    "LAUNCH_ARGS",
    "PRODUCT_URL",
    "chromium_page",
    "create_draft",
    "log_in",
]

ARTIFACTS = ARTIFACTS_ROOT / "admin-browser"


async def log_in(page: Any, base: str) -> None:
    """Log in as the test administrator through the /login form; returns once the task list is shown.

    ``base`` is the server's root URL without a trailing slash. Raises Playwright's AssertionError when
    the login does not land on /tasks within the page's default timeout.
    """
    from playwright.async_api import expect

    await page.goto(base + "/login")
    await page.fill("input[name=username]", ADMIN_USER)
    await page.fill("input[name=password]", ADMIN_PASSWORD)
    await page.click("button:has-text('登录')")
    await expect(page).to_have_url(re.compile(r"/tasks$"))


PRODUCT_URL = "https://mobile.yangkeduo.com/goods.html?goods_id=937122477375"


async def create_draft(
    page: Any, title: str, options: list[tuple[str, str]], *, quantity: str = "2", max_total_price: str = "30.00"
) -> None:
    """Fill the task list's open create form — ``title``, :data:`PRODUCT_URL`, one option row per
    ``(dimension, value)`` of ``options``, ``quantity``, ``max_total_price`` — and submit it; returns once
    the page says the draft was created."""
    from playwright.async_api import expect

    fields = {"title": title, "product_url": PRODUCT_URL}
    for i, (dimension, value) in enumerate(options, start=1):
        fields |= {f"option_dim_{i}": dimension, f"option_value_{i}": value}
    fields |= {"quantity": quantity, "max_total_price": max_total_price}
    for name, value in fields.items():
        await page.fill(f"input[name={name}]", value)
    await page.click("button:has-text('创建草稿')")
    await expect(page.locator(".notice")).to_contain_text("已创建草稿任务")


@asynccontextmanager
async def chromium_page(*, http_errors: bool = False) -> AsyncIterator[tuple[Any, list[str]]]:
    """A fresh Chromium page (1440×900, zh-CN, 10 s default timeout, dialogs accepted) and the list its
    console errors and uncaught page errors are appended to (a test asserts it empty at the end);
    ``http_errors`` also records every response with status ≥ 400 as ``"<status> <url>"``."""
    from playwright.async_api import async_playwright

    problems: list[str] = []
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        try:
            context = await browser.new_context(viewport={"width": 1440, "height": 900}, locale="zh-CN")
            page = await context.new_page()
            page.set_default_timeout(10_000)
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            if http_errors:
                page.on("response", lambda r: problems.append(f"{r.status} {r.url}") if r.status >= 400 else None)
            page.on("dialog", lambda d: d.accept())
            yield page, problems
            await context.close()
        finally:
            await browser.close()
