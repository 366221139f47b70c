"""Files that are not what they seem (a careless or hostile operator/environment): a pack,
evidence, dump or expected.json that is a FIFO, a symlink to /dev/zero, or a huge file. Every command
must answer with its one-line error within seconds — never block on a FIFO, never read an endless
device into memory. Real files, the real CLI in a child process (so a regression is a timeout with a
memory cap, not a hung or swapping test run)."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .packtools import make_pack_dir, rebound, write_pack

TIMEOUT_S = 15
MEMORY_CAP = 1024 * 1024 * 1024  # an endless read hits this instead of the host's memory


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            preexec_fn=_cap_memory,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the command hung (blocked on a FIFO or reading an endless file)")


def _agent(*args: str) -> subprocess.CompletedProcess[str]:
    return _python("import sys; from cmbuyer.agent.cli import main; sys.exit(main(sys.argv[1:]))", *args)


def _resolve_as_run(pack_dir: Path) -> subprocess.CompletedProcess[str]:
    """What ``run`` does each loop: resolve 9.0.0 (90000) with the permission check; prints the error."""
    code = (
        "import sys; from pathlib import Path; from cmbuyer.agent.pack.resolve import resolve\n"
        "from cmbuyer.agent.errors import PackError\n"
        "try:\n    resolve('9.0.0', 90000, Path(sys.argv[1]), check_permissions=True)\n"
        "except PackError as exc:\n    print(exc)\n"
    )
    return _python(code, str(pack_dir))


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _zero(path: Path) -> Path:
    path.symlink_to("/dev/zero")
    return path


HOSTILE = {"fifo": _fifo, "dev_zero": _zero}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_pack_verify_on_a_non_regular_pack_file_is_a_one_line_error(kind: str, tmp_path: Path) -> None:
    pack = HOSTILE[kind](tmp_path / "pdd-9.0.0-90000.json")
    done = _agent("pack", "verify", str(pack))
    assert done.returncode == 2, done
    assert done.stderr.count("\n") == 1 and "pdd-9.0.0-90000.json: $: " in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_run_refuses_a_symlinked_pack_to_a_fifo_or_device_without_blocking(kind: str, tmp_path: Path) -> None:
    """``run`` re-scans the pack dir every loop: a symlinked pack file is refused without opening it."""
    pack_dir = make_pack_dir(tmp_path / "packs")
    (pack_dir / "ops-9.0.0-90000.json").symlink_to(HOSTILE[kind](tmp_path / "target"))
    done = _resolve_as_run(pack_dir)
    assert done.returncode == 0, done
    assert "ops-9.0.0-90000.json: $: the pack file is a symlink" in done.stdout


def test_a_huge_broken_operator_pack_is_not_read_whole(tmp_path: Path) -> None:
    """A sparse multi-GB file in the pack dir: refused by size, not loaded into memory."""
    pack_dir = make_pack_dir(tmp_path / "packs")
    huge = pack_dir / "ops-9.0.0-90000.json"
    with huge.open("wb") as fh:
        fh.truncate(4 * MEMORY_CAP)
    huge.chmod(0o644)
    done = _resolve_as_run(pack_dir)
    assert done.returncode == 0, done
    assert "ops-9.0.0-90000.json: $: pack file larger than" in done.stdout


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_inspect_on_a_non_regular_dump_is_a_one_line_error(kind: str, tmp_path: Path) -> None:
    dump = HOSTILE[kind](tmp_path / "dump.xml")
    done = _agent("inspect", "--dump", str(dump))
    assert done.returncode != 0 and "Traceback" not in done.stderr, done
    out = json.loads(done.stdout)
    assert out["error"] and "dump.xml" in out["detail"], out


@pytest.mark.parametrize("kind", sorted(HOSTILE))
@pytest.mark.parametrize("member", ["dump.xml", "expected.json", "meta.json"])
def test_pack_test_on_a_non_regular_capture_file_is_an_error_line(kind: str, member: str, tmp_path: Path) -> None:
    from tests.agent.authoring.test_packtest import CAPTURES, FX, PACK

    cap = tmp_path / "captures" / "01-x"
    cap.mkdir(parents=True)
    name = CAPTURES[0]
    (cap / "dump.xml").write_bytes((FX / f"{name}.xml").read_bytes())
    recorded = json.loads((FX / "captures.json").read_text("utf-8"))[name]
    (cap / "meta.json").write_text(
        json.dumps({"capture_format": 1, "label": name, "device": "phonesim", **recorded}), "utf-8"
    )
    (cap / "expected.json").write_text(
        json.dumps({"expected_format": 1, "screen": "product", "readings": {}, "confirmed_by": "t"}), "utf-8"
    )
    (cap / member).unlink()
    HOSTILE[kind](cap / member)
    done = _agent("pack", "test", str(PACK), str(tmp_path / "captures"))
    assert done.returncode != 0 and "Traceback" not in done.stderr, done
    assert "01-x" in done.stdout + done.stderr and member in done.stdout + done.stderr, done


def test_evidence_file_that_is_a_fifo_inside_the_pack_dir_is_refused(tmp_path: Path) -> None:
    pack_dir = make_pack_dir(tmp_path / "packs")
    data = rebound("8.22.0", "9.0.0", 90000)
    path = write_pack(pack_dir, data)
    spec = next(iter(data["evidence"].values()))["files"]["dump"]
    target = pack_dir / spec["path"]
    target.unlink()
    _fifo(target)
    done = _agent("pack", "verify", str(path))
    assert done.returncode == 1, done
    assert "MISSING" in done.stdout or "MISMATCH" in done.stdout, done.stdout
    shutil.rmtree(pack_dir)
