"""server/domain/supervision.py: the pair rule, the pack key, the readings hash and the approval machine."""

from __future__ import annotations

import pytest

from cmbuyer.server.domain.errors import InvalidTransition, ValidationFailed
from cmbuyer.server.domain.supervision import (
    ApprovalNotWaiting,
    ApprovalState,
    SupervisionPolicy,
    approval_counts,
    blocks_claims,
    canonical_readings,
    decide,
    is_supervised,
    pack_key_for,
    readings_hash,
    void,
)

READINGS = {
    "selected_options": [["颜色", "红色"], ["尺码", "XL"]],
    "gate1_unit_price": "12.80",
    "gate2_unit_price": "12.80",
    "gate3_unit_price": "12.80",
    "quantity_read": 2,
    "confirm_page_amount": "25.60",
    "payment_mode": "微信支付",
}


def test_policy_and_is_supervised() -> None:
    off, three = SupervisionPolicy(0), SupervisionPolicy(3)
    assert not off.enabled and three.enabled
    assert not is_supervised(off, 0, False)
    assert not is_supervised(off, 0, True)
    assert is_supervised(three, 0, False) and is_supervised(three, 2, False)
    assert not is_supervised(three, 3, False) and not is_supervised(three, 7, False)
    assert is_supervised(three, 3, True)
    assert not is_supervised(three, 0, False, device_off=True) and not is_supervised(three, 0, True, device_off=True)
    assert blocks_claims(True) and not blocks_claims(False)
    for bad in (-1, True, 1.0):
        with pytest.raises(ValueError):
            SupervisionPolicy(bad)  # type: ignore[arg-type]


def test_pack_key_order() -> None:
    assert pack_key_for("pdd-8.22.0-op", "pdd-8.22.0", "8.22.0", 82200) == "pdd-8.22.0-op"
    assert pack_key_for(None, "pdd-8.22.0", "8.22.0", 82200) == "pdd-8.22.0"
    assert pack_key_for(None, None, "8.22.0", 82200) == "app:8.22.0:82200"
    assert pack_key_for("NO_PACK", "NO_PACK", "8.22.0", 82200) == "app:8.22.0:82200"
    assert pack_key_for(None, "Not A Pack", "8.22.0", None) == "app:8.22.0:-"
    with pytest.raises(ValueError):
        pack_key_for(None, None, None, None)
    with pytest.raises(ValueError):
        pack_key_for(None, None, "8" * 80, 1)


def test_canonical_readings_follow_the_fence_normalization() -> None:
    wide = {
        **READINGS,
        "selected_options": [[" 颜色", " 红色 "], ["尺码", "ＸＬ"]],
        "payment_mode": "微信支付\u3000",
        "fence_key": "ignored",
        "submit_control_match_count": 1,
    }
    assert canonical_readings(wide) == READINGS
    assert readings_hash(wide) == readings_hash(READINGS)
    assert len(readings_hash(READINGS)) == 64
    # an agent that knows only colour/size reports colour/size: the same readings, the same hash
    old = {k: v for k, v in wide.items() if k != "selected_options"} | {"selected_color": "红色", "selected_size": "XL"}
    assert canonical_readings(old) == READINGS
    one = canonical_readings({**old, "selected_size": None})["selected_options"]
    assert one == [["颜色", "红色"]]
    for key, other in (
        ("gate3_unit_price", "12.81"),
        ("quantity_read", 3),
        ("selected_options", [["颜色", "红色"]]),
        ("selected_options", [["颜色分类", "红色"], ["尺码", "XL"]]),
        ("payment_mode", "支付宝"),
        ("confirm_page_amount", "25.59"),
        ("selected_options", [["颜色", "蓝色"], ["尺码", "XL"]]),
    ):
        assert readings_hash({**READINGS, key: other}) != readings_hash(READINGS), key


@pytest.mark.parametrize(
    "key,value",
    [
        ("selected_options", None),
        ("selected_options", []),
        ("selected_options", [["颜色", " "]]),
        ("selected_options", [["颜色", 3]]),
        ("selected_options", [["颜色", "红色"], ["颜色", "红色"]]),
        ("selected_options", [["颜色", "红色", "x"]]),
        ("gate1_unit_price", "12.8"),
        ("gate2_unit_price", 12.8),
        ("confirm_page_amount", "012.80"),
        ("quantity_read", True),
        ("quantity_read", "2"),
        ("quantity_read", 0),
        ("payment_mode", 1),
    ],
)
def test_malformed_readings_fail_closed(key: str, value: object) -> None:
    with pytest.raises(ValidationFailed) as err:
        canonical_readings({**READINGS, key: value})
    assert err.value.field == f"readings.{key}"
    missing = dict(READINGS)
    del missing[key]
    with pytest.raises(ValidationFailed):
        readings_hash(missing)


def test_approval_transitions() -> None:
    assert decide(ApprovalState.WAITING, "approve") is ApprovalState.APPROVED
    assert decide(ApprovalState.WAITING, "reject") is ApprovalState.REJECTED
    for state in (ApprovalState.APPROVED, ApprovalState.REJECTED, ApprovalState.VOID):
        for action in ("approve", "reject"):
            with pytest.raises(ApprovalNotWaiting) as err:
                decide(state, action)  # type: ignore[arg-type]
            assert err.value.code == "approval_not_waiting" and err.value.status == 409
    with pytest.raises(ValueError):
        decide(ApprovalState.WAITING, "void")  # type: ignore[arg-type]
    assert void(ApprovalState.WAITING) is ApprovalState.VOID
    assert void(ApprovalState.APPROVED) is ApprovalState.VOID
    for state in (ApprovalState.REJECTED, ApprovalState.VOID):
        with pytest.raises(InvalidTransition):
            void(state)


def test_approval_counts_only_when_approved_with_the_same_hash() -> None:
    h = readings_hash(READINGS)
    assert approval_counts("APPROVED", h, h)
    assert not approval_counts("WAITING", h, h)
    assert not approval_counts("APPROVED", "0" * 64, h)
    assert not approval_counts(None, None, h)
