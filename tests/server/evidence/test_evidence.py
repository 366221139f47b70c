"""Evidence upload over real HTTP (docs/api.md "POST /api/v1/tasks/{id}/evidence";
"PNG content")."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from typing import Any

import pytest

from cmbuyer.server.config import Settings
from cmbuyer.server.evidence import files
from cmbuyer.server.tx.common import new_id
from cmbuyer.server.web import multipart as multipart_module
from tests.server.evidence.pngs import build, padded_to
from tests.server.submissions import helpers

MiB = 1024 * 1024


async def test_upload_201_then_replay_200_and_bytes_kept(
    server_client: Any, claimed: helpers.Claim, settings: Settings, sync_conn: sqlite3.Connection
) -> None:
    data = build(40, 30, 16, 6, interlace=1)  # 16-bit RGBA, interlaced
    fields = helpers.evidence_fields(claimed, data)
    body, ctype = helpers.multipart(fields, data)
    status, raw = await helpers.upload(server_client, claimed.device, claimed.task_id, body, ctype)
    assert status == 201, raw
    first = json.loads(raw)
    assert first == {
        "asset_id": first["asset_id"],
        "task_id": claimed.task_id,
        "attempt_id": claimed.attempt_id,
        "kind": "SKU_PANEL_GATE_1",
        "privacy_tier": "INTERNAL_RAW",
        "sha256": fields["sha256"],
        "byte_size": len(data),
        "mime": "image/png",
        "width": 40,
        "height": 30,
        "captured_at": "2026-08-04T09:01:00Z",
    }
    path = files.path_for(settings.evidence_dir, fields["sha256"])
    assert path.read_bytes() == data
    assert path.relative_to(settings.evidence_dir).parts[:2] == (fields["sha256"][:2], fields["sha256"][2:4])
    status, raw2 = await helpers.upload(server_client, claimed.device, claimed.task_id, body, ctype)
    assert (status, raw2) == (200, raw)
    # same key, other metadata / other bytes → 409
    changed, ctype2 = helpers.multipart({**fields, "kind": "FAILURE"}, data)
    assert (await helpers.upload(server_client, claimed.device, claimed.task_id, changed, ctype2))[0] == 409
    other = helpers.png("RGB", (8, 8))
    changed, ctype3 = helpers.multipart({**fields, "sha256": hashlib.sha256(other).hexdigest()}, other)
    status, raw3 = await helpers.upload(server_client, claimed.device, claimed.task_id, changed, ctype3)
    assert (status, json.loads(raw3)) == (409, {"error": "idempotency_conflict"})
    assert sync_conn.execute("SELECT count(*) FROM evidence_assets").fetchone()[0] == 1
    assert b"s.png" not in raw and str(settings.evidence_dir).encode() not in raw


@pytest.mark.parametrize(
    "kind", ["SKU_PANEL_GATE_1", "QUANTITY_GATE_2", "CONFIRM_PAGE_GATE_3", "POST_SUBMIT_OBSERVATION", "FAILURE"]
)
async def test_every_kind_accepted(server_client: Any, claimed: helpers.Claim, kind: str) -> None:
    data = helpers.png("L", (10, 10))
    body, ctype = helpers.multipart(helpers.evidence_fields(claimed, data, kind=kind), data)
    assert (await helpers.upload(server_client, claimed.device, claimed.task_id, body, ctype))[0] == 201


@pytest.mark.parametrize(
    "data",
    [
        helpers.png("RGB"),
        helpers.png("RGBA"),
        helpers.png("P"),
        helpers.png("L"),
        helpers.png("I;16"),
        build(11, 9, 16, 0),
        build(11, 9, 16, 2),
        build(11, 9, 16, 6),
        build(11, 9, 8, 2, 1),
        build(8192, 2048, 8, 0),
    ],
)
async def test_accepted_pngs_stored_byte_identical(
    server_client: Any, claimed: helpers.Claim, settings: Settings, data: bytes
) -> None:
    fields = helpers.evidence_fields(claimed, data)
    body, ctype = helpers.multipart(fields, data)
    status, raw = await helpers.upload(server_client, claimed.device, claimed.task_id, body, ctype)
    assert status == 201, raw
    assert files.read(settings.evidence_dir, fields["sha256"]) == data


async def test_device_a_cannot_upload_to_device_b_attempt(
    server_client: Any,
    claimed: helpers.Claim,
    other_claimed: helpers.Claim,
    settings: Settings,
    sync_conn: sqlite3.Connection,
) -> None:
    other = other_claimed
    before = helpers.fingerprint(sync_conn)
    data = helpers.png("RGB", (9, 9))
    # A's credentials, B's attempt (on B's task URL and on A's task URL)
    for task_id in (other.task_id, claimed.task_id):
        body, ctype = helpers.multipart(helpers.evidence_fields(other, data), data)
        status, raw = await helpers.upload(server_client, claimed.device, task_id, body, ctype)
        assert (status, json.loads(raw)) == (409, {"error": "claim_not_current"})
    # B's own attempt under A's task id: the attempt does not belong to the URL's task
    body, ctype = helpers.multipart(helpers.evidence_fields(other, data), data)
    status, raw = await helpers.upload(server_client, other.device, claimed.task_id, body, ctype)
    assert (status, json.loads(raw)) == (409, {"error": "claim_not_current"})
    assert helpers.fingerprint(sync_conn) == before
    assert helpers.stored_files(settings) == set()  # refused before the file store


async def test_closed_claim_replays_old_key_refuses_new(server_client: Any, claimed: helpers.Claim) -> None:
    data = helpers.png("RGB", (9, 9))
    body, ctype = helpers.multipart(helpers.evidence_fields(claimed, data, kind="FAILURE"), data)
    status, raw = await helpers.upload(server_client, claimed.device, claimed.task_id, body, ctype)
    assert status == 201
    status, _ = await helpers.post_json(
        server_client,
        helpers.fail_path(claimed.attempt_id),
        claimed.device,
        helpers.fail_body(claimed, evidence_asset_id=json.loads(raw)["asset_id"]),
    )
    assert status == 200
    assert await helpers.upload(server_client, claimed.device, claimed.task_id, body, ctype) == (200, raw)
    body2, ctype2 = helpers.multipart(helpers.evidence_fields(claimed, data, kind="FAILURE"), data)
    status, raw2 = await helpers.upload(server_client, claimed.device, claimed.task_id, body2, ctype2)
    assert (status, json.loads(raw2)) == (409, {"error": "claim_not_current"})


def _cases(c: helpers.Claim) -> dict[str, tuple[bytes, str, int, str]]:
    data = helpers.png("RGB", (12, 12))
    f = helpers.evidence_fields(c, data)
    ok_body, ok_type = helpers.multipart(f, data)
    b = "cmbuyer-test-boundary"
    fields_without = {k: v for k, v in f.items() if k != "kind"}

    def with_file_headers(headers: str) -> tuple[bytes, str]:
        """The valid upload with the file part's headers replaced by ``headers``."""
        return helpers.multipart(f, data, file_headers=headers)[0], ok_type

    cases: dict[str, tuple[bytes, str]] = {
        "not multipart": (ok_body, "application/json"),
        "no boundary": (ok_body, "multipart/form-data"),
        "empty boundary": (ok_body, "multipart/form-data; boundary="),
        "boundary 71 chars": (ok_body, "multipart/form-data; boundary=" + "a" * 71),
        "extra content-type param": (ok_body, ok_type + "; charset=utf-8"),
        "boundary never closed": (ok_body[: -(len(b) + 6)], ok_type),
        "missing final --": (helpers.multipart(f, data, closing=b"\r\n")[0], ok_type),
        "epilogue garbage": (ok_body + b"garbage", ok_type),
        "preamble": (b"preamble\r\n" + ok_body, ok_type),
        "zero file parts": (helpers.multipart(f, None)[0], ok_type),
        "two file parts": (helpers.multipart(f, data, extra=helpers.multipart({}, data)[0][: -len(b) - 6])[0], ok_type),
        "wrong file field name": (helpers.multipart(f, data, file_name="image")[0], ok_type),
        "unknown metadata field": (helpers.multipart({**f, "note": "x"}, data)[0], ok_type),
        "duplicate metadata field": (
            helpers.multipart(
                f, data, extra=f'--{b}\r\nContent-Disposition: form-data; name="kind"\r\n\r\nFAILURE\r\n'.encode()
            )[0],
            ok_type,
        ),
        "missing field": (helpers.multipart(fields_without, data)[0], ok_type),
        "file not image/png": with_file_headers("Content-Type: application/octet-stream\r\n"),
        "file without content-type": with_file_headers(""),
        "transfer-encoding base64": with_file_headers(
            "Content-Type: image/png\r\nContent-Transfer-Encoding: base64\r\n"
        ),
        "content-encoding gzip": with_file_headers("Content-Type: image/png\r\nContent-Encoding: gzip\r\n"),
        "nested multipart": with_file_headers("Content-Type: multipart/mixed; boundary=x\r\n"),
        "part content-length +5": with_file_headers("Content-Type: image/png\r\nContent-Length: +5\r\n"),
        "thousands of part headers": with_file_headers("Content-Type: image/png\r\n" + "X-A: b\r\n" * 5000),
        "obs-fold header": with_file_headers("Content-Type:\r\n image/png\r\n"),
        "sha uppercase": (helpers.multipart({**f, "sha256": f["sha256"].upper()}, data)[0], ok_type),
        "sha wrong length": (helpers.multipart({**f, "sha256": f["sha256"][:-1]}, data)[0], ok_type),
        "sha not matching": (helpers.multipart({**f, "sha256": "0" * 64}, data)[0], ok_type),
        "privacy tier": (helpers.multipart({**f, "privacy_tier": "INTERNAL_MASKED"}, data)[0], ok_type),
        "unknown kind": (helpers.multipart({**f, "kind": "PAYMENT_PAGE"}, data)[0], ok_type),
        "captured_at offset": (helpers.multipart({**f, "captured_at": "2026-08-04T09:01:00+00:00"}, data)[0], ok_type),
        "upload_key uppercase": (helpers.multipart({**f, "upload_key": f["upload_key"].upper()}, data)[0], ok_type),
        "attempt id braced": (helpers.multipart({**f, "attempt_id": "{" + f["attempt_id"] + "}"}, data)[0], ok_type),
        "metadata not utf-8": (ok_body.replace(b"SKU_PANEL_GATE_1", b"SKU_PANEL_GATE_\xff"), ok_type),
        "metadata field 5 MiB": (helpers.multipart({**f, "kind": "K" * (5 * MiB)}, data)[0], ok_type),
        "file 10 MiB + 1": (helpers.multipart(f, padded_to(10 * MiB + 1))[0], ok_type),
        "gif bytes": (helpers.multipart({**f, "sha256": hashlib.sha256(b"GIF89a").hexdigest()}, b"GIF89a")[0], ok_type),
        "trailing bytes after IEND": (
            helpers.multipart({**f, "sha256": hashlib.sha256(data + b"x").hexdigest()}, data + b"x")[0],
            ok_type,
        ),
    }
    expected = {
        "not multipart": (415, "unsupported_media_type"),
        "no boundary": (415, "unsupported_media_type"),
        "empty boundary": (415, "unsupported_media_type"),
        "boundary 71 chars": (415, "unsupported_media_type"),
        "extra content-type param": (415, "unsupported_media_type"),
        "metadata field 5 MiB": (413, "request_too_large"),
        "file 10 MiB + 1": (413, "request_too_large"),
        "gif bytes": (400, "unsupported_image"),
        "trailing bytes after IEND": (400, "unsupported_image"),
    }
    return {k: (v[0], v[1], *expected.get(k, (400, "invalid_request"))) for k, v in cases.items()}


