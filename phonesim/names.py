"""The closed sets of names that scenarios, faults and the screens share.

A leaf module (it imports nothing of the simulator), so :mod:`.faults` can check a fault's names
without importing the scenario loader or the screens that use them.
"""

from __future__ import annotations

# the order sheet's payment row: what a scenario's ``payment_mode`` and a ``payment_mode_change`` fault
# may show
PAYMENT_MODES = ("wechat", "alipay", "duoduo_balance", "pay_later", "password_free", "unreadable", "two_rows")
# the foreign windows an ``overlay`` fault (or ``AppModel.overlays``) may put over the app
OVERLAYS = ("coupon", "toast", "foreign")
