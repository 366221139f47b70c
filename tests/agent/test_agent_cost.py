"""What keeps an agent cheap per order and per phone (bench/fleet.py): guarded by what the code
does, not by timings that flake under load.

- ``cmbuyer-agent run`` loads no authoring module (inspect, explain, capture, dry run) and nothing of the
  server or the simulator: each is memory every phone's agent would hold for nothing.
- Equal dump texts share one parse (the two dumps of a stable read, a gate screenshot's windows dump).
- A masked screenshot is decoded and encoded once, and masks exactly the pixels the privacy rule names
  (screens/masking.py): checked against a per-pixel oracle of the rule on random window layouts.
- The agent's own PNG writer is lossless and its files pass the server's evidence check.
"""

from __future__ import annotations

import io
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from cmbuyer.agent.errors import DumpInvalid
from cmbuyer.agent.phone.adapter import Screenshot
from cmbuyer.agent.screens.dump import Dump, parse_cache_info, parse_dump
from cmbuyer.agent.screens.masking import encode_png, mask_outside_app, outside_app, outside_app_of_all

# the agent's CPU time, memory and import set are measured: alone (pytest -m serial)
pytestmark = pytest.mark.serial

APP = "com.xunmeng.pinduoduo"

# modules `run` must not load: authoring commands, the server, the simulator, the server's libraries
NOT_FOR_RUN = (
    "cmbuyer.agent.authoring.capture",
    "cmbuyer.agent.authoring.dryrun",
    "cmbuyer.agent.authoring.explain",
    "cmbuyer.agent.authoring.inspect",
    "cmbuyer.server",
    "cmbuyer.phonesim",
    "aiohttp",
    "jinja2",
    "openpyxl",
)


