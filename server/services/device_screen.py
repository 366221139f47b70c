"""``POST /api/v1/devices/screen`` — the database half (docs/api.md "Holds and screens").

The web layer has authenticated the device, read the multipart form, fully validated the PNG (the evidence
rules), checked the declared SHA-256 and stored the bytes in the evidence store. :func:`record_screen` is
one write job: the device-ACTIVE opening, then the answer to the device's pending 查看当前屏幕 request
(:func:`cmbuyer.server.tx.screens.record_answer`): ``201`` for the first answer, ``200`` with the same body
for a retry of it, ``409 invalid_state`` for a request that is not pending.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

from cmbuyer.server.clock import to_wire
from cmbuyer.server.db import StorageError
from cmbuyer.server.evidence import files as evidence_files
from cmbuyer.server.tx import device_tx
from cmbuyer.server.tx import screens as screens_tx


def record_screen(
    conn: sqlite3.Connection,
    *,
    device_id: str,
    request_id: str,
    image: screens_tx.Image,
    now: datetime,
    evidence_dir: Path,
) -> tuple[int, dict[str, Any]]:
    """Store the screenshot answer; returns ``(status, body)``. Raises DeviceNotActive (→ 401),
    InvalidTransition (→ 409), StorageError (→ 503) when the file left the store (evidence gc) meanwhile."""
    device_tx.begin(conn, device_id)
    if not evidence_files.exists(evidence_dir, image.sha256):
        raise StorageError("screen file missing")
    screen, first = screens_tx.record_answer(conn, device_id, request_id, image=image, package=None, at=to_wire(now))
    body = {"screen_id": screen.id, "request_id": request_id, "sha256": image.sha256, "captured_at": screen.created_at}
    return (201 if first else 200), body
