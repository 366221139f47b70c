"""Black-out of screenshot areas (issue 16 item 3 for captures, issue 33 item 6 for every stored
screenshot). Pure image work (Pillow) on rectangles found in a dump; no phone I/O.

- :func:`outside_app` — what a stored screenshot of the app must not show: everything outside the
  app's own windows (status bar, notification shade, navigation bar, launcher) and every window of
  another package drawn over the app (a heads-up notification, a floating chat head). On the real MIUI
  captures (tests/agent/fixtures/real_structures) the app's window spans the whole screen and two
  windows are drawn over it: the 95 px status bar (system UI: black) and the launcher's gesture strip
  ``com.miui.home`` ``[0,2328][1080,2400]`` (another package's window smaller than the screen: black —
  it shows the launcher's pill, not the app, so the bottom 26 px of the submit button under it are
  black too; the button's label lies above it). Gate, result and
  confirmation screenshots go through it (PhoneAdapter.app_screenshot_png); spec 002 allows what the
  app's window itself shows (the order sheet's address and phone), so nothing inside it is touched.
- :func:`black_out` — paints rectangles (dump coordinates) black in a PNG.

Rectangles are ``(left, top, right, bottom)`` in dump coordinates, scaled to the image by the ratio of
the widths (windows span the full width; a dump may lack the navigation bar, so its height is not the
screen's), rounded outwards so that a scaled area is never smaller than the one in the dump.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

from PIL import Image, ImageDraw, UnidentifiedImageError

from cmbuyer.agent.screens.dump import Bounds, Dump

SYSTEM_UI = "com.android.systemui"

Rect = tuple[int, int, int, int]


class ImageUnreadable(ValueError):
    """The screenshot bytes are not an image Pillow can decode."""


def rect(b: Bounds) -> Rect:
    """``(left, top, right, bottom)`` of node bounds."""
    return (b.left, b.top, b.right, b.bottom)


def screen_size(dump: Dump) -> tuple[int, int]:
    """The screen's ``(width, height)`` as the dump's nodes span it (at least 1 × 1)."""
    width = max((n.bounds.right for n in dump.nodes), default=0)
    height = max((n.bounds.bottom for n in dump.nodes), default=0)
    return max(width, 1), max(height, 1)


def foreign_windows(dump: Dump, app_package: str) -> list[Rect]:
    """Window roots of other packages that may show above the app: every system-UI window (status bar,
    notification shade, navigation bar — an edge-to-edge app window spans the screen, as on the real
    captures, so the bars are drawn over it), and any other package's window smaller than the screen
    (full-screen ones — the launcher — lie behind the app when the app is in front; a launcher's
    gesture strip, as on the real MIUI captures, is small and drawn over it)."""
    size = screen_size(dump)
    out = []
    for node in dump.nodes:
        if node.parent is not None or node.package == app_package or node.bounds.empty:
            continue
        if node.package == SYSTEM_UI:
            out.append(rect(node.bounds))
        elif rect(node.bounds) != (0, 0, size[0], size[1]):
            out.append(rect(node.bounds))
    return out


def app_windows(dump: Dump, app_package: str) -> list[Rect]:
    """The bounds of the app's own window roots (empty when the app shows no window)."""
    return [rect(n.bounds) for n in dump.nodes if n.parent is None and n.package == app_package and not n.bounds.empty]


def _decode(png: bytes) -> Image.Image:
    try:
        with Image.open(io.BytesIO(png)) as opened:
            return opened.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ImageUnreadable("the screenshot is not a readable image") from exc


def _scaled(rects: Sequence[Rect], scale: float, img: Image.Image) -> list[list[int]]:
    out = []
    for left, top, right, bottom in rects:
        box = [
            max(0, math.floor(left * scale)),
            max(0, math.floor(top * scale)),
            min(img.width, math.ceil(right * scale)),
            min(img.height, math.ceil(bottom * scale)),
        ]
        if box[2] > box[0] and box[3] > box[1] and box not in out:
            out.append(box)
    return out


def _encode(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def black_out(
    png: bytes, rects: Sequence[Rect], dump_width: int, extra: Sequence[list[int]] = ()
) -> tuple[bytes, list[list[int]]]:
    """``png`` with every rectangle of ``rects`` (dump coordinates, scaled by image width ÷
    ``dump_width``) and of ``extra`` (image pixels) painted black; returns the PNG and the painted boxes
    in image pixels, ``[left, top, right, bottom)``, without repeats. Raises ImageUnreadable."""
    img = _decode(png)
    draw = ImageDraw.Draw(img)
    boxes = [*(list(e) for e in extra), *_scaled(rects, img.width / max(dump_width, 1), img)]
    done: list[list[int]] = []
    for left, top, right, bottom in boxes:
        box = [max(0, left), max(0, top), min(img.width, right), min(img.height, bottom)]
        if box[2] <= box[0] or box[3] <= box[1] or box in done:
            continue
        draw.rectangle((box[0], box[1], box[2] - 1, box[3] - 1), fill=(0, 0, 0))
        done.append(box)
    return _encode(img), done


def outside_app(png: bytes, dump: Dump, app_package: str) -> bytes:
    """``png`` with everything outside the app's own windows black, and every foreign window drawn
    over them black too (see the module docstring); all black when the dump shows no app window.
    Raises ImageUnreadable."""
    return outside_app_of_all(png, (dump,), app_package)


def _intersect(a: Rect, b: Rect) -> Rect | None:
    box = (max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3]))
    return box if box[2] > box[0] and box[3] > box[1] else None


def outside_app_of_all(png: bytes, dumps: Sequence[Dump], app_package: str) -> bytes:
    """:func:`outside_app` for a screenshot taken between several dumps (issue 29: between the two
    dumps of a stable read): kept is only what lies inside an app window in EVERY dump, and every
    foreign window of ANY dump is black — a window present at either end of the interval is masked.
    All black when a dump shows no app window. Raises ImageUnreadable; ValueError without dumps."""
    if not dumps:
        raise ValueError("masking needs at least one dump")
    windows = app_windows(dumps[0], app_package)
    for other in dumps[1:]:
        windows = [box for a in windows for b in app_windows(other, app_package) if (box := _intersect(a, b))]
    img = _decode(png)
    scale = img.width / max(screen_size(d)[0] for d in dumps)
    kept = Image.new("RGB", img.size, (0, 0, 0))
    for left, top, right, bottom in windows:
        # inward rounding for what is kept: a pixel half outside the app's window is not the app's
        box = (
            max(0, math.ceil(left * scale)),
            max(0, math.ceil(top * scale)),
            min(img.width, math.floor(right * scale)),
            min(img.height, math.floor(bottom * scale)),
        )
        if box[2] > box[0] and box[3] > box[1]:
            kept.paste(img.crop(box), box[:2])
    draw = ImageDraw.Draw(kept)
    foreign = [r for d in dumps for r in foreign_windows(d, app_package)]
    for left, top, right, bottom in _scaled(foreign, scale, img):
        draw.rectangle((left, top, right - 1, bottom - 1), fill=(0, 0, 0))
    return _encode(kept)
