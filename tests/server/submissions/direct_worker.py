"""Worker for the multi-process fence test without HTTP: each OS process opens its own connection to
the same SQLite file and runs the real fence job in its own BEGIN IMMEDIATE transactions."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from cmbuyer.server.clock import SystemClock
from cmbuyer.server.config import DEFAULT_PAYMENT_MODES
from cmbuyer.server.db import StorageError, connect_sync, run_in_transaction
from cmbuyer.server.domain.errors import DomainError
from cmbuyer.server.services.fence import create_fence


def fence_many(
    db_path: str, device_id: str, attempt_id: str, body: dict[str, Any], count: int, fresh_keys: bool, start_at: float
) -> list[tuple[bool, str]]:
    conn = connect_sync(Path(db_path))
    out: list[tuple[bool, str]] = []
    while time.time() < start_at:
        time.sleep(0.001)
    try:
        for _ in range(count):
            b = dict(body, fence_key=str(uuid.uuid4())) if fresh_keys else body
            try:
                answer = run_in_transaction(
                    conn,
                    lambda c, b=b: create_fence(  # type: ignore[misc]
                        c,
                        device_id=device_id,
                        attempt_id=attempt_id,
                        body=b,
                        now=SystemClock().now(),
                        allowed_payment_modes=DEFAULT_PAYMENT_MODES,
                    ),
                )
                out.append((answer.permit, answer.body))
            except DomainError as exc:
                out.append((False, exc.code))
            except StorageError:
                out.append((False, "storage"))
    finally:
        conn.close()
    return out