async def test_bad_multipart_rows_refused_nothing_written(
    server_client: Any, claimed: helpers.Claim, settings: Settings, sync_conn: sqlite3.Connection
) -> None:
    before = helpers.fingerprint(sync_conn)
    for label, (body, ctype, want_status, want_code) in _cases(claimed).items():
        status, raw = await helpers.upload(server_client, claimed.device, claimed.task_id, body, ctype)
        assert (status, raw) == (want_status, json.dumps({"error": want_code}, separators=(",", ":")).encode()), label
    assert helpers.fingerprint(sync_conn) == before
    assert helpers.stored_files(settings) == set()


async def test_odd_filenames_are_ignored(server_client: Any, claimed: helpers.Claim, settings: Settings) -> None:
    data = helpers.png("RGB", (7, 7))
    for disposition in ('filename="../../x"', 'filename=""', "filename*=x-unknown''%FF%FE"):
        fields = helpers.evidence_fields(claimed, data)
        body, ctype = helpers.multipart(fields, data)
        body = body.replace(b'filename="s.png"', disposition.encode())
        status, raw = await helpers.upload(server_client, claimed.device, claimed.task_id, body, ctype)
        assert status in (200, 201), (disposition, raw)
    assert all(p.name.endswith(".png") and len(p.stem) == 64 for p in helpers.stored_files(settings))
    assert not (settings.evidence_dir.parent / "x").exists()


