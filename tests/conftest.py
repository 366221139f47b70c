"""Repository-wide test configuration."""

from __future__ import annotations

import os

# Keep tests away from a developer's real adb server and data dir.
os.environ.pop("CMBUYER_DATA_DIR", None)