def test_run_loads_no_authoring_or_server_module() -> None:
    # A fresh interpreter: the test process itself has imported everything. It imports what `cmbuyer-agent
    # run` imports before its first claim: the CLI, the runner (cmd_run) and the phone libraries.
    code = (
        "import sys, cmbuyer.agent.cli, cmbuyer.agent.runner, cmbuyer.agent.phone.adapter, uiautomator2\n"
        f"print('\\n'.join(m for m in sys.modules if m.startswith({NOT_FOR_RUN!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == []


def _dump_xml(windows: list[tuple[str, tuple[int, int, int, int]]]) -> str:
    nodes = "".join(
        f'<node class="android.widget.FrameLayout" package="{pkg}" bounds="[{x0},{t}][{r},{b}]">'
        f'<node class="android.view.View" package="{pkg}" bounds="[{x0},{t}][{x0 + 1},{t + 1}]"/></node>'
        for pkg, (x0, t, r, b) in windows
    )
    return f'<?xml version="1.0" encoding="UTF-8"?><hierarchy rotation="0">{nodes}</hierarchy>'


def test_equal_dump_texts_share_one_parse() -> None:
    xml = _dump_xml([(APP, (0, 0, 720, 1600))])
    before = parse_cache_info()
    first = parse_dump(xml)
    again = parse_dump(xml.encode("utf-8"))  # bytes of the same text: the same parse
    assert again.nodes is first.nodes
    assert again is not first  # but a dump of its own: the adapter tells dumps apart by identity
    after = parse_cache_info()
    assert after.misses - before.misses <= 1
    assert after.hits - before.hits >= 1
    # another app package is another reading of the text
    other = parse_dump(xml, app_package="com.example")
    assert other is not first and other.app_package == "com.example"
    # a refused dump is refused every time: failures are not remembered
    for _ in range(2):
        try:
            parse_dump('<hierarchy rotation="0"><node bounds="[0,0]"/><node/></hierarchy>')
        except DumpInvalid:
            pass
        else:
            raise AssertionError("a malformed bounds attribute must be refused")


def _oracle(img: Image.Image, dumps: tuple[Dump, ...]) -> bytes:
    """The privacy rule pixel by pixel (screens/masking.py): a pixel is kept only when, in every dump
    taken around the shot, it lies inside an app window (rounded inwards), and it lies inside no foreign
    window of any of them (rounded outwards)."""
    import math

    from cmbuyer.agent.screens.masking import app_windows, foreign_windows, screen_size

    scale = img.width / max(screen_size(d)[0] for d in dumps)
    keep = [
        [
            (math.ceil(x0 * scale), math.ceil(t * scale), math.floor(r * scale), math.floor(b * scale))
            for x0, t, r, b in app_windows(d, APP)
        ]
        for d in dumps
    ]
    paint = [
        (math.floor(x0 * scale), math.floor(t * scale), math.ceil(r * scale), math.ceil(b * scale))
        for d in dumps
        for x0, t, r, b in foreign_windows(d, APP)
    ]
    out = img.copy()
    px = out.load()
    assert px is not None
    for y in range(img.height):
        for x in range(img.width):
            inside = all(any(x0 <= x < r and t <= y < b for x0, t, r, b in boxes) for boxes in keep)
            if not inside or any(x0 <= x < r and t <= y < b for x0, t, r, b in paint):
                px[x, y] = (0, 0, 0)
    return out.tobytes()


_box = st.tuples(st.integers(-10, 130), st.integers(-10, 250), st.integers(1, 140), st.integers(1, 260)).map(
    lambda v: (v[0], v[1], v[0] + v[2], v[1] + v[3])
)
_windows = st.lists(st.tuples(st.sampled_from([APP, "com.android.systemui", "com.other"]), _box), max_size=4)


@settings(max_examples=60, deadline=None)
@given(around=st.lists(_windows, min_size=1, max_size=2), width=st.sampled_from([60, 90, 120]))
def test_masking_paints_exactly_what_the_rule_names(
    around: list[list[tuple[str, tuple[int, int, int, int]]]], width: int
) -> None:
    # one or two dumps around the shot; the launcher spans the screen, so each dump's screen size is fixed
    # (120 × 240) whatever the windows
    dumps = tuple(parse_dump(_dump_xml([("com.launcher", (0, 0, 120, 240)), *windows])) for windows in around)
    img = Image.effect_noise((width, width * 2), 80).convert("RGB")
    expected = _oracle(img, dumps)
    assert mask_outside_app(img.copy(), dumps, APP).tobytes() == expected
    # the one-encode path of a phone screenshot gives the same pixels as the PNG-in, PNG-out functions
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    via_png = Image.open(io.BytesIO(outside_app_of_all(buf.getvalue(), dumps, APP))).convert("RGB").tobytes()
    once = Image.open(io.BytesIO(Screenshot(img.copy()).masked_png(dumps, APP))).convert("RGB").tobytes()
    assert via_png == once == expected
    if len(dumps) == 1:
        single = Image.open(io.BytesIO(outside_app(buf.getvalue(), dumps[0], APP))).convert("RGB").tobytes()
        assert single == expected


def test_encoded_png_is_lossless_and_passes_the_servers_evidence_check() -> None:
    from cmbuyer.server.domain.evidence_limits import EvidenceLimits
    from cmbuyer.server.evidence.png import validate_evidence

    # a phone-sized screen (1080 × 2400: 38 strips and a partial last one) of noise and flat colour
    img = Image.effect_noise((1080, 2400), 60).convert("RGB")
    img.paste((250, 250, 250), (0, 300, 1080, 2000))
    png = encode_png(img)
    info = validate_evidence(png, EvidenceLimits())
    assert (info.width, info.height) == (1080, 2400)
    with Image.open(io.BytesIO(png)) as decoded:
        assert decoded.format == "PNG" and decoded.mode == "RGB"
        assert decoded.tobytes() == img.tobytes()
    # any mode the phone may give is stored as RGB, pixel for pixel
    grey = Image.effect_noise((7, 5), 40)
    with Image.open(io.BytesIO(encode_png(grey))) as decoded:
        assert decoded.tobytes() == grey.convert("RGB").tobytes()


def test_a_screenshot_is_encoded_once_and_one_way() -> None:
    dump = parse_dump(_dump_xml([(APP, (0, 0, 60, 120))]))
    shot = Screenshot(Image.new("RGB", (60, 120), (200, 10, 10)))
    first = shot.masked_png((dump,), APP)
    assert shot.masked_png((dump,), APP) is first  # cached: a retried upload does not encode again
    try:
        shot.png()
    except RuntimeError:
        pass
    else:
        raise AssertionError("an unmasked PNG of an already masked shot must not be given")


def test_the_mmap_threshold_is_fixed_where_the_c_library_is_glibc() -> None:
    import platform

    from cmbuyer.agent.heap import fix_mmap_threshold

    # the fleet's phone hosts run Linux with glibc; elsewhere the call changes nothing and says so
    assert fix_mmap_threshold() is (platform.libc_ver()[0] == "glibc")


def test_a_selector_looks_at_a_dump_once() -> None:
    import re

    from cmbuyer.agent.screens.packmodel import Selector

    dump = parse_dump(_dump_xml([(APP, (0, 0, 720, 1600)), (APP, (0, 0, 720, 100))]))
    calls = []

    class Counting(Selector):
        def matches(self, node: object) -> bool:  # type: ignore[override]
            calls.append(node)
            return super().matches(node)  # type: ignore[arg-type]

    selector = Counting(cls=re.compile("android.view.View"))
    first = selector.find(dump)
    assert len(first) == 2 and len(calls) == len(dump.app_nodes())
    first.clear()  # a caller's list is its own
    assert selector.find(dump) == [n for n in dump.nodes if n.cls == "android.view.View"]
    assert len(calls) == len(dump.app_nodes())  # the second find did not look again
    # another dump (another text) is looked at afresh
    other = parse_dump(_dump_xml([(APP, (0, 0, 720, 1500))]))
    assert len(selector.find(other)) == 1


def test_without_zlib_ng_screenshots_are_still_valid_lossless_pngs() -> None:
    # A phone host whose zlib-ng wheel is missing or broken: every gate screenshot would raise ImportError on
    # the outbox thread and stop every order. A fresh interpreter with the module blocked must still write
    # PNGs the server accepts, pixel for pixel (the standard zlib writes the same stream format).
    code = (
        "import io, sys\n"
        "sys.modules['zlib_ng'] = None\n"
        "from PIL import Image\n"
        "from cmbuyer.agent.screens.masking import encode_png\n"
        "from cmbuyer.server.domain.evidence_limits import EvidenceLimits\n"
        "from cmbuyer.server.evidence.png import validate_evidence\n"
        "img = Image.effect_noise((333, 131), 50).convert('RGB')\n"
        "png = encode_png(img)\n"
        "validate_evidence(png, EvidenceLimits())\n"
        "assert Image.open(io.BytesIO(png)).tobytes() == img.tobytes()\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["ok"], out.stderr[-2000:]


def test_a_screenshot_claiming_too_many_pixels_is_unreadable_not_a_crash() -> None:
    # Pillow refuses a header of more than twice MAX_IMAGE_PIXELS with DecompressionBombError, which is no
    # OSError/ValueError: masking must turn it into its documented ImageUnreadable, not a traceback.
    import struct
    import zlib

    from cmbuyer.agent.screens.masking import ImageUnreadable

    side = 20_000  # 400 M pixels
    ihdr = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    bomb = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")
    dump = parse_dump(_dump_xml([(APP, (0, 0, 60, 120))]))
    try:
        outside_app_of_all(bomb, (dump,), APP)
    except ImageUnreadable:
        pass
    else:
        raise AssertionError("a decompression bomb must be refused as ImageUnreadable")


def test_the_mmap_threshold_changes_nothing_where_the_c_library_has_no_mallopt(monkeypatch: Any) -> None:
    # musl (Alpine) and macOS have no mallopt, and a minimal image may have no findable C library at all:
    # the agent must start anyway, with the call saying it changed nothing
    import ctypes
    import ctypes.util
    import types

    from cmbuyer.agent import heap

    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)  # no C library found
    assert heap.fix_mmap_threshold() is False
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "/nonexistent/libc.so")  # not loadable
    assert heap.fix_mmap_threshold() is False
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "libc.so")
    monkeypatch.setattr(ctypes, "CDLL", lambda name: types.SimpleNamespace())  # a C library without mallopt
    assert heap.fix_mmap_threshold() is False
