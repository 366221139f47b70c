"""PhoneAdapter: the one place that talks to the phone (uiautomator2 3.x + adbutils 2.x).

Rules (docs/architecture.md "Agent"):
- Connect through ``adbutils.AdbClient(host, port)`` (``ANDROID_ADB_SERVER_HOST``/``_PORT``, default
  127.0.0.1:5037). We probe the port first: adbutils would otherwise try to *start* a local adb
  server; we raise :class:`AdbUnreachable` ("无法连接 adb 服务 …") instead.
- No uiautomator2 watchers, ever.
- Every call has its own deadline (:func:`call_with_deadline`).
- Dumps are parsed and validated (empty / unparsable / no app nodes → typed errors);
  :meth:`read_stable` returns a reading only after two consecutive dumps agree on it. The adapter
  remembers the last two consecutive dumps taken since its last action (tap, key, deep link): a new
  stable read may use them (the second of one stable read is the first of the next; if both already
  agree on the new reading, no dump is needed). Every action forgets them, so after a tap a reading
  always comes from fresh dumps.
- Taps go through ``input tap X Y`` (one adb shell command, not uiautomator2's JSON-RPC ``click``
  which is silently re-sent after a server restart). Before *every* tap the payment denylist is
  checked on the node, its text/desc, its ancestors, its contents and whatever lies under the point.
- Generic taps refuse the submit control. :meth:`submit_tap_once` is the no-retry path used only by
  ``cmbuyer.agent.submit``; any error there is :class:`SubmitTapUnknown` (→ observation UNKNOWN).
- Screenshots are PNG bytes. :meth:`screenshot` captures at once and leaves the PNG encoding to
  whoever needs the bytes (the flow does it on its upload thread, off the phone's critical path).
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from cmbuyer.agent.errors import (
    AdbUnreachable,
    AgentError,
    DumpUnstable,
    PaymentControlBlocked,
    PhoneError,
    PhoneTimeout,
    SubmitControlGuarded,
    SubmitTapUnknown,
)
from cmbuyer.agent.phone.deadline import call_with_deadline
from cmbuyer.agent.phone.devices import AdbDevice, U2Device
from cmbuyer.agent.screens import safety
from cmbuyer.agent.screens.dump import APP_PACKAGE, Dump, Node, parse_dump
from cmbuyer.agent.screens.masking import ImageUnreadable, app_windows, encode_png, mask_outside_app

log = logging.getLogger(__name__)
T = TypeVar("T")

_VERSION_NAME_RE = re.compile(r"^\s*versionName=(\S+)\s*$", re.MULTILINE)
_VERSION_CODE_RE = re.compile(r"\bversionCode=(\d+)\b")
_GOODS_ID_RE = re.compile(r"goods_id=(\d{1,20})(?!\d)", re.ASCII)
_SAFE_GOODS_ID = re.compile(r"[0-9]{1,20}", re.ASCII)


@dataclass(frozen=True)
class AppVersion:
    name: str
    code: int

    def __str__(self) -> str:
        return f"{self.name} ({self.code})"


@dataclass(frozen=True)
class Deadlines:
    """Seconds per call kind; generous enough for a bad day on a real phone."""

    connect: float = 60.0
    dump: float = 10.0
    shell: float = 10.0
    screenshot: float = 15.0
    tap: float = 5.0


def probe_adb_server(host: str, port: int, timeout: float = 2.0) -> None:
    """Raise AdbUnreachable unless something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return
    except OSError as exc:
        raise AdbUnreachable(f"无法连接 adb 服务 {host}:{port}（请先运行 adb start-server）") from exc


def parse_app_version(dumpsys: str, package: str = APP_PACKAGE) -> AppVersion | None:
    """versionName + versionCode from ``dumpsys package <pkg>``; None when the app is absent.
    More than one distinct versionName or versionCode (e.g. an update staged beside the installed
    copy) → PhoneError: we never pick the first match like ``app_info()`` does."""
    if f"Package [{package}]" not in dumpsys and "versionName=" not in dumpsys:
        return None
    names = set(_VERSION_NAME_RE.findall(dumpsys))
    codes = set(_VERSION_CODE_RE.findall(dumpsys))
    if not names and not codes:
        return None
    if len(names) != 1 or len(codes) != 1:
        raise PhoneError("app version is ambiguous in dumpsys package", "APP_VERSION_UNSUPPORTED")
    return AppVersion(names.pop(), int(codes.pop()))


