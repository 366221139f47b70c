"""Device API request bodies as plain data, for tests that check the schemas rather than a live claim
(``tests/server/submissions/helpers.py`` fills the same bodies with a real claim's fields)."""

from __future__ import annotations

import uuid
from typing import Any


def fence_request(**over: Any) -> dict[str, Any]:
    """A valid ``submission_fence.request`` body with fresh ids: two at 12.88 read on every gate."""
    return {
        "fence_key": str(uuid.uuid4()),
        "task_id": str(uuid.uuid4()),
        "expected_task_version": 2,
        "authorization_id": str(uuid.uuid4()),
        "claim_generation": 1,
        "claim_token": "a" * 64,
        "selected_color": "黑色",
        "selected_size": "M",
        "gate1_unit_price": "12.88",
        "gate2_unit_price": "12.88",
        "gate3_unit_price": "12.88",
        "quantity_read": 2,
        "confirm_page_amount": "25.76",
        "submit_control_match_count": 1,
        "payment_mode": "微信支付",
        **over,
    }
