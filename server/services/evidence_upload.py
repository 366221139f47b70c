"""``POST /api/v1/tasks/{id}/evidence`` — the database half (docs/api.md).

The web layer has already authenticated the device, read the multipart form within its caps,
validated the six metadata fields, fully validated the PNG, checked the declared SHA-256 and durably
stored the bytes by content hash (file first, row second: a crash in between leaves at most an
unreferenced file, never a row without its file). :func:`record_upload` is then one write job:

conditional "device still ACTIVE" UPDATE → idempotency lookup of ``upload_key`` (same device + key +
same task/attempt/metadata/bytes → the original asset, ``200``, even if the claim has been closed
since; anything different → ``409 idempotency_conflict``) → for a first write the attempt must be an
OPEN claim held by this device and belong to the URL's task (the composite FK proves it again on
INSERT) → the file must fit the attempt's evidence budget (count and bytes,
:class:`~cmbuyer.server.domain.limits.AttemptBudget`) → the asset row + request record + audit row → ``201``.

:func:`may_upload` is the same ownership check as a read, run *before* the file is stored so a
foreign or closed attempt never leaves a file behind.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cmbuyer.server.clock import to_wire
from cmbuyer.server.db import StorageError
from cmbuyer.server.domain.claims import claim_not_current
from cmbuyer.server.domain.limits import AttemptBudget, attempt_limit_reached
from cmbuyer.server.domain.reports import may_attach
from cmbuyer.server.evidence import files as evidence_files
from cmbuyer.server.store import attempts as attempt_store
from cmbuyer.server.store import evidence as evidence_store
from cmbuyer.server.tx import device_tx
from cmbuyer.server.tx.common import new_id
from cmbuyer.server.tx.idempotency import Stored

ENDPOINT = "evidence"
META_FIELDS = frozenset({"upload_key", "attempt_id", "kind", "privacy_tier", "sha256", "captured_at"})
_MEASURED = frozenset({"width", "height"})  # from the decoded PNG, not part of the idempotency payload


@dataclass(frozen=True)
class Upload:
    """A validated upload: the six metadata fields and what the PNG check measured."""

    task_id: str
    upload_key: str
    attempt_id: str
    kind: str
    privacy_tier: str
    sha256: str
    captured_at: str
    byte_size: int
    width: int
    height: int

    @classmethod
    def from_form(cls, task_id: str, fields: Mapping[str, str], *, byte_size: int, width: int, height: int) -> Upload:
        """The upload of the URL's ``task_id`` from the schema-valid form ``fields`` (the :data:`META_FIELDS`)
        and what the PNG check measured (``byte_size``, ``width``, ``height``). KeyError when a field is missing."""
        return cls(
            task_id=task_id,
            **{name: fields[name] for name in META_FIELDS},
            byte_size=byte_size,
            width=width,
            height=height,
        )

    def payload(self) -> dict[str, Any]:
        """Idempotency comparison form (task, attempt, metadata and the bytes via their hash): every field but
        the PNG's dimensions, which the bytes (their hash and size) already decide."""
        return {name: value for name, value in asdict(self).items() if name not in _MEASURED}


def _replay(stored: Stored) -> Stored:
    # First success is 201; every replay of it is 200 with the same body (docs/api.md
    # "POST /api/v1/tasks/{id}/evidence").
    return Stored(200, stored.body, stored.attempt_id)


def may_upload(conn: sqlite3.Connection, *, device_id: str, upload: Upload, budget: AttemptBudget) -> bool:
    """Read-only pre-check, the same rules in the same order as :func:`record_upload`: True when the
    upload is a replay of this device's key or a first write to an OPEN attempt of the URL's task held
    by this device. A key stored for another device, endpoint or payload raises ``409
    idempotency_conflict`` here already, and a file over the attempt's budget ``409
    attempt_limit_reached``, so such an upload never reaches the disk. The write job checks everything
    again. Run it in one read snapshot (``Database.read(..., snapshot=True)``): with separate reads, an
    original committing between the key lookup and the budget count would get its own retry refused."""
    if device_tx.replay_scoped(conn, device_id, upload.upload_key, ENDPOINT, upload.payload()) is not None:
        return True
    attempt = attempt_store.get(conn, upload.attempt_id)
    if not may_attach(attempt, device_id=device_id, task_id=upload.task_id):
        return False
    _check_budget(conn, upload, budget)
    return True


def _check_budget(conn: sqlite3.Connection, upload: Upload, budget: AttemptBudget) -> None:
    files, size = evidence_store.usage_for_attempt(conn, upload.task_id, upload.attempt_id)
    if not budget.evidence_fits(files, size, upload.byte_size):
        raise attempt_limit_reached()


def record_upload(
    conn: sqlite3.Connection,
    *,
    device_id: str,
    upload: Upload,
    now: datetime,
    budget: AttemptBudget,
    evidence_dir: Path,
) -> Stored:
    """Record the asset; returns 201 (first) or 200 (replay) with the response body.

    Raises DeviceNotActive (→ 401), Conflict ``idempotency_conflict`` / ``claim_not_current`` /
    ``attempt_limit_reached`` (→ 409), StorageError (→ 503) when the stored file is no longer in place
    (removed by ``evidence gc`` between the store and this job: the device retries with the same key).
    """
    req = device_tx.open_write(conn, device_id, key=upload.upload_key, endpoint=ENDPOINT, payload=upload.payload())
    stored = req.replay()
    if stored is not None:
        return _replay(stored)
    attempt = attempt_store.get(conn, upload.attempt_id)
    if attempt is None or not may_attach(attempt, device_id=device_id, task_id=upload.task_id):
        raise claim_not_current()
    _check_budget(conn, upload, budget)  # again under the write lock: uploads may race past may_upload
    if not evidence_files.exists(evidence_dir, upload.sha256):  # evidence gc removes files under this lock
        raise StorageError("evidence file missing")
    at = to_wire(now)
    asset = evidence_store.Asset(
        id=new_id(),
        **asdict(upload),  # every Upload field is the asset column of the same name (attempt_id: the row read above)
        device_id=device_id,
        mime="image/png",
        created_at=at,
    )
    evidence_store.insert(conn, asset)
    body = {
        "asset_id": asset.id,
        "task_id": asset.task_id,
        "attempt_id": asset.attempt_id,
        "kind": asset.kind,
        "privacy_tier": asset.privacy_tier,
        "sha256": asset.sha256,
        "byte_size": asset.byte_size,
        "mime": asset.mime,
        "width": asset.width,
        "height": asset.height,
        "captured_at": asset.captured_at,
    }
    req.audit(
        attempt,
        "evidence.upload",
        at=at,
        subject="attempt",
        detail={"asset_id": asset.id, "kind": asset.kind, "sha256": asset.sha256, "byte_size": asset.byte_size},
    )
    return req.remember(body, at=at, attempt_id=attempt.id, status=201)
