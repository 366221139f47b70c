"""The words that mark a payment control: a tap target (or one of its ancestors) whose text or
content-desc contains one of them pays, or leads to paying (docs/architecture.md "Safety rules" 3).

One list for the agent, which never taps such a control (:data:`cmbuyer.agent.screens.safety.PAYMENT_DENYLIST`
adds the cashier's and the retention dialog's own words), and for the phone simulator, whose journal
marks every tap on one as a payment tap so a test fails on it (``phonesim.journal.assert_no_payment_taps``).
"""

from __future__ import annotations

PAYMENT_WORDS: tuple[str, ...] = (
    "支付",
    "付款",
    "继续支付",
    "立即支付",
    "去支付",
    "确认支付",
    "更换支付方式",
    "微信支付",
    "支付宝",
    "多多支付",
    "先用后付",
    "免密",
)
