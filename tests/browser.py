"""What every browser test shares (admin pages and end to end): where Chromium is, how it is launched,
where screenshots go, and the skip rule.

Browser tests are skipped only when /usr/bin/chromium is missing *and* ``CI`` is unset; in CI they must run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS_ROOT = Path(__file__).resolve().parents[1] / "test-artifacts"
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

# ``pytestmark = BROWSER_MARKS`` (or ``[pytest.mark.e2e, *BROWSER_MARKS]``) in each browser test module
BROWSER_MARKS = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists() and not os.environ.get("CI"),
        reason="needs Debian chromium at /usr/bin/chromium (required when CI is set)",
    ),
]