def parse_goods_id(dumpsys_activity: str) -> str | None:
    """The goods id of the page on top (``dumpsys activity top``); several different → None."""
    found = set(_GOODS_ID_RE.findall(dumpsys_activity))
    return found.pop() if len(found) == 1 else None


class Screenshot:
    """One captured screen. The image is grabbed by :meth:`PhoneAdapter.screenshot`; :meth:`png` or
    :meth:`masked_png` decodes and encodes it (once, thread-safe) — the costly part, which need not hold
    up the next phone call. The image is dropped once encoded, so one Screenshot gives one PNG: asking
    for the other kind afterwards is a programming error (RuntimeError)."""

    def __init__(self, image: Any) -> None:
        self._image = image
        self._png: bytes | None = None
        self._masked: bool | None = None
        self._lock = threading.Lock()

    def _encode(self, masked: bool, paint: Callable[[Any], Any]) -> bytes:
        with self._lock:
            if self._png is None:
                image = self._image
                # decode now: an image opened from bytes is read-only until loaded, and drawing on it
                # before would copy all of its pixels first
                image.load()
                image = image if image.mode == "RGB" else image.convert("RGB")
                self._png = encode_png(paint(image))
                self._masked = masked
                self._image = None
            elif self._masked != masked:
                raise RuntimeError("this screenshot was already encoded the other way")
            return self._png

    def png(self) -> bytes:
        """The whole screen as PNG bytes."""
        return self._encode(False, lambda image: image)

    def masked_png(self, windows: Sequence[Dump], app_package: str) -> bytes:
        """PNG bytes with everything outside the app's own windows black (:func:`mask_outside_app`, with
        ``windows`` the dumps taken around the shot): one decode and one encode, where encoding the plain
        PNG and then masking it would decode and encode twice."""
        return self._encode(True, lambda image: mask_outside_app(image, windows, app_package))


@dataclass(frozen=True)
class SubmitTapPlan:
    """Where the one submit tap lands: ``target`` is the clickable node a finger there hits (the submit
    control), ``point`` its centre in screen pixels."""

    target: Node
    point: tuple[int, int]


# Pauses between the dumps of one stable read: none before the second dump (a real dump takes
# 100-200 ms itself, so two dumps are never closer than that), longer while the screen keeps
# changing (animations).
STABLE_PAUSES = (0.0, 0.1, 0.2, 0.3)
# How old the latest look after the tap may be and still serve as half of a stable look or as the focus
# before a screenshot. The observation polls every 50 ms and the evidence upload between
# it and the confirmation takes tens of milliseconds on a healthy server; a slow or retried upload (up to
# the client's 10 s timeout × 5 attempts) gives the screen time to change on its own (a cashier opening).
LOOK_REUSE_SECONDS = 1.0


def _client_class(adbutils: Any) -> Any:
    """``adbutils.AdbClient`` that asks the adb server for its version once, not before every call.

    adbutils opens every device service (shell command, the uiautomator2 HTTP stream of each dump,
    screenshot …) by first asking ``host:version`` on a connection of its own — a second connection,
    round trip and 10 ms close pause per phone call — only to choose between ``host:tport:serial:``
    (≥ 41) and the old ``host:transport:``. The answer cannot change while the adb server runs; a
    restarted server answers the request it gets either way (a different version only matters for
    servers older than adb 1.0.41 from 2019). The request itself is unchanged: each call still opens
    its own transport to the phone by serial.

    Each connection also goes out with ``TCP_NODELAY``: uiautomator2 sends every JSON-RPC
    request (dump, screenshot) through ``http.client``, which writes the headers and the body in two
    ``send`` calls. With Nagle's algorithm on, the body waits for the ACK of the headers, which the
    receiving end (the adb server, here the simulator) delays by up to 40 ms because it has nothing to
    answer yet: ≈ 45 ms of idle wait per dump or screenshot (measured 196 → 153 ms for a 150 ms dump).
    The option only stops the kernel from holding back a small segment; the bytes, their order and
    the connection per call are unchanged."""

    class CachedVersionClient(adbutils.AdbClient):  # type: ignore[misc]
        _version: int | None = None

        def server_version(self) -> int:
            if self._version is None:
                self._version = int(super().server_version())
            return self._version

        def make_connection(self, timeout: float | None = None) -> Any:
            conn = super().make_connection(timeout)
            conn.conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return conn

    return CachedVersionClient


