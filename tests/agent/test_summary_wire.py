"""The agent never sends a summary the server would refuse: ``wire_summary`` applies the server's own
rule (cmbuyer.schemas.summary), so a refused wording cannot lose an event or a fail report."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cmbuyer.agent.client import wire_summary
from cmbuyer.server.domain.errors import ValidationFailed
from cmbuyer.server.services.events import check_summary

FALLBACK = "步骤失败"


@given(st.text(max_size=260))
def test_whatever_the_agent_sends_the_server_accepts(text: str) -> None:
    sent = wire_summary(text, FALLBACK)
    assert check_summary(sent) == sent


def test_known_refusals_are_replaced_and_plain_text_kept() -> None:
    for risky in ("claim_token leaked", "call 138 1234 5678", "<hierarchy/>", "x\u202eevil", "a" * 201):
        assert wire_summary(risky, FALLBACK) == FALLBACK
        try:
            check_summary(risky)
        except ValidationFailed:
            pass
        else:
            raise AssertionError(f"server accepted {risky!r}")
    assert wire_summary("价格 ¥12.88 超过上限", FALLBACK) == "价格 ¥12.88 超过上限"
