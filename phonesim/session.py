"""Session playback: a recorded session (captures + ``session.json``) served as a phone.

A *captures directory* holds one sub-directory per capture (``dump.xml``, ``screenshot.png``,
``meta.json``; the format is shared with the agent's ``capture``/``dry-run``, see docs/phonesim.md
"Sessions") and ``session.json``, which says which action on which capture leads to which next
capture. :class:`SessionPhone` is a :class:`~cmbuyer.phonesim.phone.Phone` whose screen is the
current capture: dumps return its ``dump.xml`` unchanged, screenshots its ``screenshot.png``,
``dumpsys`` reports the capture's foreground package/activity and the session's app version.

Actions follow the session's steps (:meth:`Session.match`). What a tap hits (journaled with it) is the
topmost node at the point: within a window by ``drawing-order`` (:func:`~cmbuyer.phonesim.nodes.hit_path`),
across windows by the capture's ``window_z_order`` (meta.json, written by the recorder). A dump's window
order is not its z-order, so when two windows hold the point and the capture does not say which is on
top, the tap is refused like an unknown action (never a guess). An action the session does not know
ends the rehearsal: the screen stays on the current capture, every later action is refused too,
the journal records each refusal, and a report (:data:`REPORT_FILE`) names the capture, the action
and the node under the point. Playback never guesses a next screen.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError

from cmbuyer.schemas.files import read_regular
from cmbuyer.schemas.strictjson import StrictJSONError, loads_strict

from .hierarchy import XML_FLAGS
from .journal import JournalSink, is_payment_text
from .nodes import Node, clickable_target, hit_path
from .phone import ACTIVITY, KEY_NAMES, Phone
from .scenario import AppVersion, PhoneConfig
from .screenshot import jpeg_bytes
from .system_ui import LAUNCHER, LAUNCHER_ACTIVITY, SYSUI

log = logging.getLogger(__name__)

SESSION_FILE = "session.json"
REPORT_FILE = "rehearsal-report.json"
SESSION_FORMAT = 1
REPORT_FORMAT = 1
# contract: a swipe matches a step starting within this many px (Android's touch slop at 480 dpi)
SWIPE_TOLERANCE = 24
# what the agent sends (tap/swipe/back/open_url) plus what other clients may send; the recorder
# writes the same kinds
ACTION_KINDS = ("tap", "swipe", "back", "open_url", "home", "launch", "force_stop")
MAX_DUMP_BYTES = 8 * 1024 * 1024
# session files are read bounded and never from a FIFO/device (cmbuyer.schemas.files): a recorded phone
# screen is ~0.5 MB of PNG and ~3 MP; a generated session.json of 10^5 steps stays under 16 MB
MAX_PNG_BYTES = 32 * 1024 * 1024
MAX_SCREEN_PIXELS = 16_000_000
MAX_META_BYTES = 256 * 1024
MAX_SESSION_BYTES = 16 * 1024 * 1024
_COMPONENT_RE = re.compile(r"([A-Za-z][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)+)/([A-Za-z0-9_.$]+)")
_BOUNDS_RE = re.compile(r"^\[(-?\d+),(-?\d+)\]\[(-?\d+),(-?\d+)\]$")
_FORBIDDEN_RE = re.compile(r"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)
SYSTEM_PACKAGES = (SYSUI, LAUNCHER)


class SessionError(ValueError):
    """The captures directory or its session.json is unusable; the message names the file and
    the offending part (``session.json: steps[3].action.node.bounds: ...``)."""


# --------------------------------------------------------------------------------------- loading
@dataclass
class Capture:
    """One recorded screen: the dump text served as is, the PNG bytes, the window trees parsed
    from the dump (hit tests, selector queries), the window in front and ``z_order`` — meta.json's
    ``window_z_order``: the indexes of ``windows`` from the topmost down, None when the capture does not
    say (a real dump's window order is not its z-order)."""

    name: str
    dump_xml: str
    png: bytes
    windows: list[Node]
    package: str
    activity: str
    z_order: list[int] | None = None

    def hit(self, x: int, y: int) -> tuple[list[Node], str]:
        """The path to the topmost node at (x, y) (:func:`hit_path`; empty when no window holds the
        point) and "" — or an empty path and why the topmost node cannot be told: two windows hold the
        point and the capture does not say which is on top."""
        paths = [(i, p) for i, p in ((i, hit_path(w, x, y)) for i, w in enumerate(self.windows)) if p]
        if len(paths) <= 1:
            return (paths[0][1] if paths else []), ""
        if self.z_order is None:
            return [], f"windows overlap at {x},{y} and capture {self.name} does not say which is on top"
        z = self.z_order
        return min(paths, key=lambda ip: z.index(ip[0]))[1], ""


@dataclass(frozen=True)
class Step:
    """``{"from", "action", "to"}`` of session.json; ``index`` is its position in ``steps``."""

    index: int
    source: str  # a capture name or "*"
    action: dict[str, Any]
    to: str

    def describe(self) -> dict[str, Any]:
        return {"index": self.index, "from": self.source, "action": self.action, "to": self.to}


@dataclass
class Session:
    """A loaded captures directory. Build with :func:`load_session`."""

    directory: Path
    app: AppVersion
    start: str
    captures: dict[str, Capture]
    steps: list[Step] = field(default_factory=list)

    def match(self, capture: str, action: dict[str, Any]) -> tuple[Step | None, str]:
        """The step ``action`` on ``capture`` follows, or (None, why not).

        Contract rules: a tap follows the step from ``capture`` (or ``*``) whose node bounds contain
        the point, the smallest if several; a swipe the one with the same direction starting within
        :data:`SWIPE_TOLERANCE` px (nearest start); back/home/launch/force_stop the one of that kind;
        open_url the one with the same URL. A step from the capture itself wins over a ``*`` step
        on a tie. Two steps still tied that lead to different captures → no step (never a guess).
        """
        kind = action["kind"]
        cands = [s for s in self.steps if s.source in (capture, "*") and s.action["kind"] == kind]
        if kind == "tap":
            x, y = action["x"], action["y"]
            ranked = [
                (_area(s.action["node"]["bounds"]), s) for s in cands if _inside(s.action["node"]["bounds"], x, y)
            ]
        elif kind == "swipe":
            want = _direction(action)
            ranked = [
                (abs(s.action["x1"] - action["x1"]) + abs(s.action["y1"] - action["y1"]), s)
                for s in cands
                if abs(s.action["x1"] - action["x1"]) <= SWIPE_TOLERANCE
                and abs(s.action["y1"] - action["y1"]) <= SWIPE_TOLERANCE
                and _direction(s.action) == want
            ]
        elif kind == "open_url":
            ranked = [(0, s) for s in cands if s.action["url"] == action["url"]]
        else:
            ranked = [(0, s) for s in cands]
        if not ranked:
            what = {
                "tap": " whose node bounds hold the point",
                "swipe": " starting there in that direction",
                "open_url": " for this URL",
            }.get(kind, "")
            return None, f"no {kind} step from {capture}{what} in {SESSION_FILE}"
        best = min(rank for rank, _ in ranked)
        tied = [s for rank, s in ranked if rank == best]
        own = [s for s in tied if s.source == capture]
        tied = own or tied
        if len({s.to for s in tied}) > 1:
            return None, f"steps {[s.index for s in tied]} disagree on the next capture"
        return tied[0], ""


def _area(b: list[int]) -> int:
    return (b[2] - b[0]) * (b[3] - b[1])


def _inside(b: list[int], x: int, y: int) -> bool:
    return b[0] <= x < b[2] and b[1] <= y < b[3]


def _direction(a: dict[str, Any]) -> str:
    dx, dy = a["x2"] - a["x1"], a["y2"] - a["y1"]
    if abs(dx) >= abs(dy):
        return "left" if dx < 0 else "right"
    return "up" if dy < 0 else "down"


def parse_windows(xml: str, where: str = "dump.xml") -> list[Node]:
    """The window roots of a uiautomator2 hierarchy dump as :class:`Node` trees (no actions).

    Raises SessionError on unparsable XML, DOCTYPE/ENTITY declarations, a root other than
    ``hierarchy`` or malformed ``bounds``."""
    if len(xml) > MAX_DUMP_BYTES or _FORBIDDEN_RE.search(xml):
        raise SessionError(f"{where}: too large or declares a DOCTYPE/ENTITY")
    try:
        root = ET.fromstring(xml.encode("utf-8"))  # noqa: S314 - no DTD possible (checked above), size capped
    except (ET.ParseError, UnicodeEncodeError) as exc:
        raise SessionError(f"{where}: not a readable hierarchy dump ({exc})") from None
    if root.tag != "hierarchy":
        raise SessionError(f"{where}: root element is {root.tag!r}, not hierarchy")

    def build(el: ET.Element) -> Node:
        m = _BOUNDS_RE.match(el.get("bounds", ""))
        if m is None:
            raise SessionError(f"{where}: node with bad bounds {el.get('bounds')!r}")
        flags = {attr: el.get(key, "false") == "true" for key, attr in XML_FLAGS.items()}
        flags["enabled"] = el.get("enabled", "true") == "true"
        flags["visible"] = el.get("visible-to-user", "true") == "true"
        left, top, right, bottom = (int(v) for v in m.groups())
        order = el.get("drawing-order", "")
        node = Node(
            el.get("class", ""),
            (left, top, right, bottom),
            text=el.get("text", ""),
            rid=el.get("resource-id", ""),
            desc=el.get("content-desc", ""),
            package=el.get("package", ""),
            hint=el.get("hint", ""),
            children=[build(c) for c in el if c.tag == "node"],
            drawing_order=int(order) if order.isascii() and order.isdigit() else None,
        )
        for attr, value in flags.items():  # the boolean fields XML_FLAGS names, each read from the dump
            setattr(node, attr, value)
        return node

    return [build(el) for el in root if el.tag == "node"]


def _front(windows: list[Node], meta: dict[str, Any], app_package: str) -> tuple[str, str]:
    """(package, activity) in front: the component in meta.json's ``activity`` (``pkg/Activity``
    or a ``mCurrentFocus=Window{… pkg/Activity}`` line), else the package of the dump's app nodes."""
    m = _COMPONENT_RE.search(str(meta.get("activity") or ""))
    if m is not None:
        pkg, act = m.group(1), m.group(2)
        return pkg, (pkg + act if act.startswith(".") else act)
    packages = [w.package for w in windows if w.package and w.package not in SYSTEM_PACKAGES]
    if app_package in packages:
        return app_package, ACTIVITY
    if packages:
        return packages[0], f"{packages[0]}.MainActivity"
    pkg, act = LAUNCHER_ACTIVITY.split("/")
    return pkg, act


def _load_capture(path: Path, app_package: str) -> Capture:
    try:
        # bytes, not read_text: universal newlines would turn the dump's CRLF header into LF
        raw = read_regular(path / "dump.xml", MAX_DUMP_BYTES)
        xml = raw.decode("utf-8")
        png = read_regular(path / "screenshot.png", MAX_PNG_BYTES)
    except OSError as exc:
        raise SessionError(f"capture {path.name}: {Path(exc.filename or '').name}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise SessionError(f"capture {path.name}: dump.xml: not UTF-8 ({exc.reason})") from None
    meta: dict[str, Any] = {}
    if (path / "meta.json").exists():
        try:
            meta = loads_strict(read_regular(path / "meta.json", MAX_META_BYTES), allow_floats=True)
        except OSError as exc:
            raise SessionError(f"capture {path.name}: meta.json unreadable ({exc.strerror})") from None
        except StrictJSONError as exc:
            raise SessionError(f"capture {path.name}: meta.json unreadable (not strict JSON: {exc})") from None
        if not isinstance(meta, dict):
            raise SessionError(f"capture {path.name}: meta.json is not an object")
    # a capture changed after it was taken is not the screen that was recorded (fail closed)
    for key, data in (("dump_sha256", raw), ("screenshot_sha256", png)):
        want = meta.get(key)
        if want is not None and hashlib.sha256(data).hexdigest() != want:
            raise SessionError(f"capture {path.name}: {key} does not match the stored file")
    try:
        with Image.open(io.BytesIO(png)) as img:
            if img.width * img.height > MAX_SCREEN_PIXELS:  # served re-encoded: a bomb would be decoded
                raise SessionError(
                    f"capture {path.name}: screenshot.png is {img.width}x{img.height}, "
                    f"more than {MAX_SCREEN_PIXELS} pixels"
                )
            img.verify()
    except (UnidentifiedImageError, OSError, SyntaxError, Image.DecompressionBombError) as exc:
        raise SessionError(f"capture {path.name}: screenshot.png is not an image ({exc})") from None
    windows = parse_windows(xml, f"capture {path.name}: dump.xml")
    pkg, act = _front(windows, meta, app_package)
    z_order = meta.get("window_z_order")
    if z_order is not None and (
        not isinstance(z_order, list)
        or any(type(i) is not int for i in z_order)
        or sorted(z_order) != list(range(len(windows)))
    ):
        raise SessionError(
            f"capture {path.name}: meta.json: window_z_order must list each window of dump.xml once"
            f" (0..{len(windows) - 1})"
        )
    return Capture(path.name, xml, png, windows, pkg, act, z_order)


def _int(v: Any, where: str) -> int:
    if type(v) is not int:
        raise SessionError(f"{SESSION_FILE}: {where}: must be an integer")
    return v


def _check_action(action: Any, where: str) -> dict[str, Any]:
    if not isinstance(action, dict) or action.get("kind") not in ACTION_KINDS:
        raise SessionError(f"{SESSION_FILE}: {where}.kind: must be one of {', '.join(ACTION_KINDS)}")
    kind = action["kind"]
    if kind == "tap":
        x, y = _int(action.get("x"), f"{where}.x"), _int(action.get("y"), f"{where}.y")
        node = action.get("node")
        bounds = node.get("bounds") if isinstance(node, dict) else None
        if (
            not isinstance(bounds, list)
            or len(bounds) != 4
            or any(type(v) is not int for v in bounds)
            or bounds[0] >= bounds[2]
            or bounds[1] >= bounds[3]
        ):
            raise SessionError(f"{SESSION_FILE}: {where}.node.bounds: must be [left, top, right, bottom]")
        if not _inside(bounds, x, y):
            raise SessionError(f"{SESSION_FILE}: {where}: the tap point lies outside node.bounds")
    elif kind == "swipe":
        for key in ("x1", "y1", "x2", "y2"):
            _int(action.get(key), f"{where}.{key}")
    elif kind == "open_url" and (not isinstance(action.get("url"), str) or not action["url"]):
        raise SessionError(f"{SESSION_FILE}: {where}.url: must be a non-empty string")
    return action


def load_session(directory: str | Path) -> Session:
    """Load and check a captures directory with its session.json.

    Raises SessionError (one line naming the file and the JSON path) for: a missing or unreadable
    session.json, ``session_format`` other than 1, an ``app`` without package/version, ``start`` or a
    step's ``from``/``to`` naming no capture, an unknown action kind or a malformed action, a
    capture without dump.xml/screenshot.png or whose hashes differ from its meta.json, and two steps
    that give the same action on the same capture different next captures."""
    root = Path(directory)
    try:
        # strict: a duplicate key or 1.0 for 1 would make playback pick one reading of the file
        data = loads_strict(read_regular(root / SESSION_FILE, MAX_SESSION_BYTES))
    except OSError as exc:
        raise SessionError(f"{root / SESSION_FILE}: cannot read ({exc.strerror or exc})") from None
    except StrictJSONError as exc:
        raise SessionError(f"{root / SESSION_FILE}: not strict JSON ({exc})") from None
    if (
        not isinstance(data, dict)
        or type(data.get("session_format")) is not int
        or data["session_format"] != SESSION_FORMAT
    ):
        raise SessionError(f"{SESSION_FILE}: session_format: must be {SESSION_FORMAT}")
    app = data.get("app")
    if (
        not isinstance(app, dict)
        or not isinstance(app.get("package"), str)
        or not isinstance(app.get("version_name"), str)
        or type(app.get("version_code")) is not int
    ):
        raise SessionError(f"{SESSION_FILE}: app: needs package, version_name and an integer version_code")
    version = AppVersion(app["package"], app["version_name"], app["version_code"])
    captures: dict[str, Capture] = {}
    for sub in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        captures[sub.name] = _load_capture(sub, version.package)
    start = data.get("start")
    if not isinstance(start, str) or start not in captures:
        raise SessionError(f"{SESSION_FILE}: start: {start!r} is not a capture in {root}")
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list):
        raise SessionError(f"{SESSION_FILE}: steps: must be a list")
    steps = []
    for i, raw in enumerate(raw_steps):
        where = f"steps[{i}]"
        if not isinstance(raw, dict):
            raise SessionError(f"{SESSION_FILE}: {where}: must be an object")
        source, to = raw.get("from"), raw.get("to")
        if not isinstance(source, str) or (source != "*" and source not in captures):
            raise SessionError(f"{SESSION_FILE}: {where}.from: {source!r} is not a capture or '*'")
        if not isinstance(to, str) or to not in captures:
            raise SessionError(f"{SESSION_FILE}: {where}.to: {to!r} is not a capture")
        steps.append(Step(i, raw["from"], _check_action(raw.get("action"), f"{where}.action"), raw["to"]))
    session = Session(root, version, start, captures, steps)
    _check_conflicts(session)
    return session


def _same_action(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when the two actions are one action for playback (same kind and place/URL)."""
    return _action_key(a) == _action_key(b)


def _action_key(a: dict[str, Any]) -> tuple[Any, ...]:
    """What :func:`_same_action` compares, as a hashable key."""
    if a["kind"] == "tap":
        return "tap", tuple(a["node"]["bounds"])
    if a["kind"] == "swipe":
        return "swipe", a["x1"], a["y1"], _direction(a)
    if a["kind"] == "open_url":
        return "open_url", a["url"]
    return (a["kind"],)


def _check_conflicts(session: Session) -> None:
    # one pass with a dict (a generated session may hold 10^5 steps: no pairwise comparison)
    first: dict[tuple[Any, ...], Step] = {}
    for b in session.steps:
        a = first.setdefault((b.source, *_action_key(b.action)), b)
        if a.to != b.to:
            raise SessionError(
                f"{SESSION_FILE}: steps[{a.index}] and steps[{b.index}]: the same "
                f"{a.action['kind']} on {a.source} leads to {a.to} and to {b.to}"
            )


# -------------------------------------------------------------------------------------- playback
def _utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _node_info(node: Node | None) -> dict[str, Any] | None:
    if node is None:
        return None
    return {
        "text": node.text,
        "desc": node.desc,
        "resource_id": node.rid,
        "class": node.cls,
        "package": node.package,
        "bounds": list(node.bounds),
    }


def _describe(action: dict[str, Any]) -> str:
    kind = str(action["kind"])
    if kind == "tap":
        return f"tap {action['x']},{action['y']}"
    if kind == "swipe":
        return f"swipe {action['x1']},{action['y1']} -> {action['x2']},{action['y2']}"
    if kind == "open_url":
        return f"open_url {action['url']}"
    if kind == "key":
        return f"key {action['key']}"
    return kind


class SessionPhone(Phone):
    """A phone that plays a :class:`Session` (see the module docstring for the rules).

    ``report_path``: where the rehearsal report is written (default ``<session dir>/`` +
    :data:`REPORT_FILE`); ``announce``: called with one line when the rehearsal ends (the CLI prints
    it). Extra journal fields on every action entry: ``session_step`` (index followed or None),
    ``to`` (capture after), ``refused`` (bool), ``reason``; the end adds a ``rehearsal_end`` entry.
    """

    def __init__(
        self,
        session: Session,
        serial: str,
        transport_id: int,
        stop_event: threading.Event,
        sink: JournalSink | None = None,
        report_path: str | Path | None = None,
        announce: Callable[[str], None] | None = None,
    ):
        cfg = PhoneConfig(
            serial=serial,
            app=AppVersion(session.app.package, session.app.version_name, session.app.version_code),
            catalogue={},
        )
        super().__init__(cfg, transport_id, stop_event, sink)
        self.session = session
        self.capture = session.start
        self.url = ""  # intent data of the last open_url step followed (dumpsys activity top)
        self.followed = 0
        self.refused = 0
        self.ended: dict[str, Any] | None = None
        self.report_path = Path(report_path) if report_path else session.directory / REPORT_FILE
        self._announce = announce
        self._write_report()

    # ---------------------------------------------------------------- what the phone shows
    @property
    def current(self) -> Capture:
        return self.session.captures[self.capture]

    @property
    def screen(self) -> str:
        return self.capture

    def windows(self) -> list[Node]:
        with self.lock:
            return self.current.windows

    def dump(self, max_depth: int = 50) -> str:
        self.sleep("dump")
        with self.lock:
            self.counters["dumps"] += 1
            cap = self.current
            self.journal.record("dump", screen=cap.name, fault=None, package=cap.package)
            return cap.dump_xml

    def screenshot(self, fmt: str = "png", quality: int = 80, scale: float = 1.0) -> bytes:
        self.sleep("screenshot")
        with self.lock:
            self.counters["screenshots"] += 1
            cap = self.current
            self.journal.record("screenshot", screen=cap.name, format=fmt, package=cap.package)
        if fmt == "png":
            return cap.png
        with Image.open(io.BytesIO(cap.png)) as img:
            return jpeg_bytes(img.convert("RGB"), quality, scale)

    def focus(self) -> tuple[str, str]:
        with self.lock:
            return self.current.package, self.current.activity

    def model_focus(self) -> tuple[str, str]:
        return self.focus()

    def front_package(self) -> str:
        with self.lock:
            return self.current.package

    def app_running(self) -> bool:
        # the app runs while one of its screens is shown (a capture knows nothing of background apps)
        with self.lock:
            return self.current.package == self.cfg.app.package

    def page_url(self) -> str:
        with self.lock:
            return self.url if self.current.package == self.cfg.app.package else ""

    def state(self) -> dict[str, Any]:
        """Snapshot: current capture, steps followed, actions refused, the end (or None), counters."""
        with self.lock:
            return {
                "serial": self.serial,
                "screen": self.capture,
                "session": str(self.session.directory),
                "version_name": self.cfg.app.version_name,
                "version_code": self.cfg.app.version_code,
                "foreground_package": self.current.package,
                "steps_followed": self.followed,
                "actions_refused": self.refused,
                "ended": self.ended,
                "counters": dict(self.counters),
                "online": self.online,
                "uia_alive": self.uia_alive,
            }

    # ---------------------------------------------------------------- actions
    def _act(
        self, action: dict[str, Any], journal_kind: str, point: tuple[int, int] | None = None, **extra: Any
    ) -> dict[str, Any]:
        """Follow ``action`` or refuse it; journal it either way; returns the journal entry."""
        with self.lock:
            before = self.capture
            path, unknown = self.current.hit(*point) if point is not None else ([], "")
            node = path[-1] if path else None
            target = clickable_target(path)
            if self.ended:
                step, why = None, "the rehearsal already ended"
            elif unknown:  # what the finger would hit cannot be told: never guess (and never journal a guess)
                step, why = None, unknown
            else:
                step, why = self.session.match(before, action)
            if step is not None:
                self.capture = step.to
                self.followed += 1
                if action["kind"] == "open_url":
                    self.url = action["url"]
            else:
                self.refused += 1
            texts = [t for n in path for t in (n.text, n.desc)]
            entry = self.journal.record(
                journal_kind,
                **extra,
                screen=before,
                node=node.summary() if node else None,
                target=target.summary() if target else None,
                role="",
                payment=is_payment_text(*texts),
                package=node.package if node else self.current.package,
                effect="step" if step else "refused",
                session_step=step.index if step else None,
                to=self.capture,
                refused=step is None,
                reason=why or None,
                dropped=False,
                applied=step is not None,
            )
            if step is None and self.ended is None:
                self._end(before, action, node, target, why, entry["seq"])
            else:
                self._write_report()
            return entry

    def _end(
        self, capture: str, action: dict[str, Any], node: Node | None, target: Node | None, why: str, seq: int
    ) -> None:
        self.ended = {
            "capture": capture,
            "action": action,
            "node": _node_info(node),
            "target": _node_info(target),
            "reason": why,
            "journal_seq": seq,
            "at": _utc_now(),
        }
        self.journal.record("rehearsal_end", **self.ended)
        self._write_report()
        n = node
        where = (
            f'; node text="{n.text}" desc="{n.desc}" resource-id="{n.rid}" bounds={list(n.bounds)}'
            if n is not None
            else ""
        )
        line = (
            f"REHEARSAL ENDED on {self.serial} at capture {capture}: {_describe(action)} ({why}){where}; "
            f"report {self.report_path}"
        )
        log.warning("%s", line)
        if self._announce is not None:
            self._announce(line)

    def tap(self, x: int, y: int, via: str) -> dict[str, Any]:
        self.sleep("tap")
        self.count("taps")
        entry = self._act({"kind": "tap", "x": x, "y": y}, "tap", (x, y), x=x, y=y, via=via, goods_id=None)
        return entry

    def key(self, key: str | int, via: str) -> str:
        self.sleep("key")
        self.count("keys")
        name = KEY_NAMES.get(str(key).strip().lower(), str(key).strip().lower())
        action = {"kind": name} if name in ("back", "home") else {"kind": "key", "key": name}
        return str(self._act(action, "key", key=name, via=via)["effect"])

    def swipe(self, points: list[int], via: str) -> dict[str, Any]:
        self.sleep("tap")
        if len(points) < 4:
            return {
                **self._act(
                    {"kind": "swipe", "x1": 0, "y1": 0, "x2": 0, "y2": 0},
                    "swipe",
                    points=points,
                    via=via,
                    list=None,
                    list_bounds=None,
                ),
                "moved": 0,
            }
        action = {"kind": "swipe", "x1": points[0], "y1": points[1], "x2": points[-2], "y2": points[-1]}
        entry = self._act(action, "swipe", (points[0], points[1]), points=points, via=via, list=None, list_bounds=None)
        # JSON-RPC scrollForward answers whether the list moved: a followed step counts as moved
        return {**entry, "moved": 0 if entry["refused"] else 1}

    def deep_link(self, url: str) -> str | None:
        with self.lock:
            self.counters["deep_links"] += 1
        self._act({"kind": "open_url", "url": url}, "deep_link", url=url)
        return "session"  # the intent resolves (the app is installed); what shows is the session's call

    def launch_app(self) -> None:
        self._act({"kind": "launch"}, "launch")

    def force_stop(self, package: str) -> None:
        if package == self.cfg.app.package:
            self._act({"kind": "force_stop"}, "force_stop", package=package)

    def input_text(self, value: str, via: str) -> str:
        # typed text is not part of the session format: it ends the rehearsal like any unknown action
        return str(self._act({"kind": "text", "text": value}, "text", text=value, via=via)["effect"])

    def set_text_on(self, node: Node, value: str, via: str) -> bool:
        return not self._act({"kind": "text", "text": value}, "text", text=value, via=via)["refused"]

    # ---------------------------------------------------------------- the report
    def report(self) -> dict[str, Any]:
        """The rehearsal report (also written to :attr:`report_path`)."""
        with self.lock:
            return {
                "report_format": REPORT_FORMAT,
                "session": str(self.session.directory),
                "serial": self.serial,
                "status": "ended" if self.ended else "running",
                "capture": self.capture,
                "steps_followed": self.followed,
                "actions_refused": self.refused,
                "ended": self.ended,
                "updated_at": _utc_now(),
            }

    def _write_report(self) -> None:
        """Atomic rewrite; a failure is logged, never raised into the adb handler."""
        try:
            tmp = self.report_path.with_name(self.report_path.name + ".tmp")
            tmp.write_text(json.dumps(self.report(), ensure_ascii=False, indent=2) + "\n", "utf-8")
            os.replace(tmp, self.report_path)
        except OSError as exc:
            log.warning("cannot write the rehearsal report %s: %s", self.report_path, exc)

    def close(self) -> None:
        self._write_report()
