"""record_verdict must refuse a verdict word other than RIGHT/WRONG at the service boundary (before:
anything not "RIGHT" was taken as WRONG and held the device–pack pair)."""

from __future__ import annotations

from typing import Any

import pytest

from cmbuyer.server.domain.errors import ValidationFailed
from cmbuyer.server.services import supervision_admin as service
from tests.server.admin.test_supervision_service import OPS, _supervised_order, fingerprint, tx


@pytest.mark.parametrize("verdict", ["right", "wrong", "", "HOLD", None, "RIGHT "])
def test_unknown_verdict_word_changes_nothing(
    verdict: Any, make_task: Any, make_device: Any, seed: Any, sync_conn: Any, clock: Any
) -> None:
    device = make_device().device_id
    _, sid = _supervised_order(make_task, seed, device)
    snap = fingerprint(sync_conn)
    with pytest.raises(ValidationFailed):
        tx(sync_conn, lambda c: service.record_verdict(c, sid, verdict, None, OPS, clock.now()))
    assert fingerprint(sync_conn) == snap
