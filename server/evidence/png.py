"""Strict PNG validation for evidence uploads (docs/api.md "POST /api/v1/tasks/{id}/evidence": magic, full decode, size
limits, no APNG).

Order matters: the chunk structure is walked first without decoding —
signature, IHDR first with sane fields, **the header's width/height checked against the limits
before any pixel is inflated**, every chunk's CRC, no animation chunks (``acTL``/``fcTL``/``fdAT``),
bounded text chunks, compressed ancillary chunks (``iCCP``, ``zTXt``, compressed ``iTXt``) inflating
to at most :data:`MAX_ANCILLARY_INFLATED` bytes together (inflated in bounded pieces, output
discarded — a zTXt/iCCP bomb costs at most that much work and one piece of memory), ``IEND`` present
and nothing after it. Then the concatenated IDAT zlib stream is
inflated in bounded pieces (output discarded) and must produce exactly the byte count the header
implies — a stream that inflates past it, stops short or carries trailing data is refused. Only then
does Pillow open the bytes with ``formats=["PNG"]`` and fully decode them.

Pure CPU work on bytes already in memory; the web layer runs it in a worker thread with a small
concurrency limit so memory stays bounded.
"""

from __future__ import annotations

import io
import struct
import warnings
import zlib
from dataclasses import dataclass

from PIL import Image

from cmbuyer.server.domain.errors import CmbuyerError
from cmbuyer.server.domain.evidence_limits import EvidenceLimits

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MAX_CHUNKS = 50_000
MAX_TEXT_CHUNKS = 32
MAX_TEXT_BYTES = 64 * 1024
MAX_ANCILLARY_INFLATED = 1 << 20
_INFLATE_PIECE = 1 << 16
_TEXT_CHUNKS = frozenset({b"tEXt", b"zTXt", b"iTXt"})
_ANIMATION_CHUNKS = frozenset({b"acTL", b"fcTL", b"fdAT"})
_CRITICAL_CHUNKS = frozenset({b"IHDR", b"PLTE", b"IDAT", b"IEND"})
# Ancillary chunks the PNG spec allows at most once (a second iCCP etc. means a malformed or crafted file).
_ONCE_CHUNKS = frozenset(
    {
        b"cHRM",
        b"gAMA",
        b"iCCP",
        b"sBIT",
        b"sRGB",
        b"bKGD",
        b"hIST",
        b"tRNS",
        b"pHYs",
        b"tIME",
        b"eXIf",
        b"cICP",
        b"mDCv",
        b"cLLi",
    }
)
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_DEPTHS = {0: {1, 2, 4, 8, 16}, 2: {8, 16}, 3: {1, 2, 4, 8}, 4: {8, 16}, 6: {8, 16}}
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


