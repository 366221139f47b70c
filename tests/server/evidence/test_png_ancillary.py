"""Compressed ancillary PNG chunks (docs/api.md "PNG rules"): iCCP, zTXt and
compressed iTXt inflate to at most MAX_ANCILLARY_INFLATED bytes together, checked in bounded pieces
before Pillow sees the file. A decompression bomb in one of them is ``400 unsupported_image`` with
bounded memory and time; ordinary profiles and compressed text are accepted."""

from __future__ import annotations

import functools
import io
import time
import tracemalloc
import zlib
from typing import Any

import pytest
from PIL import Image, PngImagePlugin

from cmbuyer.server.evidence.png import MAX_ANCILLARY_INFLATED, ImageRejected, validate_png
from tests.server.evidence.pngs import build, chunk
from tests.server.submissions.helpers import upload_png

SIDE, PIXELS = 8192, 16_777_216


@functools.cache
def _bomb(size: int) -> bytes:
    packer = zlib.compressobj(9)
    piece = bytes(1 << 20)
    return b"".join(packer.compress(piece) for _ in range(size >> 20)) + packer.flush()


def reason(data: bytes) -> str:
    with pytest.raises(ImageRejected) as err:
        validate_png(data, max_side=SIDE, max_pixels=PIXELS)
    return err.value.reason


def test_ztxt_bomb_refused() -> None:
    bomb = _bomb(64 << 20)  # ~64 KiB compressed → 64 MiB of text
    assert len(bomb) < 64 * 1024
    assert reason(build(before_idat=chunk(b"zTXt", b"Comment\0\0" + bomb))) == "ancillary_too_large"


@pytest.mark.serial  # "quickly": an upper bound on wall time
def test_iccp_bomb_refused_quickly() -> None:
    bomb = _bomb(256 << 20)  # ~256 KiB compressed → 256 MiB profile
    started = time.monotonic()
    assert reason(build(before_idat=chunk(b"iCCP", b"icc\0\0" + bomb))) == "ancillary_too_large"
    assert time.monotonic() - started < 2.0


def test_compressed_itxt_bomb_refused_and_budget_is_shared() -> None:
    bomb = _bomb(8 << 20)
    assert reason(build(before_idat=chunk(b"iTXt", b"k\0\x01\0en\0\0" + bomb))) == "ancillary_too_large"
    half = zlib.compress(bytes(MAX_ANCILLARY_INFLATED // 2 + 1))
    two_halves = chunk(b"zTXt", b"a\0\0" + half) + chunk(b"zTXt", b"b\0\0" + half)
    assert reason(build(before_idat=two_halves)) == "ancillary_too_large"
    assert validate_png(build(before_idat=chunk(b"zTXt", b"a\0\0" + half)), max_side=SIDE, max_pixels=PIXELS)


@pytest.mark.parametrize(
    ("ctype", "body", "why"),
    [
        (b"zTXt", b"no separator", "ancillary_layout"),
        (b"zTXt", b"k\0\x01" + zlib.compress(b"x"), "ancillary_layout"),  # compression method 1
        (b"zTXt", b"k\0\0not zlib", "ancillary_zlib"),
        (b"zTXt", b"k\0\0" + zlib.compress(b"x" * 100)[:-6], "ancillary_zlib"),  # truncated stream
        (b"iCCP", b"\0\0" + zlib.compress(b"x"), "ancillary_layout"),  # empty profile name
        (b"iTXt", b"k\0\x02\0\0\0", "ancillary_layout"),
    ],
)
def test_malformed_compressed_chunks_refused(ctype: bytes, body: bytes, why: str) -> None:
    assert reason(build(before_idat=chunk(ctype, body))) == why


def test_ordinary_profile_and_compressed_text_accepted() -> None:
    info = PngImagePlugin.PngInfo()
    info.add_text("Software", "phone", zip=True)
    info.add_itxt("Title", "截图", zip=True)
    out = io.BytesIO()
    Image.new("RGB", (8, 8)).save(out, format="PNG", pnginfo=info, icc_profile=b"\0" * 4000)
    assert validate_png(out.getvalue(), max_side=SIDE, max_pixels=PIXELS).width == 8


@pytest.mark.serial  # peak memory measured
async def test_upload_with_an_iccp_bomb_is_400_unsupported_image_with_bounded_memory(
    server_client: Any, claimed: Any
) -> None:
    data = build(before_idat=chunk(b"iCCP", b"icc\0\0" + _bomb(256 << 20)))  # ~256 KiB file → 256 MiB
    tracemalloc.start()
    try:
        status, raw = await upload_png(server_client, claimed, data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (status, raw) == (400, b'{"error":"unsupported_image"}')
    assert peak < 10 * len(data) + (8 << 20), peak  # the body's few copies plus small pieces
