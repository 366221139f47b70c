"""Black-out of screenshot areas (for captures and for every stored
screenshot). Pure image work (Pillow) on rectangles found in a dump; no phone I/O.

- :func:`outside_app` — what a stored screenshot of the app must not show: everything outside the
  app's own windows (status bar, notification shade, navigation bar, launcher) and every window of
  another package drawn over the app (a heads-up notification, a floating chat head). On the real MIUI
  captures (tests/agent/fixtures/real_structures) the app's window spans the whole screen and two
  windows are drawn over it: the 95 px status bar (system UI: black) and the launcher's gesture strip
  ``com.miui.home`` ``[0,2328][1080,2400]`` (another package's window smaller than the screen: black —
  it shows the launcher's pill, not the app, so the bottom 26 px of the submit button under it are
  black too; the button's label lies above it). Gate, result and
  confirmation screenshots go through it (PhoneAdapter.app_screenshot_png); the device API allows what the
  app's window itself shows (the order sheet's address and phone), so nothing inside it is touched.
- :func:`black_out` — paints rectangles (dump coordinates) black in a PNG.

Rectangles are ``(left, top, right, bottom)`` in dump coordinates, scaled to the image by the ratio of
the widths (windows span the full width; a dump may lack the navigation bar, so its height is not the
screen's), rounded outwards so that a scaled area is never smaller than the one in the dump.
"""

from __future__ import annotations

import functools
import io
import itertools
import logging
import math
import struct
import zlib
from collections.abc import Sequence
from typing import Any

from PIL import Image, ImageDraw, UnidentifiedImageError

from cmbuyer.agent.screens.dump import Bounds, Dump

log = logging.getLogger(__name__)

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
    # DecompressionBombError (not an OSError): a header claiming more pixels than Pillow will decode
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
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


def _intersect(a: Rect, b: Rect) -> Rect | None:
    box = (max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3]))
    return box if box[2] > box[0] and box[3] > box[1] else None


def mask_outside_app(img: Image.Image, dumps: Sequence[Dump], app_package: str) -> Image.Image:
    """Paint, in place, everything of ``img`` (RGB) outside the app's own windows black, and every foreign
    window drawn over them (see the module docstring); returns ``img``. ``dumps``: the dumps taken around
    the screenshot (the two dumps of a stable read bracket it) — kept is only what lies inside
    an app window in EVERY dump, and every foreign window of ANY dump is black, so a window present at
    either end of the interval is masked; all black when a dump shows no app window. Only the painted
    rectangles are touched — no mask and no copy of the screen (a 1080 × 2400 screenshot is 7.8 MB of
    pixels, and each agent of a phone host handles several per order). ValueError without dumps."""
    if not dumps:
        raise ValueError("masking needs at least one dump")
    windows = app_windows(dumps[0], app_package)
    for other in dumps[1:]:
        windows = [box for a in windows for b in app_windows(other, app_package) if (box := _intersect(a, b))]
    scale = img.width / max(screen_size(d)[0] for d in dumps)
    kept = []
    for left, top, right, bottom in windows:
        # inward rounding for what is kept: a pixel half outside the app's window is not the app's
        box = (
            max(0, math.ceil(left * scale)),
            max(0, math.ceil(top * scale)),
            min(img.width, math.floor(right * scale)),
            min(img.height, math.floor(bottom * scale)),
        )
        if box[2] > box[0] and box[3] > box[1]:
            kept.append(box)
    foreign = [r for d in dumps for r in foreign_windows(d, app_package)]
    painted = [*_uncovered(kept, img.width, img.height), *_scaled(foreign, scale, img)]
    draw = ImageDraw.Draw(img)
    for left, top, right, bottom in painted:
        draw.rectangle((left, top, right - 1, bottom - 1), fill=(0, 0, 0))
    return img


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_STRIP_ROWS = 64  # rows compressed at a time: a strip of a phone screen is ~200 KB, never a second copy
# level 1: the fastest to write and, measured, the fastest for the server to inflate and decode too (zlib-ng's
# levels 2-3 write ≈ 25 % fewer bytes whose inflate costs ≈ 2.5x as much: docs/performance.md "Agent CPU")
PNG_DEFLATE_LEVEL = 1


@functools.cache
def _deflater() -> Any:
    """zlib-ng's zlib-compatible module, else the standard library's ``zlib``: the same deflate stream
    format (RFC 1950), so the PNG is as valid and as lossless, only slower to write. zlib-ng is a declared
    dependency (pyproject.toml); a host where its wheel is missing or broken must still store masked
    screenshots, not fail every gate with an ImportError on the outbox thread. Imported here, not at
    module load: `inspect`/`capture` never need it. Chosen once per process (one warning)."""
    try:
        from zlib_ng import zlib_ng
    except ImportError:
        log.warning("zlib-ng is not importable: screenshots are deflated with the standard zlib (slower)")
        return zlib
    return zlib_ng


def _chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


def encode_png(img: Image.Image) -> bytes:
    """PNG bytes of ``img`` (8-bit RGB, no interlace, filter type 0 on every row), deflated with
    zlib-ng at :data:`PNG_DEFLATE_LEVEL` strip by strip.

    Why not Pillow's encoder: it tries all five PNG row filters on every row, which is most of its time
    (≈ 30 of 40 ms on a 1080 × 2400 screen even at ``compress_level=0``), and an agent encodes about five
    screenshots per order. Phone screens are flat colour and text, which deflate compresses well without
    a filter: on the simulator's screens ≈ 11 ms against ≈ 40 ms, and the server validates the file in
    ≈ 12 ms against ≈ 21 ms, for ≈ 30 % more bytes than Pillow at ``compress_level=1`` (docs/performance.md
    "Agent CPU"). The chunks are the minimum the PNG spec requires (IHDR, IDAT,
    IEND), which the server's evidence check accepts (server/evidence/png.py; tests/agent/test_agent_cost.py
    runs it on the output)."""
    rgb = img if img.mode == "RGB" else img.convert("RGB")
    width, height = rgb.size
    stride = width * 3
    deflate = _deflater().compressobj(PNG_DEFLATE_LEVEL)
    idat = []
    for top in range(0, height, _STRIP_ROWS):
        strip = rgb.crop((0, top, width, min(height, top + _STRIP_ROWS))).tobytes()
        idat.append(deflate.compress(b"".join(b"\x00" + strip[i : i + stride] for i in range(0, len(strip), stride))))
    idat.append(deflate.flush())
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit truecolour, deflate, filter 0, no interlace
    return _PNG_SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", b"".join(idat)) + _chunk(b"IEND", b"")


def outside_app(png: bytes, dump: Dump, app_package: str) -> bytes:
    """``png`` with everything outside the app's own windows black, and every foreign window drawn
    over them black too (:func:`mask_outside_app`); all black when the dump shows no app window.
    Raises ImageUnreadable."""
    return outside_app_of_all(png, (dump,), app_package)


def outside_app_of_all(png: bytes, dumps: Sequence[Dump], app_package: str) -> bytes:
    """:func:`outside_app` for a screenshot taken between several dumps (:func:`mask_outside_app`).
    Raises ImageUnreadable; ValueError without dumps."""
    if not dumps:
        raise ValueError("masking needs at least one dump")
    return encode_png(mask_outside_app(_decode(png), dumps, app_package))
