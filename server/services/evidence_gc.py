"""``cmbuyer-server evidence gc``: remove evidence files that no asset row refers to.

Such files exist because an upload stores its PNG *before* its write job inserts the row (so a row never
points at a missing file): a crash in between, or a write job that refuses the upload after its file was
stored (two uploads racing past the budget pre-check, a revocation in between), leaves the file behind.
Temporary files of a write interrupted by a crash (``.tmp-*.png``) are removed too.

Why this never removes a file a row needs:

- only files older than the grace period are candidates (default one day; an upload's file is written
  moments before its write job);
- candidates are re-checked and removed in chunks, each inside a write transaction (``BEGIN
  IMMEDIATE``). The upload's write job needs the same lock and first checks that its file is still in
  place (:func:`cmbuyer.server.services.evidence_upload.record_upload`). Either its row committed first —
  then the file is referenced and kept — or the file was removed first — then the upload answers 503
  and writes nothing, and the agent's retry with the same key stores the file again;
- asset rows are never deleted, so a referenced file stays referenced.

One audit row (actor ``cli``, action ``evidence.gc``) records what a real run removed.
"""

from __future__ import annotations

import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path

from cmbuyer.server.db import run_in_transaction
from cmbuyer.server.evidence import files
from cmbuyer.server.evidence.files import StoredFile
from cmbuyer.server.services.common import Actor
from cmbuyer.server.store import audit
from cmbuyer.server.store import evidence as evidence_store

CHUNK = 200  # files re-checked and removed per write transaction: the server's writer waits at most that long


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


def collect(conn: sqlite3.Connection, evidence_dir: Path, *, now: float, older_than: int, dry_run: bool,
            actor: Actor, at: str) -> GcReport:
    """Remove unreferenced evidence files older than ``older_than`` seconds (``now``: seconds since the
    epoch, UTC, compared with file modification times). ``conn`` is an autocommit connection (the CLI's);
    each chunk gets its own write transaction. ``dry_run`` changes nothing and reports what would go.
    ``at`` is the wire timestamp of the audit row. Raises StorageError (lock not obtained within the busy
    timeout) or OSError (a file could not be removed; what was removed before stays removed and audited
    only when the run completes).
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
    for start in range(0, len(stored), CHUNK):
        chunk = stored[start:start + CHUNK]

        def job(c: sqlite3.Connection, chunk: list[StoredFile] = chunk) -> None:
            _collect_chunk(c, chunk, cutoff, dry_run, report)

        run_in_transaction(conn, job)
    report.removed_temporary = len(stale_temporary)
    report.bytes_freed += sum(f.size for f in stale_temporary)
    if not dry_run:
        files.remove([f.path for f in stale_temporary])
        if report.removed or report.removed_temporary:
            run_in_transaction(conn, lambda c: audit.append(
                c, at=at, actor_kind=actor.kind, actor_id=actor.id, action="evidence.gc", subject_kind="evidence",
                subject_id="unreferenced", detail={"removed": report.removed,
                                                   "removed_temporary": report.removed_temporary,
                                                   "bytes_freed": report.bytes_freed}))
    return report


def _collect_chunk(conn: sqlite3.Connection, chunk: list[StoredFile], cutoff: float, dry_run: bool,
                   report: GcReport) -> None:
    """Inside the write transaction: keep what a row refers to (or what was rewritten since the scan),
    remove the rest."""
    kept = evidence_store.referenced(conn, [f.sha256 for f in chunk if f.sha256 is not None])
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
    report.bytes_freed += sum(f.size for f in doomed)
    report.removed += len(doomed) if dry_run else files.remove([f.path for f in doomed])
