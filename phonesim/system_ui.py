"""The phone's own windows — MIUI's status bar and the launcher's gesture strip — node for node as the
two real captures show them (tests/agent/fixtures/real_structures; docs/phonesim.md "System windows").

The captured phone (1080x2400, MIUI, gesture navigation) has **no navigation bar**. While an app is in
front a dump holds, besides the app's full-screen window ``[0,0][1080,2400]``:

- ``com.miui.home``: one childless FrameLayout ``[0,2328][1080,2400]`` — the launcher's gesture strip,
  drawn over the bottom of the app (the app's content reaches down to y=2354);
- ``com.android.systemui``: the 95 px status bar ``[0,0][1080,95]`` — clock, the ringer icon, the
  notification icons (one ImageView each, their content-desc names the notification), cutout space,
  Bluetooth / SIM / WLAN icons and the battery, every node with the ids, classes, flags and nesting of
  the captures. How many notification icons there are is the phone's state (scenario key
  ``notifications``; the captures show 16 and 17, blanked).

Coordinates and ``drawing-order`` values are the captures'; texts and content-descs are the
simulator's own (the captures blanked theirs). The home screen (no app in front) has no capture: its
full-screen launcher window is modelled (:func:`home_screen`).
"""

from __future__ import annotations

from .nodes import Bounds, Node

W, H = 1080, 2400
# the phone the scenarios' ``device`` defaults to: a 1080x2400 MIUI phone (Redmi K40), like the captured one
DEVICE_BRAND, DEVICE_MODEL = "Redmi", "M2012K11AC"
SYSUI = "com.android.systemui"
LAUNCHER = "com.miui.home"
LAUNCHER_ACTIVITY = f"{LAUNCHER}/{LAUNCHER}.launcher.Launcher"
STATUS_H = 95  # the status bar window's height on the captures
GESTURE_TOP = 2328  # the gesture strip window's top on the captures
# the app's decor (LinearLayout > android:id/content) ends here on the captures: 26 px under the top of
# the launcher's gesture strip (GESTURE_TOP), which is drawn over it
APP_BOTTOM = 2354
APP_BOUNDS = (0, STATUS_H, W, APP_BOTTOM)  # the app's content (android:id/content): pages, scrims, dialogs
# personal data on the status bar (what real notification icons name): agent/authoring/capture.py and
# agent/screens/masking.py must never let it through
NOTIFICATION_TICKER = "短信通知：王小明 13812345678：您的快递已到"
DEFAULT_NOTIFICATIONS = (NOTIFICATION_TICKER, "微信通知：妈妈：晚上回家吃饭吗？")

_FRAME, _LINEAR = "android.widget.FrameLayout", "android.widget.LinearLayout"
_GROUP, _TEXT, _IMAGE = "android.view.ViewGroup", "android.widget.TextView", "android.widget.ImageView"


def _n(cls: str, bounds: tuple[int, int, int, int], rid: str = "", order: int | None = None, **kw: object) -> Node:
    """One system-UI node; ``rid`` is the short id (``clock``), ``order`` its captured drawing-order."""
    node = Node(cls, bounds, rid=f"{SYSUI}:id/{rid}" if rid else "", package=SYSUI, drawing_order=order)
    for key, value in kw.items():
        setattr(node, key, value)
    return node


def notification_icon(i: int, desc: str) -> Node:
    """The ``i``-th notification icon (an ImageView, content-desc ``desc``): the first four side by
    side, the rest stacked at the right end of the area (as MIUI squeezes them; the captures' geometry)."""
    left = 271 + 51 * i if i < 4 else min(439 + 15 * (i - 4), 454)
    return _n(_IMAGE, (left, 41, left + 47 if i >= 5 else left + 51, 78), order=i + 1, desc=desc)


def _chain(levels: list[tuple[str, Bounds, str, int]], children: list[Node], **kw: object) -> Node:
    """Nested single-child wrappers, outermost first, around ``children``: each level is ``(class, bounds,
    short id, drawing-order)``. ``kw`` (a content-desc …) goes to the outermost. MIUI wraps most status-bar
    contents in two or three such containers of the same bounds."""
    for cls, bounds, rid, order in reversed(levels[1:]):
        children = [_n(cls, bounds, rid, order, children=children)]
    cls, bounds, rid, order = levels[0]
    return _n(cls, bounds, rid, order, children=children, **kw)


