"""``make soak`` can pass: a soak test's time limit grows with
``CMBUYER_SOAK_ITERATIONS`` (tests/soak.py + the hook in tests/conftest.py) instead of the fixed
per-test timeout. Checked on a real pytest run in a subprocess, with the base timeout lowered to 2 s."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import time
import pytest

@pytest.mark.slow(seconds_per_iteration=1)
def test_soak_loop():
    time.sleep(3)  # 3 rounds of ~1 s: longer than the 2 s base timeout
"""


def _run(tmp_path: Path, iterations: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(PROBE, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "CMBUYER_SOAK_ITERATIONS"}
    if iterations is not None:
        env["CMBUYER_SOAK_ITERATIONS"] = iterations
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tests.conftest",
            "-o",
            "timeout=2",
            "-o",
            "markers=slow",
            "--rootdir",
            str(tmp_path),
            "-p",
            "no:cacheprovider",
            str(tmp_path / "test_probe.py"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_soak_timeout_scales_with_the_iteration_count(tmp_path: Path) -> None:
    ran = _run(tmp_path, "5")  # 2 s + 1 s × 5
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_without_a_count_the_base_timeout_still_stops_a_hang(tmp_path: Path) -> None:
    ran = _run(tmp_path, None)
    assert ran.returncode != 0 and "Timeout" in ran.stdout + ran.stderr
