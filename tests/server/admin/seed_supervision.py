"""TEST-ONLY seeding of the device-side rows of supervised first orders (migration 0007): a supervised
attempt (``attempts.supervised`` / ``pack_key``, as claim-next sets them) and an approval request with
its gate-3 screenshot (as ``POST /api/v1/purchase-attempts/{aid}/approval`` stores it).

Why direct SQL: the device routes that write these rows are built by another helper in parallel
(H6 "supsrv") and are not in this branch; the admin side only reads these rows and moves an
approval WAITING → APPROVED/REJECTED, so the tests insert exactly the columns migration 0007 defines.
The readings hash is computed with the real domain function, as the device route does.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from cmbuyer.server.clock import to_wire
from cmbuyer.server.domain.supervision import readings_hash
from cmbuyer.server.tx.common import new_id

from .seed import Seeder, png_bytes

PACK_KEY = "pdd-8.22.0-r1"


@pytest.fixture
def supervised_orders() -> str:
    """N = 3 for the supervision tests: overrides tests/server/conftest.py's fixture of the same name (which
    the shared ``settings`` fixture reads; "0" for the suites that do not test supervision)."""
    return "3"


def readings(**over: Any) -> dict[str, Any]:
    """The 8 readings of a screen that matches the default test task (make_task: 黑色CHA(纯棉) /
    M(建议100-115) × 2, cap ¥30.00): 12.88 at every gate, total 25.76, paid by 微信支付."""
    values: dict[str, Any] = {
        "selected_options": [["颜色", "黑色CHA(纯棉)"], ["尺码", "M(建议100-115)"]],
        "gate1_unit_price": "12.88",
        "gate2_unit_price": "12.88",
        "gate3_unit_price": "12.88",
        "quantity_read": 2,
        "confirm_page_amount": "25.76",
        "payment_mode": "微信支付",
    }
    values.update(over)
    return values


def supervised_claim(
    seed: Seeder, task_id: str, device_id: str, *, pack_key: str = PACK_KEY, ordering: bool = True
) -> str:
    """An OPEN attempt claimed under supervision for ``(device_id, pack_key)``; returns its id."""
    attempt_id = seed.claim(task_id, device_id, ordering=ordering)
    seed._tx(
        lambda c: c.execute("UPDATE attempts SET supervised = 1, pack_key = ? WHERE id = ?", (pack_key, attempt_id))
    )
    return attempt_id


def approval(
    seed: Seeder,
    task_id: str,
    attempt_id: str,
    device_id: str,
    *,
    values: dict[str, Any] | None = None,
    state: str = "WAITING",
    raw_readings: str | None = None,
) -> tuple[str, str]:
    """An approval request with a CONFIRM_PAGE_GATE_3 screenshot; returns ``(approval_id, asset_id)``.
    ``raw_readings`` stores that text instead of the JSON of ``values`` (an unreadable record)."""
    values = values if values is not None else readings()
    asset_id = seed.evidence(
        task_id, attempt_id, device_id, data=png_bytes((30, 120, 200), (180, 320)), kind="CONFIRM_PAGE_GATE_3"
    )
    approval_id = new_id()
    now = to_wire(seed.clock.now())
    decided = ("admin:someone", now) if state in ("APPROVED", "REJECTED") else (None, None)
    seed._tx(
        lambda c: c.execute(
            "INSERT INTO approval_requests (id, attempt_id, task_id, device_id, approval_key, readings_json,"
            " readings_hash, screenshot_asset_id, state, decided_by, decided_at, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                approval_id,
                attempt_id,
                task_id,
                device_id,
                new_id(),
                raw_readings if raw_readings is not None else json.dumps(values, ensure_ascii=False),
                readings_hash(readings()) if raw_readings is not None else readings_hash(values),
                asset_id,
                state,
                *decided,
                now,
            ),
        )
    )
    return approval_id, asset_id


def pair(seed: Seeder, device_id: str, pack_key: str = PACK_KEY) -> Any:
    """The supervision_pairs row of a pair (or None)."""
    return seed.row(
        "SELECT confirmed_orders, held, held_reason FROM supervision_pairs WHERE device_id = ? AND pack_key = ?",
        device_id,
        pack_key,
    )


def set_pair(
    seed: Seeder, device_id: str, confirmed: int, *, pack_key: str = PACK_KEY, held_reason: str | None = None
) -> None:
    """Insert/overwrite a pair row directly (what earlier verdicts would have left)."""
    seed._tx(
        lambda c: c.execute(
            "INSERT OR REPLACE INTO supervision_pairs"
            " (device_id, pack_key, confirmed_orders, held, held_reason, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (device_id, pack_key, confirmed, 1 if held_reason else 0, held_reason, to_wire(seed.clock.now())),
        )
    )
