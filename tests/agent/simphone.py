"""In-process stand-ins for adbutils' device and uiautomator2's Device, backed by the phone
simulator's app model (cmbuyer.phonesim.app/screens/hierarchy) — so the REAL PhoneAdapter code
(parsing, stable reads, denylist, tap planning, submit path) runs against the simulator's screens.

It is the fast "model" transport; a representative subset of the screen-content cases runs through the
simulator's adb server with the real uiautomator2/adbutils instead (tests/agent/test_real_server.py,
transport "adb"; the comment above ``ADB, MODEL`` there says which and why).
Every tap is recorded with the simulator's node role so tests can assert "exactly one submit tap,
zero taps on payment controls".
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from PIL import Image

from cmbuyer.phonesim.app import AppModel
from cmbuyer.phonesim.hierarchy import render_xml
from cmbuyer.phonesim.nodes import clickable_target, hit_path
from cmbuyer.phonesim.scenario import load_scenario
from cmbuyer.phonesim.screens import windows


class SimPhone:
    def __init__(self, scenario: dict[str, Any] | None = None, serial: str = "sim-1") -> None:
        self.cfg = load_scenario(scenario).for_phone(serial)
        self.app = AppModel(self.cfg)
        self.taps: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.dump_hook: Any = None  # callable(xml, n) -> xml, to inject faults
        self.tap_hook: Any = None  # callable(role) -> None, may raise to simulate adb drop
        self.after_tap: Any = None  # callable(role) -> None (e.g. change price between gates)
        self.dumps = 0
        self.version = (self.cfg.app.version_name, self.cfg.app.version_code)

    # uiautomator2 side -----------------------------------------------------------------
    @property
    def jsonrpc(self) -> SimPhone:
        return self

    def dumpWindowHierarchy(self, compressed: bool, depth: int) -> str:
        with self.lock:
            xml = render_xml(windows(self.app))
            self.dumps += 1
        return self.dump_hook(xml, self.dumps) if self.dump_hook else xml

    def screenshot(self) -> Image.Image:
        return Image.new("RGB", (108, 240), (200, 200, 200))

    @property
    def info(self) -> dict[str, Any]:
        return {"screenOn": True}

    # adbutils side ----------------------------------------------------------------------
    def shell(self, cmd: list[str], timeout: float | None = None) -> str:
        args = list(cmd)
        if args[:2] == ["input", "tap"]:
            return self._tap(int(args[2]), int(args[3]))
        if args[:3] == ["input", "keyevent", "4"]:
            with self.lock:
                self.app.back()
            return ""
        if args[:2] == ["dumpsys", "package"]:
            name, code = self.version
            return (
                f"Packages:\n  Package [com.xunmeng.pinduoduo] (abc):\n    versionCode={code} "
                f"minSdk=21 targetSdk=33\n    versionName={name}\n"
            )
        if args[:2] == ["dumpsys", "window"]:
            pkg = self.focused_package()
            return f"  mCurrentFocus=Window{{8a3f2c1 u0 {pkg}/.Main}}\n"
        if args[:3] == ["dumpsys", "activity", "top"]:
            page = self.app.page
            gid = page.goods_id if page else None
            return f"ACTIVITY com.xunmeng.pinduoduo/.activity.NewPageActivity url=goods.html?goods_id={gid}"
        if args[:2] == ["am", "start"]:
            url = args[args.index("-d") + 1]
            with self.lock:
                self.app.open_url(url)
            return "Starting: Intent"
        if args[:1] == ["getprop"]:
            return "13"
        raise AssertionError(f"unexpected shell {args}")

    def _tap(self, x: int, y: int) -> str:
        with self.lock:
            target = None
            for root in windows(self.app):
                path = hit_path(root, x, y)
                target = clickable_target(path) if path else None
                if target is not None:
                    break
            role = target.role if target else ""
            if self.tap_hook:
                self.tap_hook(role)
            page = self.app.page
            # the same fields as the simulator's journal entries, so tests/tally.py reads both
            self.taps.append(
                {
                    "kind": "tap",
                    "seq": len(self.taps) + 1,
                    "ts": time.time(),
                    "x": x,
                    "y": y,
                    "role": role,
                    "text": target.text if target else "",
                    "goods_id": page.goods_id if page else None,
                }
            )
            if target is not None and target.action:
                self.app.act(target.action)
        if self.after_tap:
            self.after_tap(role)
        return ""

    def focused_package(self) -> str:
        """The package in front: a foreign window the app model shows (``foreground_package`` when
        the simulator has one), else the app while it is on screen, else the launcher."""
        with self.lock:
            pkg = getattr(self.app, "foreground_package", None)
            if callable(pkg):
                pkg = pkg()
            if pkg:
                return str(pkg)
            return "com.xunmeng.pinduoduo" if self.app.page is not None else "com.miui.home"

    def roles(self) -> list[str]:
        return [t["role"] for t in self.taps]

    def journal(self) -> list[dict[str, Any]]:
        """Taps and created orders as simulator-journal-like entries (tests/tally.py)."""
        return [*self.taps, *({"kind": "order", "goods_id": o.goods_id} for o in self.app.orders)]


def strip_pkg(xml: str) -> str:
    return re.sub(r'package="com\.xunmeng\.pinduoduo"', 'package="com.other.app"', xml)
