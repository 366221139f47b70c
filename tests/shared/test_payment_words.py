"""``cmbuyer.schemas.payment.PAYMENT_WORDS`` is the one list both sides judge payment controls by: the
agent refuses a tap near any of them and the simulator's journal marks a tap on one as a payment tap."""

from __future__ import annotations

import pytest

from cmbuyer.agent.screens.dump import parse_dump
from cmbuyer.agent.screens.safety import PAYMENT_DENYLIST, tap_denial
from cmbuyer.phonesim.journal import is_payment_text
from cmbuyer.schemas.payment import PAYMENT_WORDS

_DUMP = (
    '<hierarchy rotation="0"><node index="0" text="" resource-id="" class="android.widget.FrameLayout" '
    'package="com.xunmeng.pinduoduo" content-desc="" clickable="false" enabled="true" bounds="[0,0][1080,2400]">'
    '<node index="0" text="{label}" resource-id="" class="android.widget.TextView" package="com.xunmeng.pinduoduo" '
    'content-desc="" clickable="true" enabled="true" bounds="[100,2200][980,2330]" /></node></hierarchy>'
)


@pytest.mark.parametrize("word", PAYMENT_WORDS)
def test_every_payment_word_is_refused_by_the_agent_and_marked_by_the_simulator(word: str) -> None:
    label = f"{word} ¥12.88"
    dump = parse_dump(_DUMP.format(label=label), app_package="com.xunmeng.pinduoduo")
    target = next(n for n in dump.app_nodes() if n.text == label)
    assert tap_denial(dump, target, target.bounds.center) is not None
    assert is_payment_text("", label)


def test_the_agent_list_extends_the_shared_one() -> None:
    assert PAYMENT_DENYLIST[: len(PAYMENT_WORDS)] == PAYMENT_WORDS
    assert not is_payment_text("提交订单 ¥12.88", "商品详情")