class PhoneAdapter:
    """Synchronous adapter for one device serial. Construct with :meth:`connect`."""

    def __init__(
        self,
        serial: str,
        device: AdbDevice,
        u2dev: U2Device,
        deadlines: Deadlines | None = None,
        app_package: str = APP_PACKAGE,
    ) -> None:
        """``device``/``u2dev``: the adbutils and uiautomator2 devices of ``serial`` (agent/phone/devices.py
        names what is used of them; :meth:`connect` makes both)."""
        self.serial = serial
        self._adb: AdbDevice = device
        self._u2: U2Device = u2dev
        self.deadlines = deadlines or Deadlines()
        self.app_package = app_package
        # The last (at most two) consecutive dumps taken since the last action, oldest first.
        self._recent: list[Dump] = []
        # After the submit tap: the last (at most two) consecutive looks (dump, focused package) taken
        # since the last action, oldest first, each with the number of the phone call that ended it.
        # (dump, focus, calls_made after it, time.monotonic() when it was taken)
        self._looks: list[tuple[Dump, str | None, int, float]] = []
        self.calls_made = 0  # phone calls sent through _call (a look is "the latest" if none followed)
        # Gate screenshots between the two dumps of the gate's stable read (:meth:`arm_gate_shot`):
        # on when the caller stores gate screenshots through :meth:`gate_screenshot` (the purchase flow).
        self.gate_shots_between_dumps = False
        self._armed = False
        self._pending: tuple[Screenshot, Dump] | None = None  # a shot taken right after that dump
        self._bracket: tuple[Screenshot, Dump, Dump] | None = None  # a shot between two equal dumps
        self._look_shot: tuple[Screenshot, int] | None = None  # after the tap: a shot and its call number
        self.dumps_taken = 0  # fresh dumps (diagnostics / tests)
        # Told of every action just before it is sent (the dry run records its session with it):
        # ``listener(action, node)``, action = {"kind": "tap", "x", "y"} | {"kind": "swipe", "x1",
        # "y1", "x2", "y2"} | {"kind": "back"} | {"kind": "open_url", "url"}; node = the tapped
        # node (the clickable target) or None. The submit tap is never announced.
        self.action_listener: Callable[[dict[str, Any], Node | None], None] | None = None

    @classmethod
    def connect(
        cls, serial: str, deadlines: Deadlines | None = None, *, adb_server: tuple[str, int] | None = None
    ) -> PhoneAdapter:
        """Probe the adb server, attach to ``serial`` and start/reach the uiautomator2 server. ``adb_server``:
        ``(host, port)`` (the CLI passes its settings'); None leaves it to adbutils, which reads adb's own
        ``ANDROID_ADB_SERVER_HOST``/``_PORT`` (the simulator's test helpers set them)."""
        import adbutils
        import uiautomator2 as u2

        deadlines = deadlines or Deadlines()
        host, port = adb_server or (None, None)
        client = _client_class(adbutils)(host=host, port=port)
        probe_adb_server(client.host, client.port)

        def attach() -> tuple[Any, Any]:
            states = {d.serial: d.state for d in client.list()}
            if states.get(serial) != "device":
                raise PhoneError(f"手机 {serial} 不在线（adb devices 里没有它，或状态不是 device）", "ADB_ERROR")
            device = client.device(serial)
            return device, u2.connect(device)

        try:
            device, u2dev = call_with_deadline(attach, deadlines.connect, "connect")
        except AgentError:
            raise
        except Exception as exc:
            raise PhoneError(f"cannot connect to {serial}: {type(exc).__name__}") from exc
        return cls(serial, device, u2dev, deadlines)

    # --- plumbing -----------------------------------------------------------------------------
    def _call(self, fn: Callable[[], T], seconds: float, what: str, *, phone: bool = True) -> T:
        """``fn()`` under a deadline; ``phone=False`` for local work (encoding) that sends nothing."""
        self.calls_made += phone
        try:
            return call_with_deadline(fn, seconds, what)
        except AgentError:
            raise
        except Exception as exc:
            raise PhoneError(f"{what} failed: {type(exc).__name__}") from exc

    def shell(self, cmd: list[str], what: str = "shell") -> str:
        return self._call(
            lambda: str(self._adb.shell(cmd, timeout=self.deadlines.shell)), self.deadlines.shell + 1, what
        )

    # --- reads --------------------------------------------------------------------------------
    def dump_raw(self) -> str:
        """The raw hierarchy XML via the JSON-RPC ``dumpWindowHierarchy`` (no silent empty-retry)."""
        return self._call(
            lambda: str(self._u2.jsonrpc.dumpWindowHierarchy(False, 50) or ""), self.deadlines.dump, "dump"
        )

    def dump(self) -> Dump:
        """One fresh validated dump with app nodes (DumpEmpty / DumpInvalid / DumpNoAppNodes)."""
        self._recent = []  # a failed dump breaks the chain of consecutive dumps
        dump = parse_dump(self.dump_raw(), self.app_package).require_app()
        self.dumps_taken += 1
        return dump

    def last_read_dump(self) -> Dump | None:
        """The latest dump taken since the last action — after :meth:`read_stable`, the one its value
        was read from — or None when there is none (nothing read since the last action)."""
        return self._recent[-1] if self._recent else None

    def _fresh(self) -> Dump:
        recent = self._recent
        dump = self.dump()
        self._recent = [*recent[-1:], dump]
        return dump

    def _announce(self, action: dict[str, Any], node: Node | None = None) -> None:
        if self.action_listener is not None:
            self.action_listener(action, node)

    def _forget_screen(self) -> None:
        """Called before every action that may change the screen: later reads need fresh dumps."""
        self._recent = []
        self._looks = []
        self._pending = self._bracket = None
        self._look_shot = None

    def read_stable(
        self, reader: Callable[[Dump], T], attempts: int = 6, pause: float | None = None, *, new_dump: bool = False
    ) -> tuple[T, Dump]:
        """Two consecutive dumps with equal ``reader`` results; returns (value, the later dump).

        The last two dumps taken since the last action count (nothing was tapped in between): if
        they already agree on ``reader``, no new dump is taken; otherwise the latest one is the
        first of this read. ``new_dump=True`` (polling for a change) takes at least one new dump:
        only the latest remembered dump may serve, as the first. A reader that raises on a
        remembered dump makes us start afresh. DumpUnstable after ``attempts`` fresh dumps without
        agreement (the dump does not wait for idle). ``pause``: fixed seconds between dumps
        (default: :data:`STABLE_PAUSES`)."""
        previous: Any = _UNSET
        recent = list(self._recent[-1:] if new_dump else self._recent)
        if recent:
            try:
                values = [reader(d) for d in recent]
            except AgentError:
                self._recent = []
            else:
                if len(values) == 2 and values[0] == values[1]:
                    return values[1], recent[1]
                previous = values[-1]
        for i in range(attempts):
            if self._armed and previous is not _UNSET and self._recent:
                self._shoot_after(self._recent[-1])
            dump = self._fresh()
            value = reader(dump)
            if previous is not _UNSET and value == previous:
                pending = self._pending
                if pending is not None and len(self._recent) == 2 and pending[1] is self._recent[0]:
                    self._bracket = (pending[0], self._recent[0], dump)
                return value, dump
            previous = value
            wait = pause if pause is not None else STABLE_PAUSES[min(i, len(STABLE_PAUSES) - 1)]
            if i + 1 < attempts and wait > 0:
                time.sleep(wait)
        raise DumpUnstable("dumps never agreed twice in a row")

    def screenshot(self) -> Screenshot:
        """Capture the screen now (uiautomator2's JPEG, decoded lazily; secure windows may be
        black); ``.png()`` gives the PNG bytes."""
        return Screenshot(self._call(lambda: self._u2.screenshot(), self.deadlines.screenshot, "screenshot"))

    def screenshot_png(self) -> bytes:
        """PNG bytes of the screen."""
        shot = self.screenshot()
        return self._call(shot.png, self.deadlines.screenshot, "screenshot encode", phone=False)

    def app_version(self) -> AppVersion | None:
        out = self.shell(["dumpsys", "package", self.app_package], "dumpsys package")
        return parse_app_version(out, self.app_package)

    def current_goods_id(self) -> str | None:
        return parse_goods_id(self.shell(["dumpsys", "activity", "top"], "dumpsys activity"))

    def device_info(self) -> dict[str, Any]:
        info = self._call(lambda: self._u2.info, self.deadlines.shell, "device info")
        return dict(info) if isinstance(info, dict) else {}

    def android_release(self) -> str:
        return self.shell(["getprop", "ro.build.version.release"], "getprop").strip() or "unknown"

    # --- actions ------------------------------------------------------------------------------
    def open_goods(self, goods_id: str) -> None:
        """Deep link to the product page. ``goods_id`` must be ASCII digits."""
        if _SAFE_GOODS_ID.fullmatch(goods_id) is None:
            raise PhoneError("refusing a goods id that is not digits", "WRONG_GOODS")
        url = f"pinduoduo://com.xunmeng.pinduoduo/goods.html?goods_id={goods_id}"
        self._announce({"kind": "open_url", "url": url})
        self._forget_screen()
        self.shell(["am", "start", "-a", "android.intent.action.VIEW", "-d", url], "am start")

    def press_back(self) -> None:
        self._armed = False  # backing out: no gate follows
        self._announce({"kind": "back"})
        self._forget_screen()
        self.shell(["input", "keyevent", "4"], "back")

    def _tap_plan(self, dump: Dump, node: Node) -> SubmitTapPlan:
        """Where a tap on ``node`` lands (its clickable self or ancestor, at that node's centre), after
        the denylist check (raises PaymentControlBlocked)."""
        target = node.clickable_self_or_ancestor()
        if target is None or target.bounds.empty:
            raise PhoneError("no clickable node with bounds to tap", "SCREEN_UNRECOGNIZED")
        if target.package != self.app_package:
            raise PhoneError("tap target outside the app package", "WRONG_PACKAGE")
        point = target.bounds.center
        why = safety.tap_denial(dump, target, point)
        if why is not None:
            raise PaymentControlBlocked(why)
        return SubmitTapPlan(target, point)

    def tap_node(self, dump: Dump, node: Node) -> None:
        """Tap a non-submit control at its clickable ancestor's centre (one ``input tap``)."""
        target = node.clickable_self_or_ancestor() or node
        if safety.is_submit_related(target) or safety.is_submit_related(node):
            raise SubmitControlGuarded("generic tap aimed at the submit control")
        near = safety.submit_denial(dump, node)
        if near is not None:
            raise SubmitControlGuarded(f"generic tap refused: {near}")
        x, y = self._tap_plan(dump, node).point
        self._announce({"kind": "tap", "x": x, "y": y}, target)
        self._forget_screen()
        self.shell(["input", "tap", str(x), str(y)], "tap")

    def swipe_in_list(self, dump: Dump, scroll_list: Node, forward: bool) -> None:
        """Scroll a horizontally scrolling list by one swipe inside its own bounds (``input swipe``):
        ``forward`` moves the finger right-to-left (shows tiles further right). Both the start and the
        end point lie inside the list (a margin of a fifth of its width), and both pass the payment
        denylist like a tap (the list, its ancestors and tiles, and every app node under each point);
        a list outside the app, without bounds or too narrow is refused."""
        b = scroll_list.bounds
        if scroll_list.package != self.app_package:
            raise PhoneError("swipe target outside the app package", "WRONG_PACKAGE")
        if b.empty or b.right - b.left < 100:
            raise PhoneError("option list has no room to swipe in", "SCREEN_UNRECOGNIZED")
        if safety.is_submit_related(scroll_list):
            raise SubmitControlGuarded("swipe aimed at a list holding the submit control")
        margin = (b.right - b.left) // 5
        y = (b.top + b.bottom) // 2
        left, right = b.left + margin, b.right - margin
        start, end = ((right, y), (left, y)) if forward else ((left, y), (right, y))
        if safety.submit_area_hit(dump, b, [start, end]) is not None:
            raise SubmitControlGuarded("swipe over the submit control")
        for point in (start, end):
            why = safety.tap_denial(dump, scroll_list, point)
            if why is not None:
                raise PaymentControlBlocked(why)
        self._announce({"kind": "swipe", "x1": start[0], "y1": y, "x2": end[0], "y2": y})
        self._forget_screen()
        self.shell(["input", "swipe", str(start[0]), str(y), str(end[0]), str(y), "300"], "swipe")

    def plan_submit_tap(self, dump: Dump, node: Node) -> SubmitTapPlan:
        """Where the submit tap on ``node`` would land in ``dump``, after the denylist check (raises
        PaymentControlBlocked / PhoneError; nothing is sent). The caller checks what lies at the point
        (agent/screens/hit.py) before it journals the tap intent."""
        return self._tap_plan(dump, node)

    def submit_tap_once(self, plan: SubmitTapPlan) -> None:
        """The single submit tap at ``plan.point``: ONE ``input tap`` shell command through adbutils
        with a deadline and no retry (uiautomator2's JSON-RPC ``click`` is re-sent after a server
        restart; a shell command is sent once). Any failure → SubmitTapUnknown (the tap may or may not
        have landed). Called only by ``cmbuyer.agent.submit`` (static check in
        tests/agent/test_layers.py)."""
        x, y = plan.point
        self._forget_screen()
        try:
            call_with_deadline(
                lambda: self._adb.shell(["input", "tap", str(x), str(y)], timeout=self.deadlines.tap),
                self.deadlines.tap + 1,
                "submit tap",
            )
        except (PhoneTimeout, Exception) as exc:
            raise SubmitTapUnknown(f"submit tap outcome unknown: {type(exc).__name__}") from exc

    # --- after the tap (observation and the read-only confirmation) ----------------------------
    def dump_any(self) -> Dump:
        """One fresh validated dump that may hold no app node — valid ONLY after the submit tap,
        where a foreign app (an external cashier) in front is an observation, not a fault.
        DumpEmpty / DumpInvalid as :meth:`dump`."""
        self._recent = []
        dump = parse_dump(self.dump_raw(), self.app_package)
        self.dumps_taken += 1
        return dump

    def focused_package(self) -> str | None:
        """The package of the focused window (``dumpsys window windows`` → ``mCurrentFocus``);
        None when unreadable, absent, not an app window, or several different ones are named."""
        out = self.shell(["dumpsys", "window", "windows"], "dumpsys window")
        return parse_focused_package(out)

    def look_after_tap(self) -> tuple[Dump, str | None]:
        """A fresh :meth:`dump_any` and the focused package (None when unreadable: an unreadable
        focus never counts as "the app is in front"). Remembered as the latest look (:meth:`recent_looks`)."""
        recent, self._looks = self._looks[-1:], []  # a failing dump breaks the chain of consecutive looks
        dump = self.dump_any()
        try:
            focus = self.focused_package()
        except AgentError:
            focus = None
        self._looks = [*recent, (dump, focus, self.calls_made, time.monotonic())]
        return dump, focus

    def recent_looks(self, *, new_look: bool = False) -> list[tuple[Dump, str | None]]:
        """The last (at most two) consecutive looks since the last action, oldest first: those of
        :meth:`look_after_tap` and the look each stored screenshot takes (its masking dump and the focus
        read after it). Two that agree are a stable look without a new dump, as :meth:`read_stable`
        reuses dumps; ``new_look=True`` (polling for a change) gives only the latest, to be the first of
        a new pair. Every action forgets them; none when the latest is older than
        :data:`LOOK_REUSE_SECONDS` (the screen may have changed on its own since)."""
        if not self._fresh_look():
            return []
        looks = self._looks[-1:] if new_look else self._looks
        return [(dump, focus) for dump, focus, _, _ in looks]

    def _fresh_look(self) -> bool:
        """Is the latest look younger than :data:`LOOK_REUSE_SECONDS`? No phone call after a look does
        not mean no time: the synchronous upload of the observation screenshot (client timeout × retries)
        and a journal fsync lie between the observation's last look and the confirmation's first."""
        return bool(self._looks) and time.monotonic() - self._looks[-1][3] <= LOOK_REUSE_SECONDS

    def shoot_before_next_look(self) -> None:
        """After the tap: capture the screen now, between the latest look and the next one; if the next
        :meth:`look_after_tap` agrees with the latest, :meth:`app_screenshot_png` uses this shot with
        both looks around it (their focus and their dumps) instead of a focus read, a shot, a dump and a
        focus read. A failed capture is ignored (the screenshot is then taken as before)."""
        self._look_shot = None
        if not self._looks or self._looks[-1][2] != self.calls_made:
            return  # a call followed the latest look: the shot would not lie right after it
        try:
            self._look_shot = (self.screenshot(), self.calls_made)
        except AgentError:
            self._look_shot = None

    def _focus_now(self) -> str | None:
        """The focused package as of now: the latest look's when no phone call followed it (the same
        answer, read a few milliseconds ago — at most :data:`LOOK_REUSE_SECONDS`), else a fresh
        ``dumpsys window`` read."""
        if self._fresh_look() and self._looks[-1][2] == self.calls_made:
            return self._looks[-1][1]
        return self.focused_package()

    def app_screenshot_png(self) -> bytes | None:
        """PNG bytes of the screen, taken only while the app itself is focused (the evidence rules (docs/api.md
        "POST /api/v1/tasks/{id}/evidence") refuse screenshots of external payment pages): the focus is read before and
        after the capture; anything else — a foreign window, an unreadable focus, a failed capture — gives None, and a
        capture made while the focus changed is dropped. Everything outside the app's own windows (status bar,
        notification shade, navigation bar) and any other window drawn over them is black (screens/masking.py, issue
        33): a hierarchy dump taken right after the shot says where the windows were; no app window in it → None."""
        bracketed = self._look_bracket()
        if bracketed is not None:
            shot, (before, focus_before), (after, focus_after) = bracketed
            if self.app_package not in (focus_before, focus_after) or focus_before != focus_after:
                return None
            if not (app_windows(before, self.app_package) and app_windows(after, self.app_package)):
                return None
            try:
                return self._call(
                    lambda: shot.masked_png((before, after), self.app_package),
                    self.deadlines.screenshot,
                    "screenshot encode",
                    phone=False,
                )
            except (AgentError, ImageUnreadable):
                return None
        try:
            if self._focus_now() != self.app_package:
                return None
            recent, self._looks = self._looks[-1:], []
            shot, windows = self._shot_and_windows()
            focus = self.focused_package()
            # the masking dump and the focus after the shot are a look like any other (nothing was sent
            # between the previous look and it but the screenshot): the next stable look may use it
            self._looks = [*recent, (windows, focus, self.calls_made, time.monotonic())]
            if focus != self.app_package or not app_windows(windows, self.app_package):
                return None
            return self._call(
                lambda: shot.masked_png((windows,), self.app_package),
                self.deadlines.screenshot,
                "screenshot encode",
                phone=False,
            )
        except (AgentError, ImageUnreadable):
            return None

    def _look_bracket(self) -> tuple[Screenshot, tuple[Dump, str | None], tuple[Dump, str | None]] | None:
        """The shot :meth:`shoot_before_next_look` took, with the two looks around it, when those are the
        last two looks and no phone call followed the second (else None). Used once."""
        taken, self._look_shot = self._look_shot, None
        if taken is None or len(self._looks) != 2 or self._looks[1][2] != self.calls_made:
            return None
        (before, f1, seq1, _), (after, f2, seq2, _) = self._looks
        # the shot was the only call between the two looks: the call right after the first one's focus
        # read, and the second look's dump and focus read the two calls right after the shot
        if taken[1] != seq1 + 1 or seq2 != seq1 + 3:
            return None
        return taken[0], (before, f1), (after, f2)

    def _shot_and_windows(self) -> tuple[Screenshot, Dump]:
        shot = self.screenshot()
        # not self.dump(): this look must not break the chain of consecutive dumps the flow compares
        return shot, parse_dump(self.dump_raw(), self.app_package)

    def arm_gate_shot(self) -> None:
        """Called before the stable read a gate will judge (after the step's last tap): when
        :attr:`gate_shots_between_dumps` is on, that read takes the gate screenshot between its two fresh
        dumps — before the second dump of every candidate pair; a shot whose pair did not agree is
        dropped unused (never stored). :meth:`gate_screenshot` then uses the shot that two equal dumps
        bracket instead of a shot plus one more dump. Off (the dry run, tests) it does nothing."""
        self._armed = self.gate_shots_between_dumps

    def _shoot_after(self, dump: Dump) -> None:
        if self._pending is not None and self._pending[1] is dump:
            return
        try:
            self._pending = (self.screenshot(), dump)
        except AgentError:  # no shot now: gate_screenshot takes its own (shot + dump) later
            self._pending = None

    def gate_screenshot(self) -> Callable[[], bytes]:
        """The gate screenshot of the screen the gate just read; returns the encoder to run later (on the
        outbox thread), which gives the PNG with everything outside the app's own windows black
        (:func:`mask_outside_app`; all black if the app showed no window).

        Where the windows were when the shot was taken comes from dumps around it: if the gate's stable
        read took the shot between its two dumps (:meth:`arm_gate_shot`) and those are still the latest
        dumps (nothing was sent to the screen since), both of them — a window present at either end is
        masked; else a shot now and a hierarchy dump right after it. Raises PhoneError/AgentError as
        :meth:`screenshot` and :meth:`dump_raw`."""
        bracket, self._bracket, self._pending, self._armed = self._bracket, None, None, False
        dumps: tuple[Dump, ...]
        recent = self._recent
        if bracket is not None and len(recent) == 2 and recent[0] is bracket[1] and recent[1] is bracket[2]:
            shot, dumps = bracket[0], bracket[1:]
        else:
            shot, windows = self._shot_and_windows()
            dumps = (windows,)
        package = self.app_package

        def png() -> bytes:
            return shot.masked_png(dumps, package)

        return png

    def open_app_link(self, url: str) -> None:
        """Open a Pinduoduo page by deep link (the pack's order-list link). Only plain page links
        (:data:`cmbuyer.agent.screens.after_submit.DEEP_LINK_RE`) are sent to the shell."""
        from cmbuyer.agent.screens.after_submit import DEEP_LINK_RE

        if DEEP_LINK_RE.fullmatch(url) is None:
            raise PhoneError("refusing a deep link that is not a plain Pinduoduo page", "SCREEN_UNRECOGNIZED")
        self._announce({"kind": "open_url", "url": url})
        self._forget_screen()
        self.shell(["am", "start", "-a", "android.intent.action.VIEW", "-d", url], "am start")


_FOCUS_RE = re.compile(r"mCurrentFocus=Window\{\S+ u\d+ ([A-Za-z0-9._]{1,200})/", re.ASCII)
_FOCUS_LINE_RE = re.compile(r"mCurrentFocus=", re.ASCII)


def parse_focused_package(dumpsys_window: str) -> str | None:
    """``mCurrentFocus=Window{8a3f2c1 u0 com.tencent.mm/.plugin.wallet…}`` → ``com.tencent.mm``.
    None for ``mCurrentFocus=null``, a window without an activity, no line, or disagreeing lines."""
    lines = _FOCUS_LINE_RE.findall(dumpsys_window)
    found = set(_FOCUS_RE.findall(dumpsys_window))
    if len(found) != 1 or len(lines) < 1:
        return None
    if len(lines) != len(_FOCUS_RE.findall(dumpsys_window)):
        return None  # some focus line names no app window (e.g. null on another display)
    package: str = found.pop()
    return package


class _Unset:
    pass


_UNSET = _Unset()
