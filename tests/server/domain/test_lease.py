"""Pure lease arithmetic (server/domain/lease.py): exclusive boundaries, cap at the authorization."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cmbuyer.server.clock import to_wire
from cmbuyer.server.domain import lease

NOW = datetime(2026, 8, 4, 9, 0, tzinfo=UTC)


def test_boundaries_are_exclusive() -> None:
    assert not lease.is_live(to_wire(NOW), NOW)
    assert lease.is_live(to_wire(NOW + timedelta(microseconds=1)), NOW)
    assert not lease.heartbeat_fresh(None, NOW, 10, 3)
    assert not lease.heartbeat_fresh(to_wire(NOW - timedelta(seconds=30)), NOW, 10, 3)
    assert lease.heartbeat_fresh(to_wire(NOW - timedelta(seconds=30) + timedelta(microseconds=1)), NOW, 10, 3)
    with pytest.raises(ValueError):
        lease.new_expiry(NOW, 0, to_wire(NOW))


@pytest.mark.serial  # Hypothesis' default 200 ms deadline per example
@given(st.integers(1, 86400), st.integers(-(10**7), 10**10))
def test_new_expiry_is_the_minimum(ttl: int, offset_us: int) -> None:
    auth = to_wire(NOW + timedelta(microseconds=offset_us))
    end = lease.new_expiry(NOW, ttl, auth)
    assert end <= NOW + timedelta(seconds=ttl) and to_wire(end) <= auth
    assert end in (NOW + timedelta(seconds=ttl), datetime.fromisoformat(auth.replace("Z", "+00:00")))
