"""TEST-ONLY seeding of the rows the device API produces (attempts/claims, order submissions, step
events, evidence assets and their PNG files).

The admin pages only read these rows (and the admin use-cases close/reconcile them), so the tests
insert them directly with SQL that follows migrations/0002 exactly, instead of driving a phone
through the device API. Every helper also moves the task/authorization to the state the device API
would have left them in, bumping the task version the same way.
"""

from __future__ import annotations

import hashlib
import io
import json
import secrets
import sqlite3
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from PIL import Image

from cmbuyer.server.clock import ManualClock, to_wire
from cmbuyer.server.db import run_in_transaction
from cmbuyer.server.tx.common import new_id


def png_bytes(color: tuple[int, int, int] = (200, 30, 30), size: tuple[int, int] = (24, 48)) -> bytes:
    """A small valid PNG."""
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="PNG")
    return out.getvalue()


@dataclass
class Seeder:
    """Inserts device-side rows with plain SQL inside one transaction per call."""

    conn: sqlite3.Connection
    clock: ManualClock
    settings: Any

    def _tx(self, fn: Any) -> Any:
        return run_in_transaction(self.conn, fn)

    def _move_task(self, c: sqlite3.Connection, task_id: str, state: str) -> None:
        c.execute(
            "UPDATE tasks SET state = ?, version = version + 1, updated_at = ? WHERE id = ?",
            (state, to_wire(self.clock.now()), task_id),
        )

    def claim(self, task_id: str, device_id: str, *, lease_s: int = 120, ordering: bool = False) -> str:
        """PENDING → CLAIMED (or ORDERING): an OPEN attempt on the live authorization; returns its id."""
        attempt_id = new_id()

        def job(c: sqlite3.Connection) -> None:
            auth = c.execute(
                "SELECT id FROM authorizations WHERE task_id = ? AND state = 'ACTIVE'", (task_id,)
            ).fetchone()
            assert auth is not None, "task has no ACTIVE authorization"
            version = c.execute("SELECT version FROM tasks WHERE id = ?", (task_id,)).fetchone()[0]
            now = self.clock.now()
            c.execute(
                "INSERT INTO attempts (id, task_id, authorization_id, device_id, session_id, claim_generation, nonce,"
                " token_hash, claimed_task_version, lease_expires_at, state, response_json, created_at)"
                " VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?, ?, 'OPEN', '{}', ?)",
                (
                    attempt_id,
                    task_id,
                    auth[0],
                    device_id,
                    new_id(),
                    secrets.token_bytes(32),
                    secrets.token_bytes(32),
                    version + 1,
                    to_wire(now + timedelta(seconds=lease_s)),
                    to_wire(now),
                ),
            )
            c.execute("UPDATE authorizations SET state = 'CLAIMED' WHERE id = ?", (auth[0],))
            self._move_task(c, task_id, "CLAIMED")
            if ordering:
                self._move_task(c, task_id, "ORDERING")

        self._tx(job)
        return attempt_id

    def events(self, task_id: str, attempt_id: str, items: list[tuple[str, str, str | None, str]]) -> None:
        """Append step events ``(step, outcome, reason_code, summary)``."""

        def job(c: sqlite3.Connection) -> None:
            now = to_wire(self.clock.now())
            seq = c.execute("SELECT coalesce(max(seq), 0) FROM events WHERE attempt_id = ?", (attempt_id,)).fetchone()[
                0
            ]
            for i, (step, outcome, reason, summary) in enumerate(items, seq + 1):
                c.execute(
                    "INSERT INTO events (task_id, attempt_id, seq, batch_key, step, outcome, reason_code,"
                    " summary, occurred_at, received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (task_id, attempt_id, i, new_id(), step, outcome, reason, summary, now, now),
                )

        self._tx(job)

    def evidence(
        self,
        task_id: str,
        attempt_id: str,
        device_id: str,
        data: bytes | None = None,
        kind: str = "SKU_PANEL_GATE_1",
        write_file: bool = True,
    ) -> str:
        """Store a PNG the way the device API does (``evidence_dir/ab/cd/<sha>.png``) plus its row."""
        data = data if data is not None else png_bytes()
        sha = hashlib.sha256(data).hexdigest()
        if write_file:
            path = self.settings.evidence_dir / sha[:2] / sha[2:4] / f"{sha}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        asset_id = new_id()
        now = to_wire(self.clock.now())
        self._tx(
            lambda c: c.execute(
                "INSERT INTO evidence_assets (id, task_id, attempt_id, device_id, upload_key, kind, privacy_tier,"
                " sha256,"
                " byte_size, mime, width, height, captured_at, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, 'INTERNAL_RAW', ?, ?, 'image/png', 24, 48, ?, ?)",
                (asset_id, task_id, attempt_id, device_id, new_id(), kind, sha, len(data), now, now),
            )
        )
        return asset_id

    def fence(
        self,
        task_id: str,
        attempt_id: str,
        device_id: str,
        *,
        observation: str | None = None,
        order_sn: str | None = None,
        observation_reason: str | None = None,
    ) -> str:
        """ORDERING/CLAIMED → SUBMITTING with a FENCED submission; with ``observation`` also the result
        (SUBMITTED → WAITING_PAYMENT; anything else → RECONCILIATION_REQUIRED) and the report's optional
        ``order_sn`` / ``observation_reason``. Returns the submission id."""
        sid = new_id()

        def job(c: sqlite3.Connection) -> None:
            auth_id = c.execute("SELECT authorization_id FROM attempts WHERE id = ?", (attempt_id,)).fetchone()[0]
            now = to_wire(self.clock.now())
            c.execute(
                "INSERT INTO order_submissions (id, task_id, authorization_id, attempt_id, device_id, fence_key, state,"
                " selected_options, gate1_unit_price, gate2_unit_price, gate3_unit_price, quantity_read,"
                " confirm_page_amount, submit_control_match_count, payment_mode, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, 'FENCED',"
                " json_array(json_array('颜色', '黑色'), json_array('尺码', 'M')), '12.88', '12.88', '12.88',"
                " 2, '25.76', 1,"
                " '微信支付', ?)",
                (sid, task_id, auth_id, attempt_id, device_id, new_id(), now),
            )
            c.execute("UPDATE authorizations SET state = 'FENCED' WHERE id = ?", (auth_id,))
            self._move_task(c, task_id, "SUBMITTING")
            if observation is not None:
                ok = observation == "SUBMITTED"
                c.execute(
                    "UPDATE order_submissions SET state = ?, observation = ?, result_key = ?, result_at = ?,"
                    " order_sn = ?, observation_reason = ? WHERE id = ?",
                    (
                        "SUBMITTED" if ok else "RECONCILIATION_REQUIRED",
                        observation,
                        new_id(),
                        now,
                        order_sn,
                        observation_reason,
                        sid,
                    ),
                )
                c.execute(
                    "UPDATE authorizations SET state = 'CONSUMED', closed_at = ?, close_reason = 'RESULT' WHERE id = ?",
                    (now, auth_id),
                )
                c.execute(
                    "UPDATE attempts SET state = 'CLOSED', close_reason = 'REPORTED', closed_at = ? WHERE id = ?",
                    (now, attempt_id),
                )
                self._move_task(c, task_id, "WAITING_PAYMENT" if ok else "RECONCILIATION_REQUIRED")

        self._tx(job)
        return sid

    def fail(self, task_id: str, attempt_id: str) -> None:
        """A device failure before the fence: attempt CLOSED(FAILED), authorization CLOSED, task FAILED."""

        def job(c: sqlite3.Connection) -> None:
            now = to_wire(self.clock.now())
            c.execute(
                "UPDATE attempts SET state = 'CLOSED', close_reason = 'FAILED', closed_at = ? WHERE id = ?",
                (now, attempt_id),
            )
            c.execute(
                "UPDATE authorizations SET state = 'CLOSED', closed_at = ?, close_reason = 'FAILED'"
                " WHERE task_id = ? AND state IN ('ACTIVE', 'CLAIMED')",
                (now, task_id),
            )
            self._move_task(c, task_id, "FAILED")

        self._tx(job)

    def row(self, sql: str, *args: Any) -> Any:
        """One row of a read query (for assertions)."""
        return self.conn.execute(sql, args).fetchone()

    def detail_json(self, value: str) -> Any:
        """Decode an audit detail_json value."""
        return json.loads(value)
