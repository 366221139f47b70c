"""Attacks on ``cmbuyer-server evidence gc`` (server/services/evidence_gc.py, server/evidence/files.py)
and the budget settings (server/config.py): real SQLite file, real aiohttp app, the real CLI entry
point. Tests marked "Found:" failed on the first version of these features (fixed since); the others
are regressions the other tests do not cover (odd trees, chunk boundaries, a locked database, a missing
evidence dir). The budget races are in tests/server/submissions/test_attempt_budget_races.py (it
needs small budgets for every test)."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path

import pytest

from cmbuyer.server.config import Settings, load_settings
from cmbuyer.server.db import connect_sync
from cmbuyer.server.domain.errors import SettingsError
from cmbuyer.server.evidence import files
from cmbuyer.server.store import evidence as evidence_store
from tests.server.evidence.conftest import EvidenceGc, Uploader
from tests.server.evidence.pngs import padded_to
from tests.server.submissions.helpers import (
    age_file,
)

DAY = 86400


def _audit_gc_rows(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM audit_log WHERE action = 'evidence.gc'").fetchone()[0])


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _gc_while_locked(settings: Settings, gc: EvidenceGc) -> tuple[int, str]:
    """Run gc while another connection (as another process's writer would) holds the write lock."""
    other = connect_sync(settings.db_path)
    try:
        other.execute("BEGIN IMMEDIATE")
        code, _, err = gc()
        other.execute("ROLLBACK")
    finally:
        other.close()
    return code, err


# --- found by review and fixed (each failed on the first version) ---------------------------------------


@pytest.mark.parametrize("depth", ["top", "sub"])
def test_gc_never_follows_a_symlinked_directory_out_of_the_evidence_tree(
    settings: Settings, tmp_path: Path, gc: EvidenceGc, depth: str
) -> None:
    """Found: ``files.scan`` tests ``top.is_dir()`` / ``sub.is_dir()``, which follow symlinks, so a
    symlinked ``ab`` or ``ab/cd`` directory is walked and gc unlinks a file that lives outside the
    evidence dir (here: an old, unreferenced-looking copy on another volume). gc must only ever remove
    entries that physically sit inside ``<evidence_dir>/ab/cd/``."""
    data = padded_to(500)
    sha = _sha(data)
    outside = tmp_path / "elsewhere"
    victim_dir = outside / sha[2:4] if depth == "top" else outside
    victim_dir.mkdir(parents=True)
    victim = victim_dir / f"{sha}.png"
    victim.write_bytes(data)
    age_file(victim, 30 * DAY)
    settings.evidence_dir.mkdir(exist_ok=True)
    if depth == "top":
        (settings.evidence_dir / sha[:2]).symlink_to(outside, target_is_directory=True)
    else:
        (settings.evidence_dir / sha[:2]).mkdir()
        (settings.evidence_dir / sha[:2] / sha[2:4]).symlink_to(outside, target_is_directory=True)

    code, report, _ = gc()
    assert code == 0
    assert victim.exists(), "evidence gc deleted a file outside the evidence directory through a symlink"
    assert report["removed"] == 0


def test_gc_that_fails_on_a_locked_database_has_removed_nothing(
    settings: Settings, sync_conn: sqlite3.Connection, gc: EvidenceGc
) -> None:
    """Found: stale temporary files are unlinked *before* the audit transaction. When only temporary
    files are found and another process holds the write lock, gc deletes them, then fails to write its
    audit row and exits 4 with ``storage error`` — the operator is told the run failed, yet files are
    gone and no ``evidence.gc`` audit row records it."""
    sha = _sha(padded_to(600))
    folder = settings.evidence_dir / sha[:2] / sha[2:4]
    folder.mkdir(parents=True)
    stale = folder / ".tmp-crashed.png"
    stale.write_bytes(b"half a file")
    age_file(stale, 3 * DAY)
    code, err = _gc_while_locked(settings, gc)
    assert code == 4 and "存储出错" in err
    assert stale.exists(), "gc reported a storage failure but had already deleted files (no audit row)"
    assert _audit_gc_rows(sync_conn) == 0


@pytest.mark.parametrize("value", ["1000000000", "2147483648", "4294967296"])
def test_evidence_byte_budget_accepts_its_whole_stated_range(tmp_path: Path, value: str) -> None:
    """Found: ``CMBUYER_EVIDENCE_BYTES_PER_ATTEMPT`` is declared with the range 1024 … 4294967296 and its
    error message says so, but ``_int`` only accepts up to nine digits: every value from 1,000,000,000
    (≈ 0.93 GiB) on is refused with "must be an integer from 1024 to 4294967296"."""
    settings = load_settings(tmp_path, {"CMBUYER_EVIDENCE_BYTES_PER_ATTEMPT": value})
    assert settings.evidence_bytes_per_attempt == int(value)


def test_evidence_byte_budget_above_range_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="CMBUYER_EVIDENCE_BYTES_PER_ATTEMPT"):
        load_settings(tmp_path, {"CMBUYER_EVIDENCE_BYTES_PER_ATTEMPT": "4294967297"})


