"""Windows that appear over the app after the agent's last look (docs/phonesim.md
"Overlays"): each is its own top-level window in the dump, listed before the app's (the simulator
lists windows topmost first; a real dump's window order says nothing about z-order) and placed over the
app's submit control, so a tap sent to the submit control's coordinates lands on it.

- ``coupon``: Pinduoduo's own coupon dialog (a separate window of the app package) with a clickable
  ``立即领取`` button over the submit control; tapping it closes the dialog (a coupon is "claimed").
- ``toast``: a toast window (Pinduoduo's package, the ``android:id/message`` TextView) over the submit
  control. Here a tap on it does nothing; a real toast usually lets touches through to what lies
  below — the agent cannot tell which from a dump, so it does not tap either way.
- ``foreign``: another app's floating window (MIUI's ``悬浮球``) over the submit control; tapping it
  does nothing to Pinduoduo.

Switched on by the ``overlay`` fault (:mod:`.faults`) or by appending a kind to ``AppModel.overlays``;
they show only while a Pinduoduo page is in front.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .nodes import Node, frame, linear, text

if TYPE_CHECKING:
    from .app import AppModel

FLOAT_BALL = "com.miui.touchassistant"


def _anchor(app_window: Node) -> tuple[int, int]:
    """The centre of the app's submit control (role ``submit``), else of the app window."""
    for node in app_window.walk():
        if node.role == "submit":
            return node.center
    return app_window.center


def _coupon(x: int, y: int) -> Node:
    left, right = max(0, x - 300), min(1080, x + 240)
    button = frame(
        (left, y - 60, right, y + 60),
        text((left + 40, y - 36, right - 40, y + 36), "立即领取"),
        clickable=True,
        focusable=True,
        action=("dismiss_overlay", "coupon"),
        role="overlay",
        style="button",
    )
    box = linear(
        (0, y - 520, 1080, y + 80),
        text((60, y - 480, 1020, y - 400), "送你一张平台优惠券"),
        text((60, y - 380, 1020, y - 240), "¥3 无门槛券，今日有效"),
        button,
        style="dialog",
    )
    return frame((0, y - 520, 1080, y + 80), box, rid="", style="scrim")


def _toast(x: int, y: int) -> Node:
    left, right = max(0, x - 320), min(1080, x + 200)
    return linear(
        (left, y - 50, right, y + 50),
        text((left + 30, y - 30, right - 30, y + 30), "领券成功，下单立减3元", rid="android:id/message"),
        rid="",
        style="dialog",
    )


def _foreign(x: int, y: int) -> Node:
    ball = Node(
        "android.widget.ImageView",
        (x - 60, y - 60, x + 60, y + 60),
        desc="悬浮球",
        package=FLOAT_BALL,
        clickable=True,
        action=("noop",),
        role="overlay",
        style="button",
    )
    return Node("android.widget.FrameLayout", (x - 60, y - 60, x + 60, y + 60), package=FLOAT_BALL, children=[ball])


def windows(app: AppModel, app_window: Node) -> list[Node]:
    """The overlay windows switched on in ``app``, topmost first (the latest one on top), placed over
    ``app_window``'s submit control."""
    x, y = _anchor(app_window)
    build = {"coupon": _coupon, "toast": _toast, "foreign": _foreign}
    return [build[kind](x, y) for kind in reversed(app.overlays)]
