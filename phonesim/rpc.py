"""The on-device uiautomator2 server's JSON-RPC methods (``POST /jsonrpc/0``).

Covers what uiautomator2 3.x sends for connect/info/dump/click/screenshot/keys/swipes and
the selector methods behind ``d(text=...)``. Unknown methods get JSON-RPC error -32601,
which uiautomator2 raises as ``RPCUnknownError``.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from . import selector
from .phone import Phone
from .system_ui import DEVICE_MODEL

NOT_CONNECTED = "java.lang.IllegalStateException: UiAutomation not connected, UiAutomation@3d5a0c8[id=-1, flags=0]"
TAP_METHODS = ("click", "longClick")
TOUCH_SLOP = 24  # px a finger may move and still make a tap (Android's default slop at 480 dpi)


class RpcError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def handle(phone: Phone, body: bytes) -> bytes:
    """One JSON-RPC request body → response body (always a JSON-RPC 2.0 object)."""
    try:
        req = json.loads(body)
        if not isinstance(req, dict) or not isinstance(req.get("method"), str):
            raise RpcError(-32600, "Invalid Request")
        rid = req.get("id", 1)
    except (ValueError, RpcError):
        return _dump({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
    method: str = req["method"]
    params = req.get("params") or []
    phone.count("rpc_calls")
    phone.journal.record("rpc", method=method, screen=phone.screen)
    if method not in ("dumpWindowHierarchy", "takeScreenshot", *TAP_METHODS):
        phone.sleep("rpc")  # those three have their own latency knobs
    crash = _take_crash(phone, method)
    try:
        if crash is not None and not crash.params.get("applied", True):
            raise RpcError(-32001, NOT_CONNECTED)
        result = _call(phone, method, params)
        if crash is not None:
            raise RpcError(-32001, NOT_CONNECTED)  # the call took effect, then the server died
        return _dump({"jsonrpc": "2.0", "id": rid, "result": result})
    except RpcError as exc:
        return _dump(
            {"jsonrpc": "2.0", "id": rid, "error": {"code": exc.code, "message": exc.message, "data": exc.message}}
        )


def _dump(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=True).encode("ascii")


def _take_crash(phone: Phone, method: str) -> Any:
    with phone.lock:
        fault = phone.faults.take(
            {"rpc_crash"}, phone.counters, phone.screen, accept=lambda f: f.params.get("method") in (None, method)
        )
        if fault is not None:
            phone.uia_alive = False  # /ping fails until uiautomator2 relaunches the server
            phone.journal.record("fault", fault="rpc_crash", fault_id=fault.id, method=method)
        return fault


def _args(params: Any) -> list[Any]:
    return list(params) if isinstance(params, list | tuple) else [params]


def _node(phone: Phone, sel: Any) -> Any:
    node = selector.find(phone.windows(), sel if isinstance(sel, dict) else {})
    if node is None:
        raise RpcError(-32002, f"androidx.test.uiautomator.UiObjectNotFoundException: UiSelector{sel}")
    return node


def _call(phone: Phone, method: str, params: Any) -> Any:
    args = _args(params)
    if method == "deviceInfo":
        pkg = phone.front_package()
        return {
            "currentPackageName": pkg,
            "displayHeight": 2400,
            "displayWidth": 1080,
            "displayRotation": 0,
            "displaySizeDpX": 360,
            "displaySizeDpY": 800,
            "naturalOrientation": True,
            "productName": str(phone.cfg.device.get("model", DEVICE_MODEL)),
            "screenOn": True,
            "sdkInt": int(phone.cfg.device.get("sdk", 33)),
        }
    if method == "dumpWindowHierarchy":
        max_depth = int(args[1]) if len(args) > 1 and args[1] is not None else 50
        return phone.dump(max_depth)
    if method == "takeScreenshot":
        scale = float(args[0]) if args else 1.0
        quality = int(args[1]) if len(args) > 1 else 80
        return base64.b64encode(phone.screenshot("jpeg", quality=quality, scale=scale)).decode("ascii")
    if method in TAP_METHODS and len(args) >= 2 and not isinstance(args[0], dict):
        phone.tap(int(args[0]), int(args[1]), via="rpc_" + method)
        return True
    if method in ("pressKey", "pressKeyCode"):
        phone.key(args[0] if args else "", via="rpc_" + method)
        return True
    if method in ("swipe", "drag"):
        phone.swipe([int(v) for v in args[:4]], via="rpc_" + method)
        return True
    if method == "swipePoints":
        phone.swipe([int(v) for v in (args[0] if args else [])], via="rpc_swipePoints")
        return True
    if method == "injectInputEvent":
        return _inject(phone, args)
    if method in ("scrollForward", "scrollBackward"):
        return _scroll(phone, method, args)
    if method in ("objInfo", "waitForExists", "waitUntilGone", "count", "objInfoOfAllInstances", "exist"):
        return _selector_query(phone, method, args)
    if method in ("setText", "clearTextField"):
        node = _node(phone, args[0] if args else {})
        return phone.set_text_on(node, str(args[1]) if method == "setText" and len(args) > 1 else "", "rpc_setText")
    if method == "getText":
        return _node(phone, args[0] if args else {}).text
    if method == "setClipboard":
        phone.clipboard = str(args[1] if len(args) > 1 else args[0] if args else "")
        return None
    if method == "getClipboard":
        return phone.clipboard
    if method == "pasteClipboard":
        phone.input_text(phone.clipboard, via="rpc_paste")
        return None
    if method in ("getLastToast",):
        with phone.lock:
            return phone.app.toast
    if method in (
        "clearLastToast",
        "wakeUp",
        "sleep",
        "freezeRotation",
        "setOrientation",
        "makeToast",
        "clearInputText",
        "openNotification",
        "openQuickSettings",
        "clearLastTraversedText",
    ):
        return True
    raise RpcError(-32601, f"Method not found: {method}")


def _inject(phone: Phone, args: list[Any]) -> bool:
    # touch.down … up (uiautomator2's d.touch, double_click, custom gestures): a tap on ACTION_UP,
    # or a swipe from the ACTION_DOWN point when the finger moved more than the touch slop
    if len(args) < 3:
        return True
    action, x, y = int(args[0]), int(args[1]), int(args[2])
    if action == 0:
        phone.touch_down = (x, y)
    elif action == 1:
        start, phone.touch_down = phone.touch_down, None
        if start is not None and max(abs(start[0] - x), abs(start[1] - y)) > TOUCH_SLOP:
            phone.swipe([start[0], start[1], x, y], via="rpc_injectInputEvent")
        else:
            phone.tap(x, y, via="rpc_injectInputEvent")
    return True


def _scroll(phone: Phone, method: str, args: list[Any]) -> bool:
    """``d(scrollable=True).scroll.horiz.forward()``: one page-wise swipe inside the list's bounds.

    Only the order sheet's horizontal option lists scroll; anything else answers False, as
    UiScrollable does when it cannot scroll. Returns True when the list moved.
    """
    node = _node(phone, args[0] if args else {})
    vertical = bool(args[1]) if len(args) > 1 else True
    if vertical or not node.action or node.action[0] != "scroll":
        return False
    left, top, right, bottom = node.bounds
    y = (top + bottom) // 2
    points = [right - 60, y, left + 60, y] if method == "scrollForward" else [left + 60, y, right - 60, y]
    return bool(phone.swipe(points, via="rpc_" + method)["moved"])


def _selector_query(phone: Phone, method: str, args: list[Any]) -> Any:
    sel = args[0] if args and isinstance(args[0], dict) else {}
    if method == "count":
        return len(selector.find_all(phone.windows(), sel))
    if method == "objInfoOfAllInstances":
        return [selector.obj_info(n) for n in selector.find_all(phone.windows(), sel)]
    if method == "objInfo":
        return selector.obj_info(_node(phone, sel))
    if method == "exist":
        return selector.find(phone.windows(), sel) is not None
    timeout = min(float(args[1]) / 1000 if len(args) > 1 else 0.0, 30.0)
    deadline = time.monotonic() + timeout
    want = method == "waitForExists"
    while True:
        if (selector.find(phone.windows(), sel) is not None) == want:
            return True
        if time.monotonic() >= deadline or phone._stop.wait(0.1):
            return False
