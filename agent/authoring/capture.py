"""Capture bundles without personal data (folder format in docs/agent.md "Captures").

A capture is a directory holding the **scrubbed** ``dump.xml`` and ``screenshot.png``, ``meta.json``
and optionally ``expected.json`` (readings a person confirmed) or ``expected.proposed.json`` (readings
proposed by ``capture``/``dry-run`` for a person to confirm).

Scrubbing (:func:`scrub`):

- the dump keeps only the app's own nodes (package ``com.xunmeng.pinduoduo``): every subtree of
  another package is dropped — the system UI (status bar with notification icons that name people and
  phone numbers, a navigation bar where the phone has one), the launcher (on the real MIUI captures its
  gesture strip), any other app's window;
- the **address block** is found by structure: the pack's ``address_block`` selectors (one per
  layout) find the node holding the recipient's name, phone and address, and on the screens the pack
  lists there (the order sheet) every text and content-desc in its subtree is blanked and its bounds
  blacked out, whatever the texts look like (a dotted or landline number, no number at all). On such a
  screen a block that cannot be found refuses the capture (:class:`CaptureError`, nothing written):
  an unrecognized row is never stored unscrubbed;
- privacy rows lose their ``text`` and ``content-desc`` (the row and everything inside it): the rows
  the pack declares (``privacy.rows``) and, whatever the pack says, the clickable row around any text
  showing a phone number (``cmbuyer.schemas.summary.looks_like_phone``: mobile plain, masked, with
  ``+86`` or with spaces, dots or dashes; a landline with its area code);
- the screenshot is blacked out (Pillow) over: the status-bar band — the bounds of the system UI's
  ``status_bar`` node when the dump has one, else a fixed top band of :data:`STATUS_BAND_FRACTION`
  of the screen height (108 px on a 2400 px screen) —, every system-UI window
  (:func:`cmbuyer.agent.screens.masking.foreign_windows`: the status bar itself, a pulled-down shade, a
  heads-up notification, a navigation bar), every window of another package that does not cover the
  whole screen (the launcher's gesture strip over the bottom of the app on MIUI, a floating chat head),
  and every privacy row.
  Rectangles are scaled from dump coordinates to the screenshot by the ratio of the widths (windows
  span the full width; the dump may lack the navigation bar, so its height is not the screen's).

``meta.json`` says what was removed (``scrubbed``); its hashes are of the stored, scrubbed files.
Nothing is written unless the dump parses, the app is in front (some app node is left) and the
screenshot decodes (:class:`CaptureError` otherwise). An existing non-empty folder is never
overwritten unless ``force`` (then it is replaced as a whole).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError

from cmbuyer.agent.authoring.inspect import inspect_dump
from cmbuyer.agent.authoring.readings import READING_KEYS
from cmbuyer.agent.errors import AgentError, DumpNoAppNodes
from cmbuyer.agent.phone.adapter import parse_focused_package
from cmbuyer.agent.screens import readers
from cmbuyer.agent.screens.dump import APP_PACKAGE, Dump, Node, parse_dump
from cmbuyer.agent.screens.masking import (
    SYSTEM_UI,
    ImageUnreadable,
    black_out,
    foreign_windows,
    rect,
    screen_size,
)
from cmbuyer.agent.screens.packmodel import Pack, Selector
from cmbuyer.agent.screens.text import money_str, normalize
from cmbuyer.schemas.summary import looks_like_phone

CAPTURE_FORMAT = 1
EXPECTED_FORMAT = 1
STATUS_BAND_FRACTION = 0.045
# The readers' screens plus "unknown" (a capture of a screen no reader names), as packtest.py does.
SCREENS = (*readers.SCREENS, "unknown")
_MONEY_KEYS = ("unit_price", "confirm_amount")
_INT_KEYS = ("quantity", "submit_controls")
_JSON_KEYS = ("selected", "options", "sold_out", "payment_controls", "risk_walls", "payment_problems")
_XML_DECL = "<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>\n"


class CaptureError(Exception):
    """A capture was refused; the message says why (one line, no personal data). Nothing written."""


@dataclass(frozen=True)
class Scrubbed:
    """A scrubbed capture in memory: ``xml`` (str) and ``png`` (bytes) to store, ``dump`` the parsed
    scrubbed dump (what readings are made from), ``report`` the ``meta.json`` ``scrubbed`` object."""

    xml: str
    png: bytes
    dump: Dump
    report: dict[str, Any]


def _status_band(dump: Dump) -> tuple[int, int, int, int] | None:
    """The status-bar band from the dump (the system UI's ``status_bar`` node); None when the dump
    has none (the caller then blacks out a fixed top band of the screenshot)."""
    for node in dump.nodes:
        if node.package == SYSTEM_UI and node.resource_id.rsplit("/", 1)[-1] in ("status_bar", "status_bar_container"):
            if not node.bounds.empty:
                return rect(node.bounds)
    return None


def _drop_foreign(root: ET.Element, app_package: str) -> tuple[set[str], int]:
    """Remove every subtree rooted at a node of another package; returns (packages, nodes dropped)."""
    packages: set[str] = set()
    dropped = 0
    stack = [root]
    while stack:
        parent = stack.pop()
        for child in list(parent):
            if child.get("package", "") != app_package:
                for el in child.iter("node"):
                    packages.add(el.get("package", ""))
                    dropped += 1
                parent.remove(child)
            else:
                stack.append(child)
    return packages, dropped


def shows_phone(node: Node) -> bool:
    """True when the node's text or content-desc shows a phone number (:func:`looks_like_phone`)."""
    return looks_like_phone(normalize(node.text)) or looks_like_phone(normalize(node.desc))


def _address_blocks(dump: Dump, pack: Pack | None) -> tuple[str, list[Node]]:
    """``(screen, blocks)``: the screen the pack recognizes and the address blocks to scrub on it. On a
    screen the pack's ``address_block`` lists, no block found → CaptureError."""
    if pack is None:
        return "unknown", []
    screen = readers.recognize(dump, pack)
    spec = pack.address_block
    if spec is None or screen not in spec.screens:
        return screen, []
    blocks = spec.find(dump)
    if not blocks:
        raise CaptureError(
            f"the address block the pack {pack.id} declares is not on this {screen} screen: refusing to store "
            "a recipient's name, phone or address unscrubbed; nothing written"
        )
    return screen, blocks


def _privacy_rows(dump: Dump, rows: Sequence[Selector], blocks: Sequence[Node]) -> list[Node]:
    """The outermost rows to scrub: address blocks, pack rows, plus the clickable row around any
    phone number."""
    found: dict[int, Node] = {n.order: n for n in blocks}
    for selector in rows:
        for node in selector.find(dump):
            found[node.order] = node
    for node in dump.app_nodes():
        if shows_phone(node):
            row = node.clickable_self_or_ancestor()
            # a clickable sheet or scrim around the text would blank the whole screen: the row only
            # when it is no larger than a quarter of the screen, else the text node itself
            if row is None or not _small(row, dump):
                row = node
            found[row.order] = row
    outer = [n for n in found.values() if not any(a.order in found for a in n.ancestors())]
    return sorted(outer, key=lambda n: n.order)


def _small(node: Node, dump: Dump) -> bool:
    width, height = screen_size(dump)
    b = node.bounds
    return (b.right - b.left) * (b.bottom - b.top) <= width * height / 4


def _scrub_xml(
    xml: str, pack: Pack | None, app_package: str
) -> tuple[str, Dump, dict[str, Any], list[tuple[int, int, int, int]], tuple[int, int]]:
    original = parse_dump(xml, app_package)  # DumpError: nothing to store
    size = screen_size(original)
    band = _status_band(original)
    foreign = foreign_windows(original, app_package)
    root = ET.fromstring(xml)  # noqa: S314 - parse_dump refused DTDs/entities and capped the size
    packages, dropped = _drop_foreign(root, app_package)
    if len(root) == 0:
        raise DumpNoAppNodes("no node of the app package in the dump")
    kept = parse_dump(_XML_DECL + ET.tostring(root, encoding="unicode"), app_package).require_app()
    screen, blocks = _address_blocks(kept, pack)
    rows = _privacy_rows(kept, pack.privacy_rows if pack is not None else (), blocks)
    elements = list(root.iter("node"))  # document order = Node.order (parse_dump walks pre-order)
    for row in rows:
        for el in elements[row.order].iter("node"):
            for attr in ("text", "content-desc"):
                if el.get(attr):
                    el.set(attr, "")
    out = _XML_DECL + ET.tostring(root, encoding="unicode")
    scrubbed = parse_dump(out, app_package).require_app()
    rects = [*([band] if band else []), *foreign, *(rect(r.bounds) for r in rows)]
    report = {
        "dropped_packages": sorted(packages),
        "dropped_nodes": dropped,
        "blanked_rows": len(rows),
        "address_blocks": len(blocks),
        "screen": screen,
        "status_bar": "dump" if band else "fixed-band",
    }
    return out, scrubbed, report, rects, size


def _black_out(
    png: bytes, rects: list[tuple[int, int, int, int]], width: int, fixed_band: bool
) -> tuple[bytes, list[list[int]]]:
    extra: list[list[int]] = []
    if fixed_band:
        try:
            with Image.open(io.BytesIO(png)) as opened:
                w, h = opened.size
        except (UnidentifiedImageError, OSError, ValueError) as exc:
            raise CaptureError("the screenshot is not a readable image; nothing written") from exc
        extra.append([0, 0, w, max(1, round(h * STATUS_BAND_FRACTION))])
    try:
        return black_out(png, rects, width, extra)
    except ImageUnreadable as exc:
        raise CaptureError("the screenshot is not a readable image; nothing written") from exc


def scrub(xml: str, png: bytes, pack: Pack | None, app_package: str = APP_PACKAGE) -> Scrubbed:
    """Scrub one dump + screenshot (see the module docstring). ``pack`` (None when the version has no
    pack yet) supplies ``privacy.rows``. Raises CaptureError (dump unparsable, the app not in front,
    screenshot unreadable). ``report["blacked_out"]`` lists the black rectangles in screenshot pixels,
    ``[left, top, right, bottom)``."""
    try:
        out, dump, report, rects, size = _scrub_xml(xml, pack, app_package)
    except AgentError as exc:
        if exc.reason_code == "WRONG_PACKAGE":
            raise CaptureError(
                f"the app ({app_package}) is not in front: the dump holds none of its nodes; nothing written"
            ) from exc
        raise CaptureError(f"the dump cannot be read ({exc.reason_code}: {exc.summary}); nothing written") from exc
    shot, boxes = _black_out(png, rects, size[0], report["status_bar"] == "fixed-band")
    report["blacked_out"] = boxes
    return Scrubbed(out, shot, dump, report)


def proposed(dump: Dump, pack: Pack | None) -> dict[str, Any]:
    """``expected.proposed.json`` for a scrubbed dump: what ``cmbuyer-agent inspect`` reads on it with
    ``pack`` (screen + every reading, exactly as inspect prints them), not confirmed by anyone."""
    seen = inspect_dump(dump, [pack] if pack is not None else [])
    return {
        "expected_format": EXPECTED_FORMAT,
        "screen": seen["screen"],
        "readings": seen["readings"],
        "confirmed_by": None,
    }


def _expect_value(key: str, raw: str) -> Any:
    if raw == "null":
        return None
    if key in _MONEY_KEYS:
        try:
            value = Decimal(raw)
        except InvalidOperation:
            value = Decimal("NaN")
        if not value.is_finite() or value < 0:
            raise CaptureError(f"--expect {key}: {raw!r} is not an amount like 59.00")
        return money_str(value)
    if key in _INT_KEYS:
        if not raw.isascii() or not raw.isdigit():
            raise CaptureError(f"--expect {key}: {raw!r} is not a whole number")
        return int(raw)
    if key in _JSON_KEYS:
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise CaptureError(f'--expect {key}: give JSON, e.g. {key}=\'{{"颜色": "黑色"}}\'') from exc
        if not isinstance(value, dict if key in ("selected", "options") else list):
            raise CaptureError(f"--expect {key}: wrong JSON type")
        return value
    return raw


def parse_expect(pairs: Sequence[str], confirmed_by: str | None) -> dict[str, Any]:
    """``["screen=confirm_order", "unit_price=59.00", …]`` → an ``expected.json`` document. Keys must be
    ``screen`` or one of inspect's readings keys (:data:`READING_KEYS`); money is stored as inspect
    prints it (``59`` → ``"59.00"``), counts as integers, ``selected``/``options``/lists as JSON, the
    word ``null`` as null. Raises CaptureError naming the bad key or value."""
    doc: dict[str, Any] = {
        "expected_format": EXPECTED_FORMAT,
        "screen": None,
        "readings": {},
        "confirmed_by": confirmed_by,
    }
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise CaptureError(f"--expect takes KEY=VALUE, got {pair!r}")
        if key == "screen":
            if raw not in SCREENS:
                raise CaptureError(f"--expect screen: {raw!r} is not one of {', '.join(SCREENS)}")
            doc["screen"] = raw
        elif key in READING_KEYS:
            doc["readings"][key] = _expect_value(key, raw)
        else:
            raise CaptureError(f"--expect: unknown key {key!r}; keys are screen, {', '.join(READING_KEYS)}")
    if doc["screen"] is None:
        raise CaptureError("--expect needs screen=<name> (the screen a person saw)")
    return doc


def load_expected(path: Path) -> dict[str, Any]:
    """An ``expected.json`` a person wrote, checked like :func:`parse_expect` (keys, format)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise CaptureError(f"cannot read {path} as JSON") from exc
    if not isinstance(doc, dict) or doc.get("expected_format") != EXPECTED_FORMAT:
        raise CaptureError(f"{path}: not an expected.json (expected_format {EXPECTED_FORMAT})")
    if doc.get("screen") not in SCREENS:
        raise CaptureError(f"{path}: screen must be one of {', '.join(SCREENS)}")
    readings = doc.get("readings")
    if not isinstance(readings, dict):
        raise CaptureError(f"{path}: readings must be an object")
    unknown = sorted(set(readings) - set(READING_KEYS))
    if unknown:
        raise CaptureError(f"{path}: unknown readings key {unknown[0]!r}; keys are {', '.join(READING_KEYS)}")
    return {
        "expected_format": EXPECTED_FORMAT,
        "screen": doc["screen"],
        "readings": readings,
        "confirmed_by": doc.get("confirmed_by"),
    }


CAPTURE_FILES = frozenset({"dump.xml", "screenshot.png", "meta.json", "expected.json", "expected.proposed.json"})


def _is_capture(path: Path) -> bool:
    return path.is_dir() and (path / "meta.json").is_file() and all(p.name in CAPTURE_FILES for p in path.iterdir())


def check_out(out: Path, force: bool, *, directory_of_captures: bool = False) -> None:
    """Refuse to write into ``out`` when it exists and is not empty, unless ``force`` — and even then
    only when it holds nothing but a capture (or, ``directory_of_captures``, captures plus
    ``session.json``/``dryrun.json``): --force never deletes anything else. Raises CaptureError."""
    if not out.exists():
        return
    if not out.is_dir():
        raise CaptureError(f"{out} exists and is not a folder")
    entries = list(out.iterdir())
    if not entries:
        return
    if not force:
        raise CaptureError(f"{out} exists and is not empty; pass --force to replace it")
    if directory_of_captures:
        ok = all(_is_capture(p) or p.name in ("session.json", "dryrun.json") for p in entries)
    else:
        ok = _is_capture(out)
    if not ok:
        raise CaptureError(f"{out} holds files that are not captures; --force replaces captures only")


def focus_line(phone: Any) -> str:
    """The ``mCurrentFocus`` line of ``dumpsys window windows`` on ``phone`` (a PhoneAdapter), or ""."""
    try:
        out = phone.shell(["dumpsys", "window", "windows"], "dumpsys window")
    except AgentError:
        return ""
    return next((ln.strip() for ln in out.splitlines() if "mCurrentFocus" in ln), "")


def check_foreground(focus: str, app_package: str = APP_PACKAGE) -> None:
    """Refuse a capture while another window has the focus (``focus``: the ``mCurrentFocus`` line): an
    external cashier, a pulled-down notification shade, a chat app can cover the app in the screenshot
    even when the dump still holds app nodes. An unreadable focus is not a refusal (the dump-based
    scrubbing still applies). Raises CaptureError."""
    focused = parse_focused_package(focus)
    if focused is not None and focused != app_package:
        raise CaptureError(f"{focused} has the focus, not the app; nothing written")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_capture(
    out: Path,
    scrubbed: Scrubbed,
    meta: dict[str, Any],
    *,
    force: bool = False,
    expected: dict[str, Any] | None = None,
    proposal: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Store a capture at ``out`` (mode 0700): ``dump.xml``, ``screenshot.png``, ``meta.json`` (``meta``
    + format, hashes and ``scrubbed``) and ``expected.json`` / ``expected.proposed.json`` when given.
    Written into a temporary sibling, then renamed: a failure leaves nothing behind. ``out`` existing
    and not empty → CaptureError unless ``force`` (the old folder is then replaced). Returns the meta."""
    check_out(out, force)
    dump_bytes = scrubbed.xml.encode("utf-8")
    full = {
        "capture_format": CAPTURE_FORMAT,
        **meta,
        "dump_sha256": sha256(dump_bytes),
        "screenshot_sha256": sha256(scrubbed.png),
        "scrubbed": scrubbed.report,
    }
    out.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        (tmp / "dump.xml").write_bytes(dump_bytes)
        (tmp / "screenshot.png").write_bytes(scrubbed.png)
        _write_json(tmp / "meta.json", full)
        if expected is not None:
            _write_json(tmp / "expected.json", expected)
        if proposal is not None:
            _write_json(tmp / "expected.proposed.json", proposal)
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return full


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(json.dumps(doc, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
