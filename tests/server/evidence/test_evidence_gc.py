"""``cmbuyer-server evidence gc``: removes old evidence files that no asset row refers to (and stale
temporary files), keeps everything else, and an upload whose file vanished before its row gets 503
and writes nothing (services/evidence_gc.py explains why the two cannot lose a referenced file)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.server.cli import main as cli_main
from cmbuyer.server.clock import ManualClock
from cmbuyer.server.config import Settings
from cmbuyer.server.db import StorageError, run_in_transaction
from cmbuyer.server.domain.limits import AttemptBudget
from cmbuyer.server.evidence import files
from cmbuyer.server.services import evidence_upload
from tests.server.evidence.conftest import EvidenceGc, Uploader
from tests.server.evidence.pngs import padded_to
from tests.server.submissions.helpers import (
    Claim,
    age_file,
    direct_upload,
    evidence_fields,
    fingerprint,
    multipart,
    upload,
)

DAY = 86400
BUDGET = AttemptBudget(events=1000, evidence_files=32, evidence_bytes=128 << 20)


async def test_gc_removes_only_old_unreferenced_files(
    upload_referenced: Uploader, settings: Settings, sync_conn: sqlite3.Connection, gc: EvidenceGc
) -> None:
    referenced = padded_to(300)
    kept_path = await upload_referenced(referenced)
    age_file(kept_path, 30 * DAY)  # old, but a row refers to it
    orphan, young = padded_to(301), padded_to(302)
    orphan_path = files.store(settings.evidence_dir, hashlib.sha256(orphan).hexdigest(), orphan)
    young_path = files.store(settings.evidence_dir, hashlib.sha256(young).hexdigest(), young)
    age_file(orphan_path, 2 * DAY)
    stale_tmp = orphan_path.parent / ".tmp-crashed.png"
    stale_tmp.write_bytes(b"half a file")
    age_file(stale_tmp, 2 * DAY)
    fresh_tmp = young_path.parent / ".tmp-writing.png"
    fresh_tmp.write_bytes(b"being written")
    strangers = [settings.evidence_dir / "README.txt", orphan_path.parent / "not-a-hash.png"]
    for p in strangers:
        p.write_bytes(b"x")
        age_file(p, 9 * DAY)

    dry = gc.ok("--dry-run")
    assert (dry["removed"], dry["removed_temporary"], dry["dry_run"]) == (1, 1, True)
    assert orphan_path.exists() and stale_tmp.exists()

    audit_before = sync_conn.execute("SELECT max(id) FROM audit_log").fetchone()[0]
    report = gc.ok()
    assert report == {
        "scanned": 5,
        "referenced": 1,
        "too_young": 2,
        "removed": 1,
        "removed_temporary": 1,
        "bytes_freed": len(orphan) + len(b"half a file"),
        "dry_run": False,
    }
    assert not orphan_path.exists() and not stale_tmp.exists()
    assert kept_path.read_bytes() == referenced and young_path.exists() and fresh_tmp.exists()
    assert all(p.exists() for p in strangers)
    rows = sync_conn.execute(
        "SELECT actor_kind, action, subject_id, detail_json FROM audit_log WHERE id > ? ORDER BY id", (audit_before,)
    ).fetchall()
    assert [(r[0], r[1], r[2], json.loads(r[3])["removed"]) for r in rows] == [
        ("cli", "evidence.gc", "unreferenced", 1),
        ("cli", "evidence.gc", "temporary", 1),
    ]

    # nothing left to do: a second run removes nothing and writes no audit row
    again = gc.ok()
    assert (again["removed"], again["removed_temporary"]) == (0, 0)
    assert sync_conn.execute("SELECT max(id) FROM audit_log").fetchone()[0] == audit_before + 2

    # the same bytes uploaded again are stored again
    assert await upload_referenced(orphan) == orphan_path
    assert orphan_path.read_bytes() == orphan


async def test_upload_whose_file_vanished_gets_503_and_writes_nothing(
    claimed: Claim, settings: Settings, sync_conn: sqlite3.Connection
) -> None:
    data = padded_to(310)
    sha = hashlib.sha256(data).hexdigest()
    up = direct_upload(claimed, data)

    def record() -> Any:
        return run_in_transaction(
            sync_conn,
            lambda c: evidence_upload.record_upload(
                c,
                device_id=claimed.device.device_id,
                upload=up,
                now=ManualClock().now(),
                budget=BUDGET,
                evidence_dir=settings.evidence_dir,
            ),
        )

    before = fingerprint(sync_conn)
    with pytest.raises(StorageError):
        record()
    assert fingerprint(sync_conn) == before
    files.store(settings.evidence_dir, sha, data)
    stored = record()
    assert stored.status == 201


def test_storing_existing_content_renews_itsage_file(tmp_path: Path) -> None:
    data = padded_to(320)
    sha = hashlib.sha256(data).hexdigest()
    path = files.store(tmp_path, sha, data)
    age_file(path, 5 * DAY)
    assert files.store(tmp_path, sha, data) == path
    assert time.time() - path.stat().st_mtime < 60  # gc now counts it as just written


@pytest.mark.parametrize("value", ["-1", "1.5", "x", "１２"])
def test_bad_older_than_is_a_usage_error(settings: Settings, value: str) -> None:
    with pytest.raises(SystemExit) as exc:
        cli_main(["--data-dir", str(settings.data_dir), "evidence", "gc", "--older-than", value])
    assert exc.value.code == 2


async def test_gc_racing_uploads_of_the_same_bytes_never_leaves_a_row_without_its_file(
    server_client: Any,
    claimed: Claim,
    settings: Settings,
    sync_conn: sqlite3.Connection,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each round: an old orphan file, then an upload of exactly those bytes and a gc run at once. Whatever
    the order, a 201 means the file is in place, a 503 wrote nothing — and every row's file exists."""
    import asyncio

    for i in range(12):
        data = padded_to(400 + i)
        sha = hashlib.sha256(data).hexdigest()
        age_file(files.store(settings.evidence_dir, sha, data), 2 * DAY)
        body, ctype = multipart(evidence_fields(claimed, data), data)
        (status, _), _ = await asyncio.gather(
            upload(server_client, claimed.device, claimed.task_id, body, ctype),
            asyncio.to_thread(cli_main, ["--data-dir", str(settings.data_dir), "evidence", "gc", "--json"]),
        )
        rows = sync_conn.execute("SELECT count(*) FROM evidence_assets WHERE sha256 = ?", (sha,)).fetchone()[0]
        assert (status, rows) in ((201, 1), (503, 0))
        for (stored_sha,) in sync_conn.execute("SELECT sha256 FROM evidence_assets"):
            assert files.exists(settings.evidence_dir, stored_sha)
    capsys.readouterr()