def status_bar(notifications: list[str] | None = None, clock: str = "10:24") -> Node:
    """MIUI's status bar window ``[0,0][1080,95]`` with one icon per entry of ``notifications`` (their
    content-desc; None = :data:`DEFAULT_NOTIFICATIONS`)."""
    descs = list(DEFAULT_NOTIFICATIONS if notifications is None else notifications)
    bar = (0, 0, W, STATUS_H)
    ringer = _chain(
        [
            (_FRAME, (208, 28, 271, 92), "drip_left_status_icon_area", 7),
            (_LINEAR, (208, 28, 271, 92), "drip_left_statusIcons", 1),
        ],
        [_n(_IMAGE, (208, 30, 271, 89), order=2, desc="振铃器振动。")],
    )
    area = (271, 28, 501, 92)
    notes = _chain(
        [
            (_FRAME, area, "drip_notification_icon_area", 8),
            (_LINEAR, area, "notification_icon_area_inner", 1),
            (_FRAME, area, "notificationIcons", 1),
        ],
        [notification_icon(i, d) for i, d in enumerate(descs)],
    )
    left = _chain(
        [(_LINEAR, (47, 28, 501, 92), "phone_status_bar_left_container", 1)],
        [_n(_TEXT, (47, 28, 208, 92), "clock", 4, text=clock), ringer, notes],
    )
    wifi = _chain(
        [(_FRAME, (857, 30, 920, 89), "wifi_combo", 27), (_FRAME, (857, 30, 920, 89), "wifi_group", 1)],
        [
            _n(_IMAGE, (857, 30, 920, 89), "wifi_signal", 1),
            _n(_IMAGE, (857, 30, 887, 89), "wifi_activity", 2),
            _n(_TEXT, (896, 57, 920, 89), "wifi_standard", 3, text="6"),
        ],
        desc="WLAN 信号满格。",
    )
    battery_icon = _chain(
        [(_FRAME, (920, 28, 1008, 92), "battery_icon_container", 1)],
        [
            _n(_IMAGE, (920, 30, 1008, 89), "battery_image", 1),
            _n(_TEXT, (940, 28, 982, 92), "battery_digit", 3, text="80"),
        ],
    )
    battery = _chain(
        [(_LINEAR, (920, 28, 1027, 92), "battery", 2)],
        [battery_icon, _n(_IMAGE, (1008, 28, 1027, 92), "battery_charge_out_image", 2)],
        desc="电池电量为百分之 80。",
    )
    status_icons = _chain(
        [(_LINEAR, (756, 28, 920, 92), "statusIcons", 1)],
        [
            _n(_IMAGE, (756, 30, 798, 89), order=17, desc="蓝牙开启。"),
            _n(_IMAGE, (798, 30, 857, 89), order=23, desc="无 SIM 卡。"),
            wifi,
        ],
    )
    icons = _chain(
        [(_GROUP, (573, 28, 1027, 92), "system_icon_area", 3), (_GROUP, (756, 28, 1027, 92), "system_icons", 2)],
        [status_icons, battery],
    )
    contents = _chain(
        [(_LINEAR, (44, 0, 1030, 92), "status_bar_contents", 2)],
        [left, _n("android.view.View", (501, 13, 573, 92), "cutout_space_view", 2), icons],
    )
    container = _chain([(_FRAME, bar, "status_bar_container", 2), (_FRAME, bar, "status_bar", 1)], [contents])
    return _n(
        _FRAME,
        bar,
        order=0,
        style="statusbar",
        children=[_n(_FRAME, bar, "status_bar_launch_animation_container", 1), container],
    )


def gesture_strip() -> Node:
    """The launcher's gesture strip ``[0,2328][1080,2400]``: one childless, non-clickable FrameLayout
    of ``com.miui.home`` drawn over the bottom of the app in front. A tap on it reaches no app node (the
    simulator gives it no action: MIUI reads swipes there, not taps)."""
    return Node(_FRAME, (0, GESTURE_TOP, W, H), package=LAUNCHER, drawing_order=0, style="gesture")


def home_screen() -> Node:
    """The launcher's full-screen window while no app is in front (modelled: no capture of it)."""

    def icon(x: int, y: int, label: str, action: tuple[str, ...]) -> Node:
        return Node(
            "android.widget.TextView",
            (x, y, x + 200, y + 240),
            text=label,
            desc=label,
            package=LAUNCHER,
            clickable=True,
            long_clickable=True,
            focusable=True,
            action=action,
            style="icon",
        )

    return Node(
        _FRAME,
        (0, 0, W, H),
        package=LAUNCHER,
        style="launcher",
        rid=f"{LAUNCHER}:id/launcher",
        children=[
            Node(
                _GROUP,
                (0, STATUS_H, W, GESTURE_TOP),
                package=LAUNCHER,
                rid=f"{LAUNCHER}:id/workspace",
                scrollable=True,
                children=[
                    icon(60, 1800, "拼多多", ("launch",)),
                    icon(320, 1800, "微信", ("noop",)),
                    icon(580, 1800, "设置", ("noop",)),
                    icon(840, 1800, "相机", ("noop",)),
                ],
            )
        ],
    )
