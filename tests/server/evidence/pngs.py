"""Hand-built PNGs for the validator tests (16-bit colour, interlaced, oversized headers, broken
streams) — Pillow cannot write most of these."""

from __future__ import annotations

import struct
import zlib

from cmbuyer.server.evidence.png import PNG_MAGIC, raw_size


def chunk(ctype: bytes, body: bytes, *, crc: int | None = None) -> bytes:
    value = zlib.crc32(ctype + body) if crc is None else crc
    return struct.pack(">I", len(body)) + ctype + body + struct.pack(">I", value)


def ihdr(width: int, height: int, depth: int = 8, color: int = 2, interlace: int = 0) -> bytes:
    return chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, interlace))


def build(
    width: int = 16,
    height: int = 8,
    depth: int = 8,
    color: int = 2,
    interlace: int = 0,
    *,
    raw: bytes | None = None,
    idat: bytes | None = None,
    before_idat: bytes = b"",
    after_iend: bytes = b"",
    iend: bool = True,
    header: bytes | None = None,
    idat_parts: int = 1,
) -> bytes:
    """A PNG with all-zero (filter 0) pixel rows unless ``raw``/``idat`` say otherwise."""
    if raw is None and idat is None:
        raw = bytes(raw_size(width, height, depth, color, bool(interlace)))
    data = idat if idat is not None else zlib.compress(raw or b"", 9)
    step = max(1, -(-len(data) // idat_parts))
    idats = b"".join(chunk(b"IDAT", data[i : i + step]) for i in range(0, len(data), step))
    plte = chunk(b"PLTE", bytes(range(6))) if color == 3 else b""
    return (
        PNG_MAGIC
        + (header if header is not None else ihdr(width, height, depth, color, interlace))
        + plte
        + before_idat
        + idats
        + (chunk(b"IEND", b"") if iend else b"")
        + after_iend
    )


def padded_to(size: int) -> bytes:
    """A valid PNG of exactly ``size`` bytes (a private ancillary chunk carries the padding)."""
    base = build()
    pad = size - len(base) - 12
    assert pad >= 0
    return build(before_idat=chunk(b"prVt", bytes(pad)))
