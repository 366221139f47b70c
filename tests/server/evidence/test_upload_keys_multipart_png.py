"""Evidence upload under attack: a reused key never leaves a file behind, the multipart reader's edge
cases (CRLF variants, LF only, boundary inside data, folding, Content-Disposition parameter tricks,
duplicate ``name``) and PNG edge cases (iCCP/zTXt bombs, huge IHDR with tiny IDAT, CgBI, acTL after
IDAT) are each a documented 4xx that writes nothing — never a 5xx."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import struct
import zlib
from typing import Any

import pytest

from cmbuyer.server.config import Settings
from cmbuyer.server.evidence.png import ImageRejected, validate_png
from tests.server.submissions import helpers

B = "cmbuyer-test-boundary"


# --- idempotency keys never leave unreferenced files behind -------------------------------------------


async def test_reused_upload_key_with_other_file_stores_no_file(
    server_client: Any, claimed: helpers.Claim, settings: Settings, sync_conn: sqlite3.Connection
) -> None:
    first = helpers.png(size=(24, 16))
    fields = helpers.evidence_fields(claimed, first)
    body, ctype = helpers.multipart(fields, first)
    assert (await helpers.upload(server_client, claimed.device, claimed.task_id, body, ctype))[0] == 201
    files, before = helpers.stored_files(settings), helpers.fingerprint(sync_conn)
    for n in range(3):
        other = helpers.png(size=(25 + n, 16))
        body2, ctype2 = helpers.multipart({**fields, "sha256": hashlib.sha256(other).hexdigest()}, other)
        status, raw = await helpers.upload(server_client, claimed.device, claimed.task_id, body2, ctype2)
        assert (status, json.loads(raw)) == (409, {"error": "idempotency_conflict"})
    assert helpers.stored_files(settings) == files  # a conflicting upload never reaches the disk
    assert helpers.fingerprint(sync_conn) == before


async def test_key_of_another_endpoint_as_upload_key_stores_no_file(
    server_client: Any, claimed: helpers.Claim, settings: Settings
) -> None:
    ev = helpers.events_body(claimed)
    assert (await helpers.post_json(server_client, helpers.events_path(claimed.task_id), claimed.device, ev))[0] == 200
    data = helpers.png()
    body, ctype = helpers.multipart(helpers.evidence_fields(claimed, data, upload_key=ev["batch_key"]), data)
    status, raw = await helpers.upload(server_client, claimed.device, claimed.task_id, body, ctype)
    assert (status, json.loads(raw)) == (409, {"error": "idempotency_conflict"})
    assert helpers.stored_files(settings) == set()


async def test_closed_claim_reused_key_with_new_file_stores_no_file(
    server_client: Any, claimed: helpers.Claim, settings: Settings
) -> None:
    data = helpers.png()
    fields = helpers.evidence_fields(claimed, data)
    body, ctype = helpers.multipart(fields, data)
    status, first = await helpers.upload(server_client, claimed.device, claimed.task_id, body, ctype)
    assert status == 201
    assert (
        await helpers.post_json(
            server_client, helpers.fail_path(claimed.attempt_id), claimed.device, helpers.fail_body(claimed)
        )
    )[0] == 200
    files = helpers.stored_files(settings)
    assert await helpers.upload(server_client, claimed.device, claimed.task_id, body, ctype) == (200, first)  # replay
    other = helpers.png(size=(40, 40))
    body2, ctype2 = helpers.multipart({**fields, "sha256": hashlib.sha256(other).hexdigest()}, other)
    status, _ = await helpers.upload(server_client, claimed.device, claimed.task_id, body2, ctype2)
    assert status == 409
    body3, ctype3 = helpers.multipart(helpers.evidence_fields(claimed, other), other)  # new key after close
    status, raw = await helpers.upload(server_client, claimed.device, claimed.task_id, body3, ctype3)
    assert (status, json.loads(raw)) == (409, {"error": "claim_not_current"})
    assert helpers.stored_files(settings) == files


async def test_other_devices_key_and_attempt(
    server_client: Any,
    claimed: helpers.Claim,
    other_claimed: helpers.Claim,
    settings: Settings,
    sync_conn: sqlite3.Connection,
) -> None:
    other = other_claimed
    data = helpers.png()
    fields = helpers.evidence_fields(claimed, data)
    body, ctype = helpers.multipart(fields, data)
    assert (await helpers.upload(server_client, claimed.device, claimed.task_id, body, ctype))[0] == 201
    files, before = helpers.stored_files(settings), helpers.fingerprint(sync_conn)
    other_data = helpers.png(size=(30, 30))
    # B reuses A's key for its own attempt; B targets A's attempt/task; B mixes its task with A's attempt.
    for task_id, attempt_id, key in (
        (other.task_id, other.attempt_id, fields["upload_key"]),
        (claimed.task_id, claimed.attempt_id, None),
        (other.task_id, claimed.attempt_id, None),
    ):
        over = {"attempt_id": attempt_id, **({"upload_key": key} if key else {})}
        b, ct = helpers.multipart(helpers.evidence_fields(other, other_data, **over), other_data)
        status, raw = await helpers.upload(server_client, other.device, task_id, b, ct)
        assert status == 409, raw
        assert json.loads(raw)["error"] in ("idempotency_conflict", "claim_not_current")
    assert helpers.stored_files(settings) == files and helpers.fingerprint(sync_conn) == before


# --- multipart edge cases -----------------------------------------------------------------------------


def _form(c: helpers.Claim, data: bytes) -> tuple[bytes, str]:
    return helpers.multipart(helpers.evidence_fields(c, data), data, boundary=B)


def _mutations(c: helpers.Claim, data: bytes) -> dict[str, tuple[bytes, str, int]]:
    body, ctype = _form(c, data)
    fields = helpers.evidence_fields(c, data)
    bad: dict[str, tuple[bytes, str, int]] = {
        "lf_only": (body.replace(b"\r\n", b"\n"), ctype, 400),
        "cr_only": (body.replace(b"\r\n", b"\r"), ctype, 400),
        "crcrlf": (body.replace(b"\r\n", b"\r\r\n"), ctype, 400),
        "mixed_lf_in_headers": (body.replace(b'name="kind"\r\n', b'name="kind"\n'), ctype, 400),
        "preamble": (b"preamble\r\n" + body, ctype, 400),
        "epilogue": (body + b"trailing", ctype, 400),
        "two_crlf_after_close": (body + b"\r\n", ctype, 400),
        "no_close": (body[: body.rindex(f"--{B}--".encode())], ctype, 400),
        "close_without_dashes": (body.replace(f"--{B}--".encode(), f"--{B}".encode()), ctype, 400),
        "folded_header": (
            body.replace(
                b'Content-Disposition: form-data; name="kind"', b'Content-Disposition: form-data;\r\n name="kind"'
            ),
            ctype,
            400,
        ),
        "folded_header_tab": (
            body.replace(
                b'Content-Disposition: form-data; name="kind"', b'Content-Disposition: form-data;\r\n\tname="kind"'
            ),
            ctype,
            400,
        ),
        "dup_name_param": (body.replace(b'name="kind"', b'name="kind"; name="sha256"'), ctype, 400),
        "name_star": (body.replace(b'name="kind"', b"name*=UTF-8''kind"), ctype, 400),
        "unquoted_name": (body.replace(b'name="kind"', b"name=kind"), ctype, 400),
        "empty_name": (body.replace(b'name="kind"', b'name=""'), ctype, 400),
        "name_with_semicolon_inside": (body.replace(b'name="kind"', b'name="kind;x"'), ctype, 400),
        "escaped_quote_in_name": (body.replace(b'name="kind"', b'name="ki\\"nd"'), ctype, 400),
        "attachment_disposition": (body.replace(b'form-data; name="kind"', b'attachment; name="kind"'), ctype, 400),
        "filename_on_text": (body.replace(b'name="kind"', b'name="kind"; filename="k.txt"'), ctype, 400),
        "unknown_param": (body.replace(b'name="kind"', b'name="kind"; size=3'), ctype, 400),
        "dup_disposition": (
            body.replace(
                b'Content-Disposition: form-data; name="kind"\r\n',
                b'Content-Disposition: form-data; name="kind"\r\nContent-Disposition: form-data; name="kind"\r\n',
            ),
            ctype,
            400,
        ),
        "content_length_part": (
            body.replace(b"Content-Type: image/png\r\n", b"Content-Type: image/png\r\nContent-Length: +5\r\n"),
            ctype,
            400,
        ),
        "cte_base64": (
            body.replace(
                b"Content-Type: image/png\r\n", b"Content-Type: image/png\r\nContent-Transfer-Encoding: base64\r\n"
            ),
            ctype,
            400,
        ),
        "nul_in_header": (body.replace(b'name="kind"', b'name="kind\x00"'), ctype, 400),
        "non_ascii_header": (body.replace(b'name="kind"', 'name="kïnd"'.encode()), ctype, 400),
        "space_before_colon": (body.replace(b"Content-Disposition:", b"Content-Disposition :"), ctype, 400),
        "png_type_param": (body.replace(b"Content-Type: image/png", b"Content-Type: image/png; x=1"), ctype, 400),
        "text_type_html": (body.replace(b'name="kind"\r\n', b'name="kind"\r\nContent-Type: text/html\r\n'), ctype, 400),
        "boundary_param_twice": (body, f"multipart/form-data; boundary={B}; boundary=x", 415),
        "boundary_with_charset": (body, f"multipart/form-data; boundary={B}; charset=utf-8", 415),
        "boundary_too_long": (body, "multipart/form-data; boundary=" + "a" * 71, 415),
        "boundary_empty": (body, "multipart/form-data; boundary=", 415),
        "mixed_subtype": (body, f"multipart/mixed; boundary={B}", 415),
        "other_boundary": (body, "multipart/form-data; boundary=zzz", 400),
        "boundary_prefix": (body, "multipart/form-data; boundary=cmbuyer-test", 400),
    }
    # a boundary-lookalike inside the data: "\r\n--<boundary>X" cuts the part short → refused
    trick = b"\r\n--" + B.encode() + b"X"
    tricked, _ = helpers.multipart(helpers.evidence_fields(c, data + trick), data + trick, boundary=B)
    bad["boundary_inside_data"] = (tricked, ctype, 400)
    # a whole second file part hidden after a fake closing delimiter in the data
    fake = data + b"\r\n--" + B.encode() + b"--\r\n"
    hidden, _ = helpers.multipart({**fields, "sha256": hashlib.sha256(fake).hexdigest()}, fake, boundary=B)
    bad["fake_close_inside_data"] = (hidden, ctype, 400)
    return bad


async def test_multipart_edge_cases_are_4xx_and_write_nothing(
    server_client: Any, claimed: helpers.Claim, settings: Settings, sync_conn: sqlite3.Connection
) -> None:
    data = helpers.png()
    before = helpers.fingerprint(sync_conn)
    for name, (body, ctype, expected) in _mutations(claimed, data).items():
        status, raw = await helpers.upload(server_client, claimed.device, claimed.task_id, body, ctype)
        assert status == expected, (name, status, raw)
        assert json.loads(raw) in (
            {"error": "invalid_request"},
            {"error": "unsupported_media_type"},
            {"error": "unsupported_image"},
        ), name
    assert helpers.fingerprint(sync_conn) == before
    assert helpers.stored_files(settings) == set()
    # the untouched form still works (the cases above did not poison anything)
    body, ctype = _form(claimed, data)
    assert (await helpers.upload(server_client, claimed.device, claimed.task_id, body, ctype))[0] == 201


async def test_quoted_boundary_and_header_case_are_accepted(server_client: Any, claimed: helpers.Claim) -> None:
    data = helpers.png()
    body, _ = _form(claimed, data)
    body = body.replace(b"Content-Disposition:", b"content-disposition:").replace(b"Content-Type:", b"CONTENT-TYPE:")
    status, raw = await helpers.upload(
        server_client, claimed.device, claimed.task_id, body, f'Multipart/Form-Data; boundary="{B}"'
    )
    assert status == 201, raw


# --- PNG edge cases -----------------------------------------------------------------------------------


def _chunk(ctype: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + ctype + body + struct.pack(">I", zlib.crc32(ctype + body))


def _split(data: bytes) -> list[tuple[bytes, bytes]]:
    pos, out = 8, []
    while pos < len(data):
        n = int.from_bytes(data[pos : pos + 4], "big")
        out.append((data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]))
        pos += 12 + n
    return out


def _build(chunks: list[tuple[bytes, bytes]]) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + b"".join(_chunk(t, b) for t, b in chunks)


def _insert_after(data: bytes, after: bytes, new: list[tuple[bytes, bytes]]) -> bytes:
    out: list[tuple[bytes, bytes]] = []
    for t, b in _split(data):
        out.append((t, b))
        if t == after:
            out.extend(new)
    return _build(out)


def _bomb(size: int) -> bytes:
    return zlib.compress(b"\x00" * size, 9)


def _ihdr(w: int, h: int, depth: int = 8, color: int = 2) -> bytes:
    return struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 0)


def _png_cases() -> dict[str, bytes]:
    base = helpers.png()
    idat_tiny = zlib.compress(b"\x00" * 10)
    return {
        "iccp_bomb": _insert_after(base, b"IHDR", [(b"iCCP", b"icc\x00\x00" + _bomb(64 << 20))]),
        "iccp_twice": _insert_after(base, b"IHDR", [(b"iCCP", b"a\x00\x00" + zlib.compress(b"x" * 100))] * 2),
        "ztxt_bomb": _insert_after(base, b"IHDR", [(b"zTXt", b"Comment\x00\x00" + _bomb(64 << 20))]),
        "itxt_compressed_bomb": _insert_after(
            base, b"IHDR", [(b"iTXt", b"Comment\x00\x01\x00\x00\x00" + _bomb(64 << 20))]
        ),
        "ztxt_after_idat_bomb": _insert_after(base, b"IDAT", [(b"zTXt", b"Comment\x00\x00" + _bomb(64 << 20))]),
        "many_text_chunks": _insert_after(base, b"IHDR", [(b"tEXt", b"k\x00v")] * 33),
        "huge_ihdr_tiny_idat": _build([(b"IHDR", _ihdr(4096, 4096)), (b"IDAT", idat_tiny), (b"IEND", b"")]),
        "max_side_plus_one": _build([(b"IHDR", _ihdr(8193, 1)), (b"IDAT", idat_tiny), (b"IEND", b"")]),
        "width_2_31": _build([(b"IHDR", _ihdr(2**31 - 1, 1)), (b"IDAT", idat_tiny), (b"IEND", b"")]),
        "zero_height": _build([(b"IHDR", _ihdr(10, 0)), (b"IDAT", idat_tiny), (b"IEND", b"")]),
        "pixels_over_cap": _build([(b"IHDR", _ihdr(8192, 2049)), (b"IDAT", idat_tiny), (b"IEND", b"")]),
        "cgbi_first": _build([(b"CgBI", b"\x50\x00\x20\x02"), *_split(base)]),
        "cgbi_after_ihdr": _insert_after(base, b"IHDR", [(b"CgBI", b"\x50\x00\x20\x02")]),
        "actl_after_idat": _insert_after(base, b"IDAT", [(b"acTL", struct.pack(">II", 1, 0))]),
        "fctl_after_idat": _insert_after(base, b"IDAT", [(b"fcTL", b"\x00" * 26)]),
        "unknown_critical_chunk": _insert_after(base, b"IHDR", [(b"ABCD", b"x")]),
        "idat_split_by_text": _build(
            [
                *[c for c in _split(base) if c[0] == b"IHDR"],
                (b"IDAT", _split(base)[1][1][:5]),
                (b"tEXt", b"k\x00v"),
                (b"IDAT", _split(base)[1][1][5:]),
                (b"IEND", b""),
            ]
        ),
        "second_ihdr": _insert_after(base, b"IHDR", [(b"IHDR", _ihdr(24, 16))]),
        "plte_for_rgb_garbage": _insert_after(base, b"IHDR", [(b"PLTE", b"\x00\x01")]),
        "no_iend": base[:-12],
        "after_iend": base + b"\x00",
        "bad_crc": base[:-1] + bytes([base[-1] ^ 1]),
        "signature_crlf_mangled": base.replace(b"\r\n\x1a\n", b"\n\x1a\n", 1),
        "empty": b"",
    }


@pytest.mark.serial  # "quickly": an upper bound on wall time
def test_png_edge_cases_are_rejected_quickly() -> None:
    import time

    for name, data in _png_cases().items():
        if not data:
            continue
        t0 = time.monotonic()
        with pytest.raises(ImageRejected):
            validate_png(data, max_side=8192, max_pixels=16_777_216)
        assert time.monotonic() - t0 < 5, name


def test_unknown_ancillary_chunk_is_fine() -> None:
    base = helpers.png()
    data = _insert_after(base, b"IHDR", [(b"prVt", b"private")])
    assert validate_png(data, max_side=8192, max_pixels=16_777_216).width == 24


async def test_png_edge_cases_over_http(
    server_client: Any, claimed: helpers.Claim, settings: Settings, sync_conn: sqlite3.Connection
) -> None:
    before = helpers.fingerprint(sync_conn)
    for name, data in _png_cases().items():
        if not data or (name.endswith("_bomb") and name != "iccp_bomb"):
            continue  # the bombs are ~64 KiB each; one over HTTP is enough
        body, ctype = helpers.multipart(helpers.evidence_fields(claimed, data), data)
        status, raw = await helpers.upload(server_client, claimed.device, claimed.task_id, body, ctype)
        assert (status, json.loads(raw)) == (400, {"error": "unsupported_image"}), name
    assert helpers.fingerprint(sync_conn) == before and helpers.stored_files(settings) == set()
