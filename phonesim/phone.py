"""One simulated phone: app model + faults + journal + counters + latency, behind one lock.

The adb server, the shell interpreter and the JSON-RPC endpoint call into this class; tests
use its control API (:meth:`Phone.inject`, :meth:`Phone.state`, :attr:`Phone.journal`,
:attr:`Phone.counters`). Latency sleeps happen outside the lock and wake up on simulator
stop, so a stopping simulator never waits for a slow fake phone.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from PIL import Image

from . import hierarchy, screens, system_ui
from .app import CASHIERS, AppModel
from .faults import DUMP_KINDS, MUTATION_KINDS, Fault, FaultBook
from .journal import Journal, JournalSink, is_payment_text
from .nodes import Node, clickable_target, frame, hit_path, image
from .prices import to_price
from .scenario import Latency, PhoneConfig
from .screenshot import jpeg_bytes, png_bytes, render_image
from .system_ui import LAUNCHER_ACTIVITY

KEY_NAMES = {
    "4": "back",
    "back": "back",
    "keycode_back": "back",
    "3": "home",
    "home": "home",
    "keycode_home": "home",
    "66": "enter",
    "enter": "enter",
    "keycode_enter": "enter",
    "82": "menu",
    "menu": "menu",
    "187": "recent",
    "recent": "recent",
    "keycode_app_switch": "recent",
    "26": "power",
    "power": "power",
    "224": "wakeup",
    "wakeup": "wakeup",
}
ACTIVITY = "com.xunmeng.pinduoduo.activity.NewPageActivity"
HOME_ACTIVITY = "com.xunmeng.pinduoduo.ui.activity.HomeActivity"
# ``dumpsys activity top`` intent data per page; a page with ``{order_sn}`` has none without its order
PAGE_URLS = {
    "product": "pinduoduo://com.xunmeng.pinduoduo/goods.html?goods_id={goods_id}",
    "confirm": "pinduoduo://com.xunmeng.pinduoduo/order_checkout.html?goods_id={goods_id}&_x_src=goods_detail",
    "order": "pinduoduo://com.xunmeng.pinduoduo/order.html?order_sn={order_sn}",
    "challenge": "pinduoduo://com.xunmeng.pinduoduo/risk_verify.html?scene=order",
    "orders": "pinduoduo://com.xunmeng.pinduoduo/orders.html?type=1",
    "paid": "pinduoduo://com.xunmeng.pinduoduo/pay_result.html?order_sn={order_sn}",
}
COUNTERS = ("adb_calls", "shell_calls", "rpc_calls", "dumps", "taps", "screenshots", "keys", "deep_links")


class DropConnection(Exception):
    """Raised inside a device call: the adb layer closes the connection without an answer."""

    def __init__(self, applied: bool, reason: str):
        super().__init__(reason)
        self.applied = applied


class Phone:
    """A simulated Pinduoduo phone identified by ``serial``.

    Counters (``phone.counters``, ints): adb_calls (device services opened), shell_calls,
    rpc_calls, dumps, taps, screenshots, keys, deep_links.
    """

    def __init__(
        self, cfg: PhoneConfig, transport_id: int, stop_event: threading.Event, sink: JournalSink | None = None
    ):
        self.serial = cfg.serial
        self.cfg = cfg
        self.transport_id = transport_id
        self.app = AppModel(cfg)
        self.journal = Journal(cfg.serial, sink)
        self.faults = FaultBook(cfg.faults)
        self.latency: Latency = cfg.latency
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.lock = threading.RLock()
        self.uia_alive = True  # the on-device uiautomator2 server answers /ping
        self._uia_owner: object | None = None  # the app_process stream that launched it, if any
        self.pid = 20000 + transport_id * 17
        self._stop = stop_event
        self._offline_until = 0.0
        self._ready_at = 0.0  # cold start in progress until then
        self._shot_cache: tuple[str, Image.Image] | None = None
        self.clipboard = ""
        self.touch_down: tuple[int, int] | None = None  # an RPC touch gesture in progress
        # a session recorder (phonesim/recorder.py) sees every applied action and the screen after it
        self.recorder: Any = None
        start = cfg.start or {}
        if start.get("screen") in ("home", "product"):
            self.app.launch()
            if start.get("screen") == "product":
                self.app.open_url(f"pinduoduo://com.xunmeng.pinduoduo/goods.html?goods_id={start['goods_id']}")

    # ---------------------------------------------------------------- control API (tests, demo)
    def inject(self, spec: dict[str, Any] | str | None = None, /, **params: Any) -> dict[str, Any]:
        """Add a fault at run time: ``inject("empty_dump", times=3)`` or ``inject({"kind": ...})``.

        Returns the fault's description (with its ``id``). Raises ValueError on a bad spec.
        """
        if isinstance(spec, str):
            spec = {"kind": spec, **params}
        elif spec is None:
            spec = dict(params)
        with self.lock:
            fault = self.faults.add(dict(spec))
            self._apply_mutations()
            return fault.describe()

    def clear_faults(self, kind: str | None = None) -> None:
        with self.lock:
            self.faults.clear(kind)

    def set_latency(self, value: Any = None, **seconds: float) -> None:
        """``set_latency("realistic")``, ``set_latency(dump=0.15, tap=0.04)`` (seconds)."""
        with self.lock:
            self.latency = (
                Latency.parse(value) if value is not None else Latency.parse({**self.latency.__dict__, **seconds})
            )

    def reconnect(self) -> None:
        """End an ``offline_for`` period started by a dropped connection."""
        self._offline_until = 0.0

    @property
    def online(self) -> bool:
        return time.monotonic() >= self._offline_until

    @property
    def orders(self) -> list[dict[str, Any]]:
        with self.lock:
            return [o.as_dict() for o in self.app.orders]

    def state(self) -> dict[str, Any]:
        """Snapshot: screen, goods id, selection, quantity, unit price, orders, version, layout,
        foreground package, option-list scroll offsets (px per dimension), counters."""
        with self.lock:
            page = self.app.page
            price = self.app.unit_price()
            return {
                "serial": self.serial,
                "screen": self.app.screen,
                "goods_id": page.goods_id if page else None,
                "selection": dict(self.app.selection),
                "quantity": self.app.quantity,
                "unit_price": str(price) if price is not None else None,
                "orders": self.orders,
                "version_name": self.cfg.app.version_name,
                "version_code": self.cfg.app.version_code,
                "layout": self.app.layout,
                "foreground_package": self.app.foreground_package,
                "list_offset": dict(self.app.list_offset),
                "counters": dict(self.counters),
                "faults": self.faults.describe(),
                "uia_alive": self.uia_alive,
                "online": self.online,
            }

    def close(self) -> None:
        """Called once when the simulator stops (a recorder finishes its session file)."""
        if self.recorder is not None:
            self.recorder.close()

    # ---------------------------------------------------------------- what the shell reports
    def model_focus(self) -> tuple[str, str]:
        """(package, activity) of the window in front per the app model (no fault applied)."""
        page = self.app.page
        if page is None:
            pkg, act = LAUNCHER_ACTIVITY.split("/")
            return pkg, act
        if self.app.foreign:
            return self.app.foreign, dict(CASHIERS.values())[self.app.foreign]
        return self.cfg.app.package, HOME_ACTIVITY if page.name == "home" else ACTIVITY

    def focus(self) -> tuple[str, str]:
        """(package, activity) ``dumpsys window``/``activity`` report, after a ``wrong_focus`` fault."""
        with self.lock:
            fault = self.faults.take({"wrong_focus"}, self.counters, self.screen)
            if fault:
                return fault.params["package"], fault.params["activity"]
            return self.model_focus()

    def app_running(self) -> bool:
        """Whether the app process runs (``ps``, ``pidof``)."""
        return self.app.running

    def front_package(self) -> str:
        """The foreground package (``deviceInfo.currentPackageName``)."""
        with self.lock:
            return self.app.foreground_package

    def page_url(self) -> str:
        """The intent data of the app's top activity (``dumpsys activity top``), or ""."""
        page = self.app.page
        template = PAGE_URLS.get(page.name, "") if page is not None else ""
        if page is None or ("{order_sn}" in template and page.order is None):
            return ""
        return template.format(goods_id=page.goods_id, order_sn=page.order.order_sn if page.order else "")

    def _recorded(self, action: dict[str, Any]) -> None:
        """Hand an applied action to the session recorder, if one is attached (under the lock)."""
        if self.recorder is not None:
            self.recorder.after_action(self, action)

    # ---------------------------------------------------------------- helpers for the servers
    def sleep(self, op: str) -> None:
        """Wait the configured latency of ``op`` plus any armed ``slow`` fault (interruptible)."""
        with self.lock:
            seconds = float(getattr(self.latency, op, 0.0))
            fault = self.faults.take(
                {"slow"}, self.counters, self.app.screen, accept=lambda f: f.params["op"] in (op, "any")
            )
            if fault:
                seconds += float(fault.params["seconds"])
                self._fault_fired(fault)
        if seconds > 0:
            self._stop.wait(seconds)

    def count(self, name: str) -> None:
        with self.lock:
            self.counters[name] += 1

    def begin_call(self, service: str) -> Fault | None:
        """Account one adb device service; return an armed connection-drop fault for it, if any."""
        with self.lock:
            self._apply_mutations()

            def accept(f: Fault) -> bool:
                on = f.params["on"]
                if on == "any":
                    return True
                if on == "shell" and service.startswith(("shell:", "shell,", "exec:")):
                    return f.params["match"] is None or re.search(f.params["match"], service) is not None
                return False

            fault = self.faults.take({"drop_connection"}, self.counters, self.app.screen, accept=accept)
            self.counters["adb_calls"] += 1
            if fault:
                self._fault_fired(fault, service=service)
                self._go_offline(fault)
            return fault

    def _go_offline(self, fault: Fault) -> None:
        seconds = float(fault.params.get("offline_for") or 0)
        if seconds > 0:
            self._offline_until = time.monotonic() + seconds

    def _fault_fired(self, fault: Fault, **extra: Any) -> None:
        self.journal.record("fault", fault=fault.kind, fault_id=fault.id, screen=self.app.screen, **extra)

    def _apply_mutations(self) -> None:
        """Fire armed state-changing faults (price/stock/version changes, popups)."""
        while True:
            fault = self.faults.take(MUTATION_KINDS, self.counters, self.app.screen)
            if fault is None:
                return
            p = fault.params
            if fault.kind in ("price_change", "stock_out"):
                goods = self.cfg.catalogue.get(str(p["goods_id"]))
                for sku in goods.skus.values() if goods else []:
                    if p.get("options") is None or list(sku.options) == list(p["options"]):
                        if fault.kind == "price_change":
                            sku.price = to_price(p["price"])
                        else:
                            sku.stock = int(p["stock"])
            elif fault.kind == "version_change":
                self.cfg.app.version_name = str(p["version_name"])
                self.cfg.app.version_code = int(p["version_code"])
            elif fault.kind == "popup":
                self.app.show_popup(p["popup"], p.get("text"))
            elif fault.kind == "duplicate_submit":
                self.app.duplicate_submit = True
            elif fault.kind == "payment_mode_change":
                self.cfg.payment_mode = str(p["mode"])
            elif fault.kind == "overlay":
                self.app.overlays.append(str(p["window"]))
            self._fault_fired(fault)

    # ---------------------------------------------------------------- rendering
    def windows(self) -> list[Node]:
        with self.lock:
            wins = screens.windows(self.app)
            if time.monotonic() < self._ready_at and self.app.page is not None:
                # cold start still running: the app shows its splash and nothing readable
                splash = frame((0, 0, system_ui.W, system_ui.H), image(system_ui.APP_BOUNDS, ""), rid="", style="page")
                wins = [w if w.package != self.cfg.app.package else splash for w in wins]
            return wins

    @property
    def screen(self) -> str:
        with self.lock:
            return "loading" if time.monotonic() < self._ready_at and self.app.page else self.app.screen

    def dump(self, max_depth: int = 50) -> str:
        """The hierarchy XML as ``dumpWindowHierarchy`` returns it, after dump faults."""
        self.sleep("dump")
        with self.lock:
            self._apply_mutations()
            fault = self.faults.take(DUMP_KINDS, self.counters, self.app.screen)
            self.counters["dumps"] += 1
            wins = self.windows()
            xml: str
            if fault is None:
                xml = hierarchy.render_xml(wins, max_depth)
            elif fault.kind == "empty_dump":
                xml = "" if fault.params.get("form") == "string" else hierarchy.EMPTY_DUMP
            elif fault.kind == "single_node_dump":
                xml = hierarchy.single_node_dump()
            elif fault.kind == "partial_dump":
                keep = int(fault.params.get("keep_depth", 3))
                wins = [hierarchy.cut_depth(w, keep) if w.package == self.cfg.app.package else w for w in wins]
                xml = hierarchy.render_xml(wins, max_depth)
            elif fault.kind == "malformed_dump":
                xml = hierarchy.malform(hierarchy.render_xml(wins, max_depth))
            else:  # emoji_dump
                # one more notification icon on the status bar, named with emoji
                icons = next(n for w in wins for n in w.walk() if n.rid.endswith(":id/notificationIcons"))
                icons.add(system_ui.notification_icon(len(icons.children), "拼多多通知：🎉限时秒杀🧧 马上抢"))
                xml = hierarchy.render_xml(wins, max_depth)
                if fault.params.get("mode") == "broken":
                    xml = hierarchy.break_emoji(xml)
            self.journal.record(
                "dump", screen=self.screen, fault=fault.kind if fault else None, package=self.app.foreground_package
            )
            if fault:
                self._fault_fired(fault)
            return xml

    def _image(self) -> Image.Image:
        with self.lock:
            wins = self.windows()
            key = hierarchy.render_xml(wins)
            if self._shot_cache and self._shot_cache[0] == key:
                return self._shot_cache[1]
        img = render_image(wins)
        with self.lock:
            self._shot_cache = (key, img)
        return img

    def screenshot(self, fmt: str = "png", quality: int = 80, scale: float = 1.0) -> bytes:
        """PNG (``screencap -p``) or JPEG (``takeScreenshot``) bytes of the current screen."""
        self.sleep("screenshot")
        self.count("screenshots")
        with self.lock:
            # the package in front when the picture is taken (a cashier app must never be captured)
            screen, package = self.screen, self.app.foreground_package
        img = self._image()
        self.journal.record("screenshot", screen=screen, format=fmt, package=package)
        return png_bytes(img) if fmt == "png" else jpeg_bytes(img, quality, scale)

    # ---------------------------------------------------------------- input
    def tap(self, x: int, y: int, via: str) -> dict[str, Any]:
        """Deliver a tap at screen pixel (x, y). ``via``: "input_tap" | "rpc_click" | ….

        Raises DropConnection when a ``drop_connection`` fault with on=tap/submit_tap fires
        (after applying the tap when the fault says ``applied: true``).
        """
        self.sleep("tap")
        with self.lock:
            self._apply_mutations()
            screen_before = self.screen
            path: list[Node] = []
            if screen_before != "loading":
                for win in self.windows():
                    path = hit_path(win, x, y)
                    if path:
                        break
            target = clickable_target(path)
            role = target.role if target else ""
            texts = [t for n in path for t in (n.text, n.desc)]
            if target is not None:
                texts += [t for n in target.walk() for t in (n.text, n.desc)]
            page = self.app.page
            hit_node = target or (path[-1] if path else None)

            def accept(f: Fault) -> bool:
                return f.params["on"] == "tap" or (f.params["on"] == "submit_tap" and role == "submit")

            drop = self.faults.take({"drop_connection"}, self.counters, screen_before, accept=accept)
            applied = drop is None or bool(drop.params["applied"])
            n_orders = len(self.app.orders)
            effect = "none"
            if applied and target is not None and target.action is not None:
                effect = self.app.act(target.action)
            self.counters["taps"] += 1
            entry = self.journal.record(
                "tap",
                x=x,
                y=y,
                via=via,
                screen=screen_before,
                goods_id=page.goods_id if page else None,
                node=path[-1].summary() if path else None,
                target=target.summary() if target else None,
                role=role,
                payment=is_payment_text(*texts),
                effect=effect,
                package=hit_node.package if hit_node is not None else "",
                dropped=drop is not None,
                applied=applied,
            )
            for order in self.app.orders[n_orders:]:
                self.journal.record("order", tap_seq=entry["seq"], **order.as_dict())
            self._apply_mutations()
            if applied and screen_before != "loading":
                # the innermost node under the point: a step never covers more of the screen than
                # what was actually hit (a big clickable container would swallow unknown taps)
                self._recorded({"kind": "tap", "x": x, "y": y, "node": _step_node(path[-1] if path else None, x, y)})
            if drop is not None:
                self._fault_fired(drop, tap_seq=entry["seq"])
                self._go_offline(drop)
                raise DropConnection(applied, "connection dropped during tap")
            return entry

    def key(self, key: str | int, via: str) -> str:
        self.sleep("key")
        name = KEY_NAMES.get(str(key).strip().lower(), str(key).strip().lower())
        with self.lock:
            screen = self.screen
            effect = "none"
            if name == "back":
                effect = self.app.back()
            elif name == "home":
                effect = self.app.home()
            self.counters["keys"] += 1
            self.journal.record("key", key=name, via=via, screen=screen, effect=effect)
            self._apply_mutations()
            if name in ("back", "home"):
                self._recorded({"kind": name})
            return effect

    def swipe(self, points: list[int], via: str) -> dict[str, Any]:
        """A swipe along ``points`` ``[x1, y1, …, xn, yn]`` (screen px).

        A swipe that starts inside a horizontally scrolling option list (order sheet) scrolls that
        list by the horizontal distance (finger right-to-left shows tiles further right). The
        journal entry names the list hit (``list`` = its dimension header, or None) and the px moved.
        """
        self.sleep("tap")
        with self.lock:
            self._apply_mutations()
            screen = self.screen
            hit: Node | None = None
            if len(points) >= 4 and screen != "loading":
                for win in self.windows():
                    path = hit_path(win, points[0], points[1])
                    if path:
                        hit = next((n for n in reversed(path) if n.action and n.action[0] == "scroll"), None)
                        break
            moved = 0
            if hit is not None and hit.action is not None:
                _, dim, limit = hit.action
                moved = self.app.scroll_list(dim, points[0] - points[-2], int(limit))
            if len(points) >= 4:
                self._recorded({"kind": "swipe", "x1": points[0], "y1": points[1], "x2": points[-2], "y2": points[-1]})
            return self.journal.record(
                "swipe",
                points=points,
                via=via,
                screen=screen,
                package=self.app.foreground_package,
                list=hit.action[1] if hit is not None and hit.action is not None else None,
                list_bounds=list(hit.bounds) if hit is not None else None,
                moved=moved,
                effect="scroll" if moved else "none",
            )

    def deep_link(self, url: str) -> str | None:
        """``am start -d URL``; returns the goods id opened, ``"orders"`` for the pending-payment
        order list, or None when the app does not handle the link."""
        with self.lock:
            cold, opened = self.app.open_url(url)
            self.counters["deep_links"] += 1
            if cold and opened is not None:
                self._ready_at = time.monotonic() + self.latency.app_start
            self.journal.record(
                "deep_link",
                url=url,
                goods_id=opened if opened != "orders" else None,
                page=self.app.page.name if opened is not None and self.app.page else None,
                cold=cold,
            )
            self._apply_mutations()
            if opened is not None:
                self._recorded({"kind": "open_url", "url": url})
            return opened

    def launch_app(self) -> None:
        with self.lock:
            if self.app.launch():
                self._ready_at = time.monotonic() + self.latency.app_start
            self.journal.record("launch", screen=self.app.screen)
            self._recorded({"kind": "launch"})

    def force_stop(self, package: str) -> None:
        with self.lock:
            if package == self.cfg.app.package:
                self.app.force_stop()
                self.journal.record("force_stop", package=package)
                self._recorded({"kind": "force_stop"})

    def input_text(self, value: str, via: str) -> str:
        """Text typed into the focused field (only the quantity EditText accepts text)."""
        with self.lock:
            effect = self.app.set_quantity_text(value) if self.app.focused == "qty" else "none"
            self.journal.record("text", text=value, via=via, screen=self.screen, effect=effect)
            return effect

    def set_text_on(self, node: Node, value: str, via: str) -> bool:
        with self.lock:
            if node.role != "qty_edit":
                self.journal.record("text", text=value, via=via, screen=self.screen, effect="none")
                return False
            self.app.focused = "qty"
            effect = self.app.set_quantity_text(value)
            self.journal.record("text", text=value, via=via, screen=self.screen, effect=effect)
            return effect != "none"


def _step_node(node: Node | None, x: int, y: int) -> dict[str, Any]:
    """The session-step ``node`` of a tap: the innermost node under the point (else a 1-px box at the
    point), as ``{"bounds", "text", "desc", "resource_id"}``."""
    if node is None:
        return {"bounds": [x, y, x + 1, y + 1], "text": "", "desc": "", "resource_id": ""}
    return {"bounds": list(node.bounds), "text": node.text, "desc": node.desc, "resource_id": node.rid}
