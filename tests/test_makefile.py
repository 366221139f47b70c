"""``make clean``: it removes the venv, caches and the demo's data, but never a data dir that
holds a real database — it refuses and says why. Run on a scratch directory with the real Makefile."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

MAKEFILE = Path(__file__).resolve().parents[1] / "Makefile"
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _clean(where: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "-s", "-f", str(MAKEFILE), "-C", str(where), "clean"], capture_output=True, text=True, timeout=60
    )


def test_clean_refuses_a_real_database_and_removes_the_demo(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "var").mkdir(parents=True)
    (real / "var" / "cmbuyer.sqlite3").write_bytes(b"SQLite format 3\x00")
    (real / ".venv").mkdir()
    refused = _clean(real)
    assert refused.returncode != 0
    assert "拒绝执行：var/cmbuyer.sqlite3 是 var/demo 之外的数据库" in refused.stderr
    assert (real / "var" / "cmbuyer.sqlite3").exists() and (real / ".venv").exists()  # nothing removed

    demo = tmp_path / "demo"
    (demo / "var" / "demo").mkdir(parents=True)
    (demo / "var" / "demo" / "cmbuyer.sqlite3").write_bytes(b"SQLite format 3\x00")
    (demo / ".venv").mkdir()
    done = _clean(demo)
    assert done.returncode == 0, done.stderr
    assert not (demo / "var").exists() and not (demo / ".venv").exists()


def test_make_font_says_in_chinese_what_it_found_or_does() -> None:
    """The lines ``make font`` prints (a CJK font found, installing one, could not) are Chinese."""
    from tests.cli_text import has_chinese

    recipe = MAKEFILE.read_text("utf-8").split("\nfont:", 1)[1].split("\n\n", 1)[0]
    echoed = [line.split("echo ", 1)[1] for line in recipe.splitlines() if "echo " in line]
    assert len(echoed) == 3 and all(has_chinese(text) and text.startswith('"字体：') for text in echoed), echoed