class ImageRejected(CmbuyerError, ValueError):
    """The bytes are not an acceptable PNG. ``reason`` is a short fixed word for logs/tests (the HTTP
    answer is always ``400 {"error":"unsupported_image"}``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class PngInfo:
    """What the header says (after full validation)."""

    width: int
    height: int
    bit_depth: int
    color_type: int
    interlaced: bool


def _row_bytes(width: int, bits_per_pixel: int) -> int:
    return (width * bits_per_pixel + 7) // 8 + 1  # +1 filter byte per row


def raw_size(width: int, height: int, bit_depth: int, color_type: int, interlaced: bool) -> int:
    """Exact size of the decompressed IDAT data the header implies (filter bytes included)."""
    bpp = _CHANNELS[color_type] * bit_depth
    if not interlaced:
        return height * _row_bytes(width, bpp)
    total = 0
    for x0, y0, dx, dy in _ADAM7:
        pw = (width - x0 + dx - 1) // dx if width > x0 else 0
        ph = (height - y0 + dy - 1) // dy if height > y0 else 0
        if pw and ph:
            total += ph * _row_bytes(pw, bpp)
    return total


def _parse_ihdr(body: bytes, max_side: int, max_pixels: int) -> PngInfo:
    width, height, depth, color, compression, filter_method, interlace = struct.unpack(">IIBBBBB", body)
    if not (1 <= width <= max_side and 1 <= height <= max_side) or width * height > max_pixels:
        raise ImageRejected("dimensions")
    if (
        color not in _DEPTHS
        or depth not in _DEPTHS[color]
        or compression != 0
        or filter_method != 0
        or interlace not in (0, 1)
    ):
        raise ImageRejected("ihdr")
    return PngInfo(width, height, depth, color, interlace == 1)


def _compressed_part(ctype: bytes, body: bytes) -> bytes | None:
    """The zlib stream inside an iCCP / zTXt / iTXt chunk (None for an uncompressed iTXt);
    a layout without its separators or with a compression method other than 0 → ImageRejected."""
    name, sep, rest = body.partition(b"\0")
    if not sep or not 1 <= len(name) <= 79:
        raise ImageRejected("ancillary_layout")
    if ctype == b"iTXt":
        if len(rest) < 2 or rest[0] not in (0, 1) or rest[1] != 0 or rest[2:].count(b"\0") < 2:
            raise ImageRejected("ancillary_layout")
        if rest[0] == 0:
            return None
        _, _, after_lang = rest[2:].partition(b"\0")
        return after_lang.partition(b"\0")[2]
    if not rest or rest[0] != 0:
        raise ImageRejected("ancillary_layout")
    return rest[1:]


class _BoundedInflate:
    """A zlib stream inflated one piece (≤ :data:`_INFLATE_PIECE` bytes of output) at a time, the output
    counted and discarded: past ``limit`` bytes in all it raises ``ImageRejected(too_large)``, so a
    decompression bomb costs at most ``limit`` bytes of work and one piece of memory."""

    def __init__(self, limit: int, too_large: str) -> None:
        self.inflater = zlib.decompressobj()
        self.produced = 0
        self._limit = limit
        self._too_large = too_large

    def piece(self, data: bytes) -> bytes:
        """Inflate one piece of ``data`` (``b""``: what the inflater still holds); returns the output.
        The input it could not take yet is ``self.inflater.unconsumed_tail``. Raises ``zlib.error``."""
        out = self.inflater.decompress(data, _INFLATE_PIECE)
        self.produced += len(out)
        if self.produced > self._limit:
            raise ImageRejected(self._too_large)
        return out


def _inflate_ancillary(stream: bytes, budget: int) -> int:
    """Inflate ``stream`` in bounded pieces; returns the bytes it produced. More than ``budget`` →
    ImageRejected("ancillary_too_large"); a broken or unfinished stream → ImageRejected("ancillary_zlib")."""
    inflate = _BoundedInflate(budget, "ancillary_too_large")
    pending = stream
    try:
        while True:
            out = inflate.piece(pending)
            pending = inflate.inflater.unconsumed_tail
            if inflate.inflater.eof or (not pending and not out):
                break
    except zlib.error:
        raise ImageRejected("ancillary_zlib") from None
    if not inflate.inflater.eof:
        raise ImageRejected("ancillary_zlib")
    return inflate.produced


def check_structure(data: bytes, *, max_side: int, max_pixels: int) -> tuple[PngInfo, list[tuple[int, int]]]:
    """Walk the chunks without decoding; returns the header info and the IDAT ``(start, end)`` spans.

    Raises :class:`ImageRejected`. The size limits are enforced here, from IHDR alone.
    """
    if not data.startswith(PNG_MAGIC):
        raise ImageRejected("signature")
    pos = len(PNG_MAGIC)
    info: PngInfo | None = None
    idat: list[tuple[int, int]] = []
    idat_done = False
    texts = text_bytes = chunks = 0
    seen_plte = False
    seen_once: set[bytes] = set()
    inflate_budget = MAX_ANCILLARY_INFLATED
    while True:
        if len(data) - pos < 12:
            raise ImageRejected("truncated")
        length = int.from_bytes(data[pos : pos + 4], "big")
        ctype = data[pos + 4 : pos + 8]
        end = pos + 12 + length
        if length > 0x7FFFFFFF or end > len(data):
            raise ImageRejected("truncated")
        if not ctype.isalpha() or not ctype.isascii() or not ctype[2:3].isupper():
            raise ImageRejected("chunk_type")  # the third letter's case bit is reserved (must be upper)
        if ctype[:1].isupper() and ctype not in _CRITICAL_CHUNKS:
            # An unknown critical chunk (e.g. Apple's CgBI): a conforming decoder must refuse the image,
            # so a browser showing the evidence to a person would not display what Pillow decoded.
            raise ImageRejected("unknown_critical_chunk")
        if ctype in _ONCE_CHUNKS:
            if ctype in seen_once:
                raise ImageRejected("duplicate_chunk")
            seen_once.add(ctype)
        body = data[pos + 8 : pos + 8 + length]
        if zlib.crc32(ctype + body) != int.from_bytes(data[end - 4 : end], "big"):
            raise ImageRejected("crc")
        chunks += 1
        if chunks > MAX_CHUNKS:
            raise ImageRejected("too_many_chunks")
        if info is None:
            if ctype != b"IHDR" or length != 13:
                raise ImageRejected("ihdr")
            info = _parse_ihdr(body, max_side, max_pixels)
        elif ctype == b"IHDR":
            raise ImageRejected("ihdr")
        elif ctype in _ANIMATION_CHUNKS:
            raise ImageRejected("animated")
        elif ctype in _TEXT_CHUNKS:
            texts += 1
            text_bytes += length
            if texts > MAX_TEXT_CHUNKS or text_bytes > MAX_TEXT_BYTES:
                raise ImageRejected("text_chunks")
            if ctype != b"tEXt" and (stream := _compressed_part(ctype, body)) is not None:
                inflate_budget -= _inflate_ancillary(stream, inflate_budget)
        elif ctype == b"iCCP":
            inflate_budget -= _inflate_ancillary(_compressed_part(ctype, body) or b"", inflate_budget)
        elif ctype == b"PLTE":
            if seen_plte or idat or length == 0 or length % 3 or length > 256 * 3:
                raise ImageRejected("plte")
            seen_plte = True
        elif ctype == b"IDAT":
            if idat_done:
                raise ImageRejected("idat_split")
            idat.append((pos + 8, pos + 8 + length))
        elif ctype == b"IEND":
            if length != 0:
                raise ImageRejected("iend")
            pos = end
            break
        if idat and ctype != b"IDAT":
            idat_done = True
        pos = end
    if pos != len(data):
        raise ImageRejected("trailing_bytes")
    if info is None or not idat:
        raise ImageRejected("no_image_data")
    if info.color_type == 3 and not seen_plte:
        raise ImageRejected("no_palette")
    return info, idat


def check_inflated_size(data: bytes, spans: list[tuple[int, int]], expected: int) -> None:
    """Inflate the IDAT stream in bounded pieces (discarding output); it must yield exactly
    ``expected`` bytes, end cleanly and carry nothing after its end. Raises ImageRejected."""
    inflate = _BoundedInflate(expected, "inflates_past_size")
    inflater = inflate.inflater
    try:
        for start, end in spans:
            pending = data[start:end]
            while pending:
                inflate.piece(pending)
                pending = inflater.unconsumed_tail
                if inflater.eof:
                    if pending or inflater.unused_data:
                        raise ImageRejected("idat_trailing_data")
                    break
        while not inflater.eof and inflate.piece(b""):
            pass  # drain what the inflater still holds, piece by piece
    except zlib.error:
        raise ImageRejected("zlib") from None
    if not inflater.eof or inflate.produced != expected:
        raise ImageRejected("idat_truncated")


def validate_png(data: bytes, *, max_side: int, max_pixels: int) -> PngInfo:
    """Fully validate ``data`` as a single-frame PNG within the limits; returns its header info.

    Raises :class:`ImageRejected` for anything else (see the module docstring for the order).
    """
    info, spans = check_structure(data, max_side=max_side, max_pixels=max_pixels)
    check_inflated_size(
        data, spans, raw_size(info.width, info.height, info.bit_depth, info.color_type, info.interlaced)
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=["PNG"]) as im:
                if im.format != "PNG" or im.size != (info.width, info.height):
                    raise ImageRejected("pillow_header")
                if getattr(im, "is_animated", False) or getattr(im, "n_frames", 1) != 1:
                    raise ImageRejected("animated")
                im.load()
    except ImageRejected:
        raise
    except (
        OSError,
        SyntaxError,
        ValueError,
        EOFError,
        struct.error,
        zlib.error,
        MemoryError,
        Image.DecompressionBombError,
        Image.DecompressionBombWarning,
    ):
        raise ImageRejected("decode") from None
    return info


def validate_evidence(data: bytes, limits: EvidenceLimits) -> PngInfo:
    """:func:`validate_png` within the evidence limits' ``max_side`` and ``max_pixels`` (the upload's
    byte size was already capped by the multipart reader at ``limits.max_bytes``). Raises
    :class:`ImageRejected`."""
    return validate_png(data, max_side=limits.max_side, max_pixels=limits.max_pixels)
