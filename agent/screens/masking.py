"""Black-out of screenshot areas (issue 16 item 3 for captures, issue 33 item 6 for every stored
screenshot). Pure image work (Pillow) on rectangles found in a dump; no phone I/O.

- :func:`outside_app` — what a stored screenshot of the app must not show: everything outside the
  app's own windows (status bar, notification shade, navigation bar, launcher) and every window of
  another package drawn over the app (a heads-up notification, a floating chat head). Gate, result and
  confirmation screenshots go through it (PhoneAdapter.app_screenshot_png); spec 002 allows what the
  app's window itself shows (the order sheet's address and phone), so nothing inside it is touched.
- :func:`black_out` — paints rectangles (dump coordinates) black in a PNG.

Rectangles are ``(left, top, right, bottom)`` in dump coordinates, scaled to the image by the ratio of
the widths (windows span the full width; a dump may lack the navigation bar, so its height is not the
screen's), rounded outwards so that a scaled area is never smaller than the one in the dump.
"""

from __future__ import annotations

import io
import itertools
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
    return encode_png(img), done


def _uncovered(boxes: Sequence[tuple[int, int, int, int]], width: int, height: int) -> list[tuple[int, int, int, int]]:
    """Rectangles (``right``/``bottom`` exclusive) that together cover exactly the part of the
    ``width`` × ``height`` screen outside every box of ``boxes``: horizontal bands between the boxes'
    top and bottom edges, and in each band the gaps between the boxes that span it."""
    edges = sorted({0, height, *(b[1] for b in boxes), *(b[3] for b in boxes)})
    out = []
    for top, bottom in itertools.pairwise(edges):
        x = 0
        for left, _, right, _ in sorted(b for b in boxes if b[1] <= top and b[3] >= bottom):
            if left > x:
                out.append((x, top, left, bottom))
            x = max(x, right)
        if x < width:
            out.append((x, top, width, bottom))
    return out


def mask_outside_app(img: Image.Image, dump: Dump, app_package: str) -> Image.Image:
    """Paint, in place, everything of ``img`` (RGB) outside the app's own windows black, and every foreign
    window drawn over them (see the module docstring); all black when the dump shows no app window.
    Returns ``img``. Only the painted rectangles are touched — no mask and no copy of the screen (a
    1080 × 2400 screenshot is 7.8 MB of pixels, and each agent of a phone host handles several per order)."""
    scale = img.width / screen_size(dump)[0]
    kept = []
    for left, top, right, bottom in app_windows(dump, app_package):
        # inward rounding for what is kept: a pixel half outside the app's window is not the app's
        box = (
            max(0, math.ceil(left * scale)),
            max(0, math.ceil(top * scale)),
            min(img.width, math.floor(right * scale)),
            min(img.height, math.floor(bottom * scale)),
        )
        if box[2] > box[0] and box[3] > box[1]:
            kept.append(box)
    painted = [*_uncovered(kept, img.width, img.height), *_scaled(foreign_windows(dump, app_package), scale, img)]
    draw = ImageDraw.Draw(img)
    for left, top, right, bottom in painted:
        draw.rectangle((left, top, right - 1, bottom - 1), fill=(0, 0, 0))
    return img


def encode_png(img: Image.Image) -> bytes:
    """PNG bytes of ``img``. ``compress_level=1``: lossless like the default level 6, about a third
    less CPU on a phone screenshot for ~15 % more bytes — an agent encodes several per order."""
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def outside_app(png: bytes, dump: Dump, app_package: str) -> bytes:
    """``png`` with everything outside the app's own windows black, and every foreign window drawn
    over them black too (:func:`mask_outside_app`). Raises ImageUnreadable."""
    return encode_png(mask_outside_app(_decode(png), dump, app_package))
