"""PNG validation: accepted forms, refusals, size checks before decoding."""

from __future__ import annotations

import io
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from cmbuyer.server.evidence.png import ImageRejected, validate_png
from tests.server.evidence.pngs import build, chunk, ihdr
from tests.server.submissions.helpers import png

SIDE, PIXELS = 8192, 16_777_216


def check(data: bytes) -> tuple[int, int]:
    info = validate_png(data, max_side=SIDE, max_pixels=PIXELS)
    return info.width, info.height


def reason(data: bytes) -> str:
    with pytest.raises(ImageRejected) as err:
        validate_png(data, max_side=SIDE, max_pixels=PIXELS)
    return err.value.reason


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "P", "L", "1", "I;16", "LA"])
def test_pillow_written_pngs_accepted(mode: str) -> None:
    assert check(png(mode, (24, 16))) == (24, 16)


@pytest.mark.parametrize(("depth", "color"), [(16, 0), (16, 2), (16, 4), (16, 6), (1, 0), (4, 3), (8, 6)])
@pytest.mark.parametrize("interlace", [0, 1])
def test_all_depths_and_interlaced_accepted(depth: int, color: int, interlace: int) -> None:
    assert check(build(13, 7, depth, color, interlace)) == (13, 7)


def test_exactly_8192_by_2048_accepted() -> None:
    assert check(build(8192, 2048, 8, 0)) == (8192, 2048)


@pytest.mark.parametrize(("w", "h"), [(8193, 1), (1, 8193), (0, 5), (5, 0), (2**31 - 1, 1), (4097, 4097), (8192, 2049)])
def test_oversized_headers_refused_before_decoding(w: int, h: int) -> None:
    # The IDAT is garbage: if anything were decoded first the reason would differ.
    assert reason(build(header=ihdr(w, h), idat=b"garbage")) == "dimensions"


def _other_format(fmt: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8)).save(out, format=fmt)
    return out.getvalue()


@pytest.mark.parametrize(
    "data",
    [
        _other_format("GIF"),
        _other_format("JPEG"),
        _other_format("WEBP"),
        b"8BPS\x00\x01" + bytes(40),
        b'<svg xmlns="http://www.w3.org/2000/svg"/>',
        b"<!doctype html><html></html>",
        b"",
        png().replace(b"\r\n", b"\n", 1),  # signature mangled by line-ending conversion
    ],
)
def test_other_formats_refused(data: bytes) -> None:
    assert reason(data) == "signature"


def test_structural_refusals() -> None:
    good = build()
    raw = bytes(8 * (16 * 3 + 1))
    assert reason(good[:-12]) == "truncated"  # no IEND
    assert reason(good + b"\x00") == "trailing_bytes"
    assert reason(build(after_iend=b"junk")) == "trailing_bytes"
    assert reason(build(idat=zlib.compress(raw)[:-6])) in ("idat_truncated", "zlib")
    assert reason(build(raw=raw + bytes(100))) == "inflates_past_size"  # inflates past the declared size
    assert reason(build(raw=raw[:-1])) == "idat_truncated"
    bad_crc = build(before_idat=chunk(b"tEXt", b"a\x00b", crc=1))
    assert reason(bad_crc) == "crc"
    assert reason(build(before_idat=chunk(b"tEXt", b"k\x00" + b"x" * 70_000))) == "text_chunks"
    assert reason(build(before_idat=b"".join(chunk(b"tEXt", b"k\x00v") for _ in range(40)))) == "text_chunks"
    assert reason(build(header=chunk(b"IHDR", b"\x00" * 12))) == "ihdr"
    assert reason(build(8, 8, 16, 3)) == "ihdr"  # 16-bit palette does not exist


def test_animated_png_refused() -> None:
    out = io.BytesIO()
    frames = [Image.new("RGB", (8, 8), (i, 0, 0)) for i in range(3)]
    frames[0].save(out, format="PNG", save_all=True, append_images=frames[1:])
    assert reason(out.getvalue()) == "animated"


def test_zlib_bomb_refused_without_inflating_everything() -> None:
    # 1×1 image whose IDAT inflates to 50 MB: refused as soon as it passes the declared size.
    assert reason(build(1, 1, raw=bytes(50_000_000))) == "inflates_past_size"


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=400), st.integers(min_value=0, max_value=300))
def test_mutated_pngs_never_crash(noise: bytes, at: int) -> None:
    base = build(9, 5)
    data = base[:at] + noise + base[at + len(noise) :]
    try:
        check(data)
    except ImageRejected:
        pass
