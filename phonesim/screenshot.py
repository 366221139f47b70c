"""Draw the view tree with Pillow so a person can see what the simulated phone shows.

Output is RGB 1080x2400: PNG for ``screencap -p`` and JPEG for uiautomator2's
``takeScreenshot``. Chinese needs a CJK font: set ``CMBUYER_PHONESIM_FONT`` or install one
(Debian: ``fonts-noto-cjk`` or ``fonts-wqy-microhei``); without it glyphs show as boxes but
layout, colours and bounds are still right.
"""

from __future__ import annotations

import io
import os
from functools import cache
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from .nodes import Node

NON_CJK_FALLBACK = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"  # draws Chinese as boxes
_FONT_CANDIDATES = (
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/truetype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
    "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc",
    "/usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf",
    "/usr/share/fonts/truetype/arphic/uming.ttc",
    NON_CJK_FALLBACK,
)
RED = (224, 46, 36)
FontT = ImageFont.FreeTypeFont | ImageFont.ImageFont


def has_cjk_font() -> bool:
    """True when the screenshots can draw Chinese: a font is configured or one of the CJK candidates is
    installed (``make demo`` checks this and installs ``fonts-wqy-microhei`` when it is not)."""
    path = font_path()
    return path is not None and path != NON_CJK_FALLBACK


@cache
def font_path() -> str | None:
    env = os.environ.get("CMBUYER_PHONESIM_FONT")
    if env and Path(env).is_file():
        return env
    return next((p for p in _FONT_CANDIDATES if Path(p).is_file()), None)


@cache
def _font(size: int) -> FontT:
    path = font_path()
    if path:
        return ImageFont.truetype(path, size)
    return ImageFont.load_default(size)


def _draw_node(img: Image.Image, draw: ImageDraw.ImageDraw, node: Node, on_red: set[int]) -> ImageDraw.ImageDraw:
    l, t, r, b = node.bounds  # noqa: E741 - screen geometry names
    box = (l, t, max(l, r - 1), max(t, b - 1))
    style = node.style
    if style == "scrim":
        overlay = Image.new("RGBA", img.size, (0, 0, 0, 0))
        ImageDraw.Draw(overlay).rectangle(box, fill=(0, 0, 0, 110))
        img.paste(Image.alpha_composite(img.convert("RGBA"), overlay).convert("RGB"))
        draw = ImageDraw.Draw(img)
    elif style in ("sheet", "dialog", "card", "banner"):
        draw.rounded_rectangle(box, radius=24, fill=(255, 255, 255))
    elif style == "page":
        draw.rectangle(box, fill=(244, 244, 244))
    elif style == "launcher":
        draw.rectangle(box, fill=(40, 70, 110))
    elif style == "statusbar":
        draw.rectangle(box, fill=(250, 250, 250))
    elif style == "gesture":
        # MIUI's gesture strip is transparent but for its home indicator, a short dark pill
        mid, y = (l + r) // 2, (t + b) // 2
        draw.rounded_rectangle((mid - 180, y - 6, mid + 180, y + 6), radius=6, fill=(30, 30, 30))
    elif style in ("bottombar", "pricebar"):
        draw.rectangle(box, fill=(255, 255, 255) if style == "bottombar" else (255, 240, 238))
    elif style == "button":
        draw.rounded_rectangle(box, radius=20, fill=RED)
    elif style == "tile":
        fill = (255, 236, 234) if node.selected else (242, 242, 242)
        draw.rounded_rectangle(box, radius=12, fill=fill, outline=RED if node.selected else None, width=3)
    elif style == "icon":
        draw.rounded_rectangle((l + 40, t, r - 40, t + 120), radius=28, fill=(250, 250, 250))
    elif node.cls.endswith("ImageView") and r - l > 4 and b - t > 4:
        draw.rectangle(box, fill=(225, 225, 225), outline=(200, 200, 200))
        if not node.desc:
            draw.line(box, fill=(190, 190, 190), width=2)
    elif node.cls.endswith("EditText"):
        draw.rectangle(box, fill=(255, 255, 255), outline=(160, 160, 160), width=2)
    label = node_label(node)
    if label:
        height = b - t if style != "icon" else 60
        size, font = label_font(label, r - l - 12, height)
        colour = (255, 255, 255) if id(node) in on_red else RED if label.startswith(("¥", "￥")) else (34, 34, 34)
        if not node.enabled:
            colour = (180, 180, 180)
        y = t + (height - size) // 2 if style != "icon" else t + 140
        draw.text((l + 8, y), _fit(label, font, r - l - 12), fill=colour, font=font)
    return draw


def node_label(node: Node) -> str:
    """The text a node shows on the screenshot: its text, else an image's content description ("" for none)."""
    return node.text or (node.desc if node.cls.endswith("ImageView") and node.style != "page" else "")


MIN_LABEL_SIZE = 14  # px: below this a label is not readable on an evidence screenshot anyway


def label_font(label: str, width: int, height: int) -> tuple[int, FontT]:
    """The font size (px) and font a label is drawn with: 0.6 × the node's height (16–44 px), made smaller —
    down to :data:`MIN_LABEL_SIZE` — until the whole label fits ``width``. Sizing by height alone cut labels
    of narrow nodes to their first character (返回 → 返, ¥72 → ¥7 on 1080-px screens); only a label that does not
    fit even at the smallest size is still cut (:func:`_fit`)."""
    size = max(16, min(44, int(height * 0.6)))
    font = _font(size)
    while size > MIN_LABEL_SIZE and width > 0 and (length := font.getlength(label)) > width:
        size = max(MIN_LABEL_SIZE, min(size - 1, int(size * width / length)))
        font = _font(size)
    return size, font


def _fit(label: str, font: FontT, width: int) -> str:
    if width <= 0:
        return ""
    while label and font.getlength(label) > width:
        label = label[:-1]
    return label


def render_image(windows: list[Node], size: tuple[int, int] = (1080, 2400)) -> Image.Image:
    """Paint the windows bottom-most first (the app, then the status bar and the gesture strip), children
    after parents."""
    img = Image.new("RGB", size, (255, 255, 255))
    draw = ImageDraw.Draw(img)
    on_red: set[int] = set()  # ids of nodes drawn over a red button: white text
    for root in reversed(windows):
        for node in root.walk():
            if node.style == "button":
                on_red.update(id(n) for n in node.walk())
            draw = _draw_node(img, draw, node, on_red)
    return img


def png_bytes(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=1)  # speed over size: screenshots are taken often
    return buf.getvalue()


def jpeg_bytes(img: Image.Image, quality: int = 80, scale: float = 1.0) -> bytes:
    if scale and 0 < scale < 1:
        img = img.resize((max(1, int(img.width * scale)), max(1, int(img.height * scale))))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=max(1, min(int(quality), 100)))
    return buf.getvalue()
