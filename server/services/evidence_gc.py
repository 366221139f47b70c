"""``cmbuyer-server evidence gc``: remove evidence files that no asset row refers to.

Such files exist because an upload stores its PNG *before* its write job inserts the row (so a row never
points at a missing file): a crash in between, or a write job that refuses the upload after its file was
stored (two uploads racing past the budget pre-check, a revocation in between), leaves the file behind.
Temporary files of a write interrupted by a crash (``.tmp-*.png``) are removed too.

Why this never removes a file a row needs:

- only files older than the grace period are candidates (default one day; an upload's file is written
  moments before its write job, and storing existing bytes renews the file's age);
- candidates are re-checked and removed in chunks, each inside a write transaction (``BEGIN
  IMMEDIATE``; the check uses the ``evidence_sha256`` index, so the lock is held briefly). The upload's
  write job needs the same lock and first checks that its file is still in place
  (``record_upload`` in ``services/evidence_upload.py``). Either its row committed first — then
  the file is referenced and kept — or the file was removed first — then the upload answers 503 and
  writes nothing, and the agent's retry with the same key stores the file again;
- asset rows and device screenshots (device_screens) are never deleted, so a referenced file stays referenced;
- the scan never follows a symlink (file or directory) and ignores anything outside the
  ``ab/cd/<sha256>.png`` layout (:func:`cmbuyer.server.evidence.files.scan`).

Each transaction that removed files also writes one audit row (actor ``cli``, action ``evidence.gc``)
with what it removed. If the lock cannot be had (another process holds it past the busy timeout) the
run stops with StorageError before removing anything in that chunk. A dry run only reads.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from cmbuyer.server.db import run_in_transaction
from cmbuyer.server.evidence import files
from cmbuyer.server.evidence.files import StoredFile
from cmbuyer.server.store import device_screens
from cmbuyer.server.store import evidence as evidence_store
from cmbuyer.server.tx import audit as audit_tx
from cmbuyer.server.tx.common import Actor

CHUNK = 200  # files re-checked and removed per write transaction: bounds how long the server's writer waits


@dataclass
class GcReport:
    """What one run found and did. Counts are files; ``bytes_freed`` is bytes (what a dry run would free)."""

    scanned: int = 0
    referenced: int = 0
    too_young: int = 0
    removed: int = 0
    removed_temporary: int = 0
    bytes_freed: int = 0
    dry_run: bool = False

    def as_dict(self) -> dict[str, int | bool]:
        """The report as a flat JSON-able dict (CLI ``--json``)."""
        return asdict(self)


def collect(
    conn: sqlite3.Connection, evidence_dir: Path, *, now: float, older_than: int, dry_run: bool, actor: Actor, at: str
) -> GcReport:
    """Remove unreferenced evidence files older than ``older_than`` seconds (``now``: seconds since the
    epoch, UTC, compared with file modification times). ``conn`` is an autocommit connection (the CLI's);
    each chunk gets its own write transaction. ``dry_run`` changes nothing and reports what would go.
    ``at`` is the wire timestamp of the audit rows.

    Raises StorageError (the lock was not obtained within the busy timeout: that chunk removed nothing)
    or OSError (a file could not be read or removed; what an earlier chunk removed stays removed and
    audited).
    """
    report = GcReport(dry_run=dry_run)
    cutoff = now - older_than
    stored: list[StoredFile] = []
    stale_temporary: list[StoredFile] = []
    for found in files.scan(evidence_dir):
        report.scanned += 1
        if found.mtime > cutoff:
            report.too_young += 1
        elif found.sha256 is None:
            stale_temporary.append(found)
        else:
            stored.append(found)

    def run(job: Callable[[sqlite3.Connection], None]) -> None:
        if dry_run:
            job(conn)  # reads only: no lock needed
        else:
            run_in_transaction(conn, job)

    for start in range(0, len(stored), CHUNK):
        chunk = stored[start : start + CHUNK]

        def unreferenced(c: sqlite3.Connection, chunk: list[StoredFile] = chunk) -> None:
            doomed = _unreferenced(c, chunk, cutoff, report)
            report.removed += _remove(c, doomed, dry_run, report, actor, at, kind="unreferenced")

        run(unreferenced)
    if stale_temporary:

        def temporary(c: sqlite3.Connection) -> None:
            report.removed_temporary += _remove(c, stale_temporary, dry_run, report, actor, at, kind="temporary")

        run(temporary)
    return report


def _unreferenced(
    conn: sqlite3.Connection, chunk: list[StoredFile], cutoff: float, report: GcReport
) -> list[StoredFile]:
    """The chunk's files no row refers to and that were not written again since the scan."""
    hashes = [f.sha256 for f in chunk if f.sha256 is not None]
    # task evidence and the phones' screenshots for 查看当前屏幕 (device_screens) share the store
    kept = evidence_store.referenced(conn, hashes) | device_screens.referenced(conn, hashes)
    doomed: list[StoredFile] = []
    for found in chunk:
        if found.sha256 in kept:
            report.referenced += 1
            continue
        try:
            fresh = found.path.stat().st_mtime > cutoff
        except FileNotFoundError:
            continue
        if fresh:  # stored again since the scan: an upload may be about to insert its row
            report.too_young += 1
            continue
        doomed.append(found)
    return doomed


def _remove(
    conn: sqlite3.Connection,
    doomed: list[StoredFile],
    dry_run: bool,
    report: GcReport,
    actor: Actor,
    at: str,
    *,
    kind: str,
) -> int:
    """Remove ``doomed`` (inside the caller's write transaction) and audit it; a dry run only counts."""
    if dry_run:
        report.bytes_freed += sum(f.size for f in doomed)
        return len(doomed)
    gone = set(files.remove([f.path for f in doomed]))
    freed = sum(f.size for f in doomed if f.path in gone)
    report.bytes_freed += freed
    if gone:
        audit_tx.record(
            conn, actor, "evidence.gc", "evidence", kind, at=at, detail={"removed": len(gone), "bytes_freed": freed}
        )
    return len(gone)