def test_gc_reference_check_does_not_scan_every_asset_under_the_write_lock(
    settings: Settings, sync_conn: sqlite3.Connection
) -> None:
    """Found: ``evidence_assets`` has no index on ``sha256``, so each chunk's ``referenced()`` query
    (run inside BEGIN IMMEDIATE) is a full table scan. Every old file on disk — referenced ones too — is
    a candidate, so a run does (files / 200) full scans while the server's writer waits: measured here
    ≈ 150 ms per chunk at 200,000 assets and ≈ 500 ms at 1,000,000, i.e. O(files × assets) and device
    writes stalled for each chunk, not the short bounded wait ``CHUNK`` promises."""
    seen: list[str] = []
    sync_conn.set_trace_callback(seen.append)
    try:
        evidence_store.referenced(sync_conn, ["a" * 64, "b" * 64])
    finally:
        sync_conn.set_trace_callback(None)
    query = next(s for s in seen if "evidence_assets" in s)
    plan = " | ".join(r[3] for r in sync_conn.execute("EXPLAIN QUERY PLAN " + query))
    assert "SCAN evidence_assets" not in plan, plan


# --- regressions that held -------------------------------------------------------------------------


def test_gc_on_a_locked_database_with_candidates_deletes_nothing(
    settings: Settings, sync_conn: sqlite3.Connection, gc: EvidenceGc
) -> None:
    """Another process holds the write lock: gc waits the busy timeout, exits 4 with a one-line message
    that names no path, and has removed neither the orphan nor the stale temporary file."""
    data = padded_to(610)
    orphan = files.store(settings.evidence_dir, _sha(data), data)
    age_file(orphan, 3 * DAY)
    stale = orphan.parent / ".tmp-crashed.png"
    stale.write_bytes(b"half")
    age_file(stale, 3 * DAY)
    code, err = _gc_while_locked(settings, gc)
    assert code == 4
    assert err.strip() == "cmbuyer-server：存储出错（could not begin a write transaction）"
    assert orphan.exists() and stale.exists() and _audit_gc_rows(sync_conn) == 0