async def test_file_of_exactly_10_mib_accepted(server_client: Any, claimed: helpers.Claim) -> None:
    data = padded_to(10 * MiB)
    body, ctype = helpers.multipart(helpers.evidence_fields(claimed, data), data)
    status, raw = await helpers.upload(server_client, claimed.device, claimed.task_id, body, ctype)
    assert status == 201, raw
    assert json.loads(raw)["byte_size"] == 10 * MiB


async def test_bad_task_path_and_no_credentials(server_client: Any, claimed: helpers.Claim) -> None:
    data = helpers.png()
    body, ctype = helpers.multipart(helpers.evidence_fields(claimed, data), data)
    assert (await helpers.upload(server_client, claimed.device, "not-a-uuid", body, ctype))[0] == 400
    assert await helpers.upload(server_client, None, claimed.task_id, body, ctype) == (401, b"")
    unknown_task = new_id()
    status, raw = await helpers.upload(server_client, claimed.device, unknown_task, body, ctype)
    assert (status, json.loads(raw)) == (409, {"error": "claim_not_current"})


async def test_chunked_upload_and_stalled_client(
    server_client: Any, claimed: helpers.Claim, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    data = helpers.png("RGB", (30, 30))
    body, ctype = helpers.multipart(helpers.evidence_fields(claimed, data), data)

    async def chunks() -> Any:
        for i in range(0, len(body), 100):
            yield body[i : i + 100]

    resp = await server_client.post(
        helpers.evidence_path(claimed.task_id),
        data=chunks(),
        headers={"Content-Type": ctype, **claimed.device.headers()},
    )
    assert resp.status == 201
    monkeypatch.setattr(multipart_module, "STALL_TIMEOUT_S", 0.3)
    body2, _ = helpers.multipart(helpers.evidence_fields(claimed, data), data)

    async def stalls() -> Any:
        yield body2[:200]
        await asyncio.sleep(2)
        yield body2[200:]

    try:
        resp = await server_client.post(
            helpers.evidence_path(claimed.task_id),
            data=stalls(),
            headers={"Content-Type": ctype, **claimed.device.headers()},
        )
        assert (resp.status, await resp.json()) == (400, {"error": "invalid_request"})
    except Exception as exc:  # the server may close while the client is still sending
        assert "Connection" in type(exc).__name__ or "Disconnected" in type(exc).__name__, exc
