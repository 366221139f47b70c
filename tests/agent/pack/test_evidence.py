"""Evidence that is checked: the shipped packs' evidence is real simulator capture
bundles whose files hash to what the packs say, and ``cmbuyer-agent pack verify`` fails on one changed
byte in any file, a missing file, or a path leaving the pack's directory. Real files, the real CLI."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from cmbuyer.agent.authoring.inspect import inspect_dump
from cmbuyer.agent.cli import main
from cmbuyer.agent.pack.files import shipped_pack_dir
from cmbuyer.agent.screens import after_submit
from cmbuyer.agent.screens.dump import parse_dump
from tests.agent.packtools import evidence_path, flip_byte, make_pack_dir, rebound, shipped_packs, write_pack

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
REAL_STRUCTURES = Path(__file__).parents[1] / "fixtures" / "real_structures"


def test_shipped_evidence_is_simulator_capture_bundles_of_the_packs_version() -> None:
    root = shipped_pack_dir()
    total = 0
    for pack in shipped_packs():
        assert "SIMULATOR" in pack.raw["description"]
        for eid, entry in pack.raw["evidence"].items():
            files = {kind: root / spec["path"] for kind, spec in entry["files"].items()}
            assert all(f.parent == root / "evidence" / pack.id / eid for f in files.values()), eid
            if entry["source"] == "real-structure":  # a dump alone, the repository's fixture
                assert set(files) == {"dump"} and pack.id == "pdd-8.22.0-82200"
                fixture = REAL_STRUCTURES / f"order_sheet_{eid.removeprefix('real-sheet-').replace('-', '_')}.xml"
                assert files["dump"].read_bytes() == fixture.read_bytes(), eid
                assert inspect_dump(parse_dump(fixture.read_bytes()), [pack])["screen"] == "confirm_order"
                continue
            assert entry["source"] == "simulator"
            meta = json.loads(files["meta"].read_text("utf-8"))
            assert (meta["app_version_name"], meta["app_version_code"]) == (pack.version_name, pack.version_code)
            assert meta["dump_sha256"] == hashlib.sha256(files["dump"].read_bytes()).hexdigest()
            assert meta["screenshot_sha256"] == hashlib.sha256(files["screenshot"].read_bytes()).hexdigest()
            assert files["screenshot"].read_bytes().startswith(PNG_MAGIC)
            assert meta["captured_at"] == entry["captured_at"] and meta["label"] == eid
            # each bundle shows a screen its pack recognizes (the order list is read after the tap)
            dump = parse_dump(files["dump"].read_bytes())
            screen = inspect_dump(dump, [pack])["screen"]
            assert screen is not None or after_submit.is_order_list(dump, pack.after_submit), eid
            total += sum(f.stat().st_size for f in files.values())
    assert total < 8 * 1024 * 1024, total  # shipped in the wheel: keep it small


def test_every_shipped_evidence_bundle_backs_some_selector() -> None:
    """No orphan bundle: each evidence id is named by at least one selector of its pack."""
    for pack in shipped_packs():
        rest = json.dumps({k: v for k, v in pack.raw.items() if k != "evidence"}, ensure_ascii=False)
        assert [eid for eid in pack.raw["evidence"] if f'"{eid}"' not in rest] == [], pack.id


@pytest.mark.parametrize("pack_file", ["pdd-8.17.0-81700.json", "pdd-8.22.0-82200.json"])
def test_pack_verify_passes_on_the_shipped_packs(pack_file: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = shipped_pack_dir() / pack_file
    assert main(["pack", "verify", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    entries = json.loads(path.read_text("utf-8"))["evidence"]
    n = sum(len(e["files"]) for e in entries.values())  # a real-structure bundle is a dump alone
    assert len(lines) == n + 1
    assert all(line.startswith("OK ") for line in lines[:-1])
    assert lines[-1] == f"{pack_file}：{n} 个证据文件，{n} 个正常，0 个失败 -> 通过 (OK)"


@pytest.fixture
def operator_pack(tmp_path: Path) -> tuple[Path, dict]:
    pack_dir = make_pack_dir(tmp_path / "packs")
    data = rebound("8.22.0", "8.23.0", 82300)
    return write_pack(pack_dir, data), data


@pytest.mark.parametrize("kind", ["dump", "screenshot", "meta"])
def test_pack_verify_fails_on_one_changed_byte(
    operator_pack: tuple[Path, dict], kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path, data = operator_pack
    assert main(["pack", "verify", str(path)]) == 0
    capsys.readouterr()
    flip_byte(evidence_path(path.parent, data, "sim822-sheet-blanket", kind), 7)
    assert main(["pack", "verify", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    bad = [line for line in lines if not line.startswith("OK ")]
    rel = data["evidence"]["sim822-sheet-blanket"]["files"][kind]["path"]
    assert len(bad) == 2 and bad[0].startswith(f"MISMATCH sim822-sheet-blanket {kind} {rel} (sha256 ")
    assert bad[1] == "ops-8.23.0-82300.json：44 个证据文件，43 个正常，1 个失败 -> 失败 (FAILED)"


def test_pack_verify_fails_on_a_missing_file_and_a_symlink_leaving_the_dir(
    operator_pack: tuple[Path, dict], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, data = operator_pack
    evidence_path(path.parent, data, "sim822-product", "dump").unlink()
    meta = evidence_path(path.parent, data, "sim822-retention", "meta")
    outside = tmp_path / "copy.json"
    shutil.copyfile(meta, outside)
    meta.unlink()
    meta.symlink_to(outside)
    assert main(["pack", "verify", str(path)]) == 1
    bad = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("OK ")]
    assert bad == [
        "MISSING  sim822-product dump evidence/pdd-8.22.0-82200/sim822-product/dump.xml (no such file)",
        "UNSAFE   sim822-retention meta evidence/pdd-8.22.0-82200/sim822-retention/meta.json (path must be "
        "relative, without '..', and stay inside the pack's directory)",
        "ops-8.23.0-82300.json：44 个证据文件，42 个正常，2 个失败 -> 失败 (FAILED)",
    ]


def test_pack_verify_refuses_an_invalid_pack_in_one_line(
    operator_pack: tuple[Path, dict], capsys: pytest.CaptureFixture[str]
) -> None:
    path, data = operator_pack
    data["evidence"]["sim822-product"]["files"]["dump"]["path"] = "../outside/dump.xml"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert main(["pack", "verify", str(path)]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == (
        "ops-8.23.0-82300.json: $.evidence['sim822-product'].files.dump.path: '../outside/dump.xml' "
        "does not match '^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}(/[A-Za-z0-9_][A-Za-z0-9._-]{0,127})*$'\n"
    )
    assert main(["pack", "verify", str(path.parent / "absent.json")]) == 2
    assert capsys.readouterr().err == "absent.json: $: 无法读取文件（No such file or directory）\n"


def test_every_shipped_evidence_file_is_declared_package_data() -> None:
    """The wheel ships what the loader re-hashes (pyproject ``[tool.setuptools.package-data]``; a wheel
    built from this tree held all 63 files when this test was written)."""
    import tomllib
    from pathlib import PurePosixPath

    repo = Path(__file__).resolve().parents[3]
    patterns = tomllib.loads((repo / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]["package-data"][
        "cmbuyer.agent"
    ]
    root = shipped_pack_dir()
    files = [
        PurePosixPath("packs") / f.relative_to(root).as_posix()
        for f in root.rglob("*")
        if f.is_file() and f.suffix in (".json", ".xml", ".png")
    ]
    assert len(files) > 60
    assert [f for f in files if not any(f.match(p) for p in patterns)] == []