def test_gc_ignores_everything_outside_the_layout_and_dry_run_touches_nothing(
    settings: Settings, tmp_path: Path, sync_conn: sqlite3.Connection, gc: EvidenceGc
) -> None:
    """Uppercase hex names, directories named like a stored or temporary file, a FIFO, a symlink *file*
    named like a stored file (its target outside must survive), hashes at the wrong depth or in the
    wrong folder: all old, none removed. A dry run changes no file, no mtime and writes no audit row."""
    data = padded_to(620)
    sha = _sha(data)
    ev = settings.evidence_dir
    folder = ev / sha[:2] / sha[2:4]
    folder.mkdir(parents=True)
    outside = tmp_path / "outside.png"
    outside.write_bytes(data)
    age_file(outside, 30 * DAY)
    other = _sha(padded_to(621))
    odd: list[Path] = []
    upper = ev / sha[:2].upper() / sha[2:4].upper()
    upper.mkdir(parents=True)
    (upper / f"{sha.upper()}.png").write_bytes(data)
    (folder / f"{sha[:62].upper()}{sha[62:]}.png").write_bytes(data)
    (folder / f"{sha}.png").symlink_to(outside)
    (folder / f"{other}.png").mkdir()  # right name shape, wrong folder, and a directory
    (folder / ".tmp-dir.png").mkdir()
    os.mkfifo(folder / f"{sha[:4]}{'0' * 60}.png")
    (ev / f"{sha}.png").write_bytes(data)  # wrong depth
    (ev / sha[:2] / f"{sha}.png").write_bytes(data)  # wrong depth
    for p in [
        upper / f"{sha.upper()}.png",
        folder / f"{sha[:62].upper()}{sha[62:]}.png",
        folder / f"{sha}.png",
        folder / f"{other}.png",
        folder / ".tmp-dir.png",
        ev / f"{sha}.png",
        ev / sha[:2] / f"{sha}.png",
    ]:
        age_file(p, 30 * DAY)
        odd.append(p)
    orphan_data = padded_to(622)
    orphan = files.store(ev, _sha(orphan_data), orphan_data)
    age_file(orphan, 30 * DAY)
    before = {p: p.lstat().st_mtime for p in [*odd, orphan, outside]}

    code, dry, _ = gc("--dry-run")
    assert code == 0 and (dry["scanned"], dry["removed"], dry["removed_temporary"]) == (1, 1, 0)
    assert {p: p.lstat().st_mtime for p in before} == before and _audit_gc_rows(sync_conn) == 0

    code, real, _ = gc()
    assert code == 0 and (real["removed"], real["bytes_freed"]) == (1, len(orphan_data))
    assert not orphan.exists()
    assert all(os.path.lexists(p) for p in odd) and outside.read_bytes() == data


def test_gc_on_a_missing_evidence_dir_is_a_no_op(
    settings: Settings, sync_conn: sqlite3.Connection, gc: EvidenceGc
) -> None:
    settings.evidence_dir.rmdir()
    code, report, _ = gc()
    assert code == 0 and report["scanned"] == 0 and not settings.evidence_dir.exists()
    assert _audit_gc_rows(sync_conn) == 0


async def test_gc_chunks_keep_referenced_files_on_both_sides_of_a_chunk_boundary(
    upload_referenced: Uploader, settings: Settings, sync_conn: sqlite3.Connection, gc: EvidenceGc
) -> None:
    """450 old files (three chunks); the files sorted 0, 199, 200, 399 and 449 are referenced by rows, the
    rest are orphans in the same chunks. Exactly the orphans go; each chunk's transaction audits what it
    removed (three rows adding up to 445)."""
    blobs = sorted((padded_to(700 + i) for i in range(450)), key=_sha)
    keep = {0, 199, 200, 399, 449}
    for i in sorted(keep):
        await upload_referenced(blobs[i])
    for i, blob in enumerate(blobs):
        path = files.path_for(settings.evidence_dir, _sha(blob))
        if i not in keep:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(blob)
        age_file(path, 2 * DAY)

    code, report, _ = gc()
    assert code == 0
    assert (report["scanned"], report["referenced"], report["removed"]) == (450, 5, 445)
    assert report["bytes_freed"] == sum(len(b) for i, b in enumerate(blobs) if i not in keep)
    for i, blob in enumerate(blobs):
        assert files.path_for(settings.evidence_dir, _sha(blob)).exists() == (i in keep)
    rows = sync_conn.execute("SELECT detail_json FROM audit_log WHERE action = 'evidence.gc'").fetchall()
    assert len(rows) == 3 and sum(json.loads(r[0])["removed"] for r in rows) == 445
