"""Bad device requests (docs/api.md "Device authentication" and "Request bodies": headers, JSON bodies,
UUID/time/idempotency) on the real server: every row gets its documented 4xx with a fixed body, writes nothing, and no
input
produces a 5xx. Authentication happens before Content-Type parsing and before any body byte is read
(``Expect: 100-continue`` included)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from multidict import CIMultiDict

from cmbuyer.server.clock import ManualClock
from cmbuyer.server.db import run_in_transaction
from cmbuyer.server.services import devices as device_service
from cmbuyer.server.tx.common import Actor, new_id
from cmbuyer.server.web import jsonbody
from cmbuyer.server.web.device_auth import parse_credentials
from cmbuyer.server.web.device_errors import DeviceHTTPError
from tests.server.claims.conftest import CLAIM, HEARTBEAT, Claimed, claim_ok, fingerprint, heartbeat_body, renew_path
from tests.server.conftest import DeviceCreds, Maker

HEX = "0123456789abcdef" * 4
UUID_VARIANTS = {
    "uppercase": lambda u: u.upper(),
    "braced": lambda u: "{" + u + "}",
    "urn": lambda u: "urn:uuid:" + u,
    "no_hyphens": lambda u: u.replace("-", ""),
    "nil": lambda u: "00000000-0000-0000-0000-000000000000",
    "v1": lambda u: u[:14] + "1" + u[15:],
    "v7": lambda u: u[:14] + "7" + u[15:],
    "wrong_variant": lambda u: u[:19] + "c" + u[20:],
    "fullwidth_digit": lambda u: u.replace("0", "０").replace("1", "１") if any(c in u for c in "01") else "０" + u[1:],
    "37_chars": lambda u: u + "0",
}


def header_rows(dev: DeviceCreds, other: DeviceCreds, revoked: DeviceCreds) -> list[tuple[str, list[tuple[str, str]]]]:
    auth, did = f"Bearer {dev.token}", dev.device_id
    rows: list[tuple[str, list[tuple[str, str]]]] = [
        ("missing_both", []),
        ("missing_auth", [("X-CMBuyer-Device-ID", did)]),
        ("missing_device", [("Authorization", auth)]),
        ("empty_auth", [("Authorization", ""), ("X-CMBuyer-Device-ID", did)]),
        ("basic", [("Authorization", "Basic " + dev.token), ("X-CMBuyer-Device-ID", did)]),
        ("token_scheme", [("Authorization", "Token " + dev.token), ("X-CMBuyer-Device-ID", did)]),
        ("bearer_no_token", [("Authorization", "Bearer"), ("X-CMBuyer-Device-ID", did)]),
        ("two_spaces", [("Authorization", "Bearer  " + dev.token), ("X-CMBuyer-Device-ID", did)]),
        ("tab", [("Authorization", "Bearer\t" + dev.token), ("X-CMBuyer-Device-ID", did)]),
        ("hex63", [("Authorization", "Bearer " + dev.token[:63]), ("X-CMBuyer-Device-ID", did)]),
        ("hex65", [("Authorization", "Bearer " + dev.token + "0"), ("X-CMBuyer-Device-ID", did)]),
        ("upper_hex", [("Authorization", "Bearer " + dev.token.upper()), ("X-CMBuyer-Device-ID", did)]),
        ("0x", [("Authorization", "Bearer 0x" + dev.token[2:]), ("X-CMBuyer-Device-ID", did)]),
        ("non_hex", [("Authorization", "Bearer " + "g" + dev.token[1:]), ("X-CMBuyer-Device-ID", did)]),
        ("auth_twice", [("Authorization", auth), ("Authorization", auth), ("X-CMBuyer-Device-ID", did)]),
        ("device_twice", [("Authorization", auth), ("X-CMBuyer-Device-ID", did), ("X-CMBuyer-Device-ID", did)]),
        ("auth_comma_merged", [("Authorization", f"{auth}, {auth}"), ("X-CMBuyer-Device-ID", did)]),
        ("device_comma_merged", [("Authorization", auth), ("X-CMBuyer-Device-ID", f"{did}, {did}")]),
        ("other_devices_token", [("Authorization", f"Bearer {other.token}"), ("X-CMBuyer-Device-ID", did)]),
        ("unknown_token", [("Authorization", f"Bearer {HEX}"), ("X-CMBuyer-Device-ID", did)]),
        ("unknown_device", [("Authorization", auth), ("X-CMBuyer-Device-ID", new_id())]),
        ("revoked", [("Authorization", f"Bearer {revoked.token}"), ("X-CMBuyer-Device-ID", revoked.device_id)]),
    ]
    for name, fn in UUID_VARIANTS.items():
        rows.append((f"device_id_{name}", [("Authorization", auth), ("X-CMBuyer-Device-ID", fn(did))]))
    return rows


@pytest.fixture
def three(ready_device: Maker, sync_conn: sqlite3.Connection, clock: ManualClock) -> tuple[DeviceCreds, ...]:
    dev, other, revoked = ready_device("dev"), ready_device("other"), ready_device("revoked")
    run_in_transaction(
        sync_conn, lambda c: device_service.revoke_device(c, revoked.device_id, Actor("cli", "t"), clock.now())
    )
    return dev, other, revoked


async def test_every_bad_header_row_is_the_same_empty_401_and_writes_nothing(
    server_client: Any, three: tuple[DeviceCreds, ...], make_task: Maker, sync_conn: sqlite3.Connection
) -> None:
    dev, other, revoked = three
    make_task(start=True)
    before = fingerprint(sync_conn)
    bodies = {
        CLAIM: {"session_id": new_id(), "claim_request_id": new_id()},
        HEARTBEAT: heartbeat_body(dev.device_id),
        renew_path(new_id()): {
            "renew_request_id": new_id(),
            "session_id": new_id(),
            "attempt_id": new_id(),
            "claim_generation": 1,
            "claim_token": HEX,
            "expected_lease_expires_at": "2026-08-04T09:02:00.000000Z",
        },
    }
    for name, hdrs in header_rows(dev, other, revoked):
        for path, body in bodies.items():
            # a wrong Content-Type too: authentication answers first
            for ctype in ("application/json", "text/plain"):
                headers = CIMultiDict([("Content-Type", ctype), *hdrs])
                resp = await server_client.post(path, data=json.dumps(body).encode(), headers=headers)
                raw = await resp.read()
                assert (name, resp.status, raw) == (name, 401, b""), path
                assert resp.headers["WWW-Authenticate"] == "Bearer"
    assert fingerprint(sync_conn) == before


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "BeArEr"])
async def test_scheme_is_case_insensitive(server_client: Any, ready_device: Maker, scheme: str) -> None:
    dev = ready_device()
    resp = await server_client.post(
        CLAIM,
        data=json.dumps({"session_id": new_id(), "claim_request_id": new_id()}),
        headers={
            "Content-Type": "application/json",
            "Authorization": f"{scheme} {dev.token}",
            "X-CMBuyer-Device-ID": dev.device_id,
        },
    )
    assert resp.status == 204


def test_parse_credentials_refuses_raw_bytes_an_http_client_cannot_send() -> None:
    did = new_id().encode()
    good = ((b"Authorization", b"Bearer " + HEX.encode()), (b"X-CMBuyer-Device-ID", did))
    assert parse_credentials(good) is not None
    for bad_auth in (
        b"Bearer " + HEX.encode() + b"\n",
        b"Bearer " + HEX.encode()[:-1] + b"\xe9",
        b"Bearer " + HEX.encode()[:-1] + b"\x00",
        b"Bearer\xa0" + HEX.encode(),
    ):
        assert parse_credentials(((b"Authorization", bad_auth), (b"X-CMBuyer-Device-ID", did))) is None
    assert (
        parse_credentials(((b"Authorization", b"Bearer " + HEX.encode()), (b"X-CMBuyer-Device-ID", did + b"\n")))
        is None
    )


@pytest.mark.serial  # Hypothesis' default 200 ms deadline per example
@given(
    st.lists(
        st.tuples(
            st.sampled_from([b"Authorization", b"authorization", b"X-CMBuyer-Device-ID", b"X-Other"]),
            st.binary(max_size=120),
        ),
        max_size=4,
    )
)
@hsettings(max_examples=300)
def test_parse_credentials_never_raises_and_only_accepts_the_exact_form(headers: list[tuple[bytes, bytes]]) -> None:
    result = parse_credentials(tuple(headers))
    if result is not None:
        auth = [v for k, v in headers if k.lower() == b"authorization"]
        assert len(auth) == 1 and auth[0][:7].lower() == b"bearer " and len(auth[0]) == 71


async def test_storage_failure_during_authentication_is_an_empty_503(
    server_client: Any, ready_device: Maker, monkeypatch: pytest.MonkeyPatch
) -> None:
    dev = ready_device()
    from cmbuyer.server.web import device_auth

    def broken(*_a: Any) -> bool:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(device_auth.device_store, "authenticate", broken)
    resp = await server_client.post(CLAIM, data=b"{}", headers={"Content-Type": "application/json", **dev.headers()})
    assert (resp.status, await resp.read()) == (503, b"")


async def _raw(client: Any, head: bytes, body: bytes = b"", wait_for: float = 3.0) -> bytes:
    reader, writer = await asyncio.open_connection(client.server.host, client.server.port)
    try:
        writer.write(head + body)
        await writer.drain()
        data = b""
        try:
            async with asyncio.timeout(wait_for):
                while b"\r\n\r\n" not in data:
                    chunk = await reader.read(4096)
                    if not chunk:
                        break
                    data += chunk
        except TimeoutError:
            pass
        return data
    finally:
        writer.close()


def _head(creds_headers: dict[str, str], extra: str = "", length: int = 1_000_000) -> bytes:
    lines = [
        f"POST {CLAIM} HTTP/1.1",
        "Host: localhost",
        "Content-Type: application/json",
        f"Content-Length: {length}",
        *(f"{k}: {v}" for k, v in creds_headers.items()),
    ]
    if extra:
        lines.append(extra)
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def test_401_before_any_body_byte_also_with_expect_100_continue(
    server_client: Any, ready_device: Maker, sync_conn: sqlite3.Connection
) -> None:
    dev = ready_device()
    bad = {"Authorization": f"Bearer {HEX}", "X-CMBuyer-Device-ID": dev.device_id}
    before = fingerprint(sync_conn)
    # Expect: 100-continue with bad credentials: the answer is the 401, never an interim 100
    answer = await _raw(server_client, _head(bad, "Expect: 100-continue"))
    assert answer.startswith(b"HTTP/1.1 401") and b"100 Continue" not in answer
    # no Expect: 1 MB announced, 10 bytes sent, the 401 comes without waiting for the rest
    answer = await _raw(server_client, _head(bad), b'{"session_')
    assert answer.startswith(b"HTTP/1.1 401")
    # good credentials + Expect: the body is invited only now
    answer = await _raw(server_client, _head(dev.headers(), "Expect: 100-continue", 10), wait_for=1.0)
    assert answer.startswith(b"HTTP/1.1 100 Continue")
    assert fingerprint(sync_conn) == before


def _valid_claim() -> dict[str, Any]:
    return {"session_id": new_id(), "claim_request_id": new_id()}


def _padded(size: int) -> bytes:
    text = json.dumps(_valid_claim())
    return (text[:-1] + " " * (size - len(text)) + "}").encode()


JSON_ROWS: list[tuple[str, dict[str, str], Any, int, str]] = [
    # (name, extra headers, body, status, code)
    ("no_content_type", {"Content-Type": ""}, _valid_claim(), 415, "unsupported_media_type"),
    ("text_plain", {"Content-Type": "text/plain"}, _valid_claim(), 415, "unsupported_media_type"),
    ("latin1", {"Content-Type": "application/json; charset=latin-1"}, _valid_claim(), 415, "unsupported_media_type"),
    (
        "unknown_charset",
        {"Content-Type": "application/json; charset=klingon"},
        _valid_claim(),
        415,
        "unsupported_media_type",
    ),
    ("cap_plus_one", {}, _padded(4097), 413, "request_too_large"),
    ("empty", {}, b"", 400, "invalid_request"),
    ("null", {}, b"null", 400, "invalid_request"),
    ("array", {}, b"[]", 400, "invalid_request"),
    ("string", {}, b'"x"', 400, "invalid_request"),
    ("two_objects", {}, json.dumps(_valid_claim()).encode() * 2, 400, "invalid_request"),
    ("garbage_after", {}, json.dumps(_valid_claim()).encode() + b" x", 400, "invalid_request"),
    ("bom", {}, b"\xef\xbb\xbf" + json.dumps(_valid_claim()).encode(), 400, "invalid_request"),
    ("utf16", {}, json.dumps(_valid_claim()).encode("utf-16"), 400, "invalid_request"),
    ("overlong_utf8", {}, b'{"session_id": "\xc0\xaf", "claim_request_id": "x"}', 400, "invalid_request"),
    ("invalid_utf8", {}, b'{"session_id": "\xff", "claim_request_id": "x"}', 400, "invalid_request"),
    ("raw_control", {}, b'{"session_id": "a\x01b", "claim_request_id": "x"}', 400, "invalid_request"),
    ("lone_surrogate", {}, b'{"session_id": "\\ud800", "claim_request_id": "x"}', 400, "invalid_request"),
    (
        "duplicate_key",
        {},
        b'{"session_id": "%b", "session_id": "%b", "claim_request_id": "%b"}'
        % (new_id().encode(), new_id().encode(), new_id().encode()),
        400,
        "invalid_request",
    ),
    ("unknown_key", {}, {**_valid_claim(), "device_id": new_id()}, 400, "invalid_request"),
    ("missing_key", {}, {"session_id": new_id()}, 400, "invalid_request"),
    ("nan", {}, b'{"session_id": NaN, "claim_request_id": "x"}', 400, "invalid_request"),
    ("infinity", {}, b'{"session_id": Infinity, "claim_request_id": "x"}', 400, "invalid_request"),
    ("minus_zero", {}, b'{"session_id": -0, "claim_request_id": "x"}', 400, "invalid_request"),
    ("1e400", {}, b'{"session_id": 1e400, "claim_request_id": "x"}', 400, "invalid_request"),
    ("5000_digits", {}, b'{"session_id": ' + b"9" * 3000 + b', "claim_request_id": "x"}', 400, "invalid_request"),
    (
        "deep",
        {},
        b'{"session_id": ' + b"[" * 1500 + b"]" * 1500 + b', "claim_request_id": "x"}',
        400,
        "invalid_request",
    ),
    ("number_for_string", {}, {"session_id": 1, "claim_request_id": new_id()}, 400, "invalid_request"),
    ("true_for_string", {}, {"session_id": True, "claim_request_id": new_id()}, 400, "invalid_request"),
    (
        "trailing_newline_uuid",
        {},
        {"session_id": new_id() + "\n", "claim_request_id": new_id()},
        400,
        "invalid_request",
    ),
    *(
        (f"uuid_{name}", {}, {"session_id": fn(new_id()), "claim_request_id": new_id()}, 400, "invalid_request")
        for name, fn in UUID_VARIANTS.items()
    ),
]


@pytest.mark.parametrize(("name", "extra", "body", "status", "code"), JSON_ROWS, ids=[r[0] for r in JSON_ROWS])
async def test_json_body_rows(
    server_client: Any,
    dev: DeviceCreds,
    sync_conn: sqlite3.Connection,
    name: str,
    extra: dict[str, str],
    body: Any,
    status: int,
    code: str,
) -> None:
    before = fingerprint(sync_conn)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **dev.headers(), **extra}
    if headers["Content-Type"] == "":
        del headers["Content-Type"]
    resp = await server_client.post(CLAIM, data=data, headers=headers, skip_auto_headers=["Content-Type"])
    assert (resp.status, await resp.read()) == (status, json.dumps({"error": code}, separators=(",", ":")).encode())
    assert fingerprint(sync_conn) == before


async def test_exactly_the_cap_is_accepted(server_client: Any, ready_device: Maker) -> None:
    dev = ready_device()
    body = _padded(4096)
    assert len(body) == 4096
    resp = await server_client.post(
        CLAIM, data=body, headers={"Content-Type": "application/json; charset=utf-8", **dev.headers()}
    )
    assert resp.status == 204


async def test_chunked_body_over_the_cap_is_413(
    server_client: Any, ready_device: Maker, sync_conn: sqlite3.Connection
) -> None:
    dev = ready_device()
    before = fingerprint(sync_conn)

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(100):
            yield b" " * 1000

    resp = await server_client.post(CLAIM, data=chunks(), headers={"Content-Type": "application/json", **dev.headers()})
    assert (resp.status, await resp.read()) == (413, b'{"error":"request_too_large"}')
    assert fingerprint(sync_conn) == before


async def test_declared_length_mismatch(
    server_client: Any, ready_device: Maker, sync_conn: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    dev = ready_device()
    before = fingerprint(sync_conn)
    body = json.dumps(_valid_claim()).encode()
    # smaller than sent: the declared 10 bytes are not valid JSON, and the rest is not a valid HTTP
    # request either; whichever of the two 400s is written first, nothing is stored
    answer = await _raw(server_client, _head(dev.headers(), length=10), body)
    assert answer.split(b" ", 2)[1] == b"400"
    # larger than sent and the client stalls: bounded wait, then 400 (no hang)
    monkeypatch.setattr(jsonbody, "READ_TIMEOUT_S", 0.3)
    answer = await _raw(server_client, _head(dev.headers(), length=len(body) + 50), body)
    assert answer.startswith(b"HTTP/1.1 400")
    assert fingerprint(sync_conn) == before


RENEW_ROWS: list[tuple[str, dict[str, Any]]] = [
    ("generation_true", {"claim_generation": True}),
    ("generation_float", {"claim_generation": 1.0}),
    ("generation_string", {"claim_generation": "1"}),
    ("generation_zero", {"claim_generation": 0}),
    ("token_upper", {"claim_token": HEX.upper()}),
    ("token_63", {"claim_token": HEX[:63]}),
    *(
        (f"time_{n}", {"expected_lease_expires_at": t})
        for n, t in [
            ("offset", "2026-08-04T09:02:00+00:00"),
            ("lower_t", "2026-08-04t09:02:00Z"),
            ("lower_z", "2026-08-04T09:02:00z"),
            ("space", "2026-08-04 09:02:00Z"),
            ("no_offset", "2026-08-04T09:02:00"),
            ("other_offset", "2026-08-04T11:02:00+02:00"),
            ("24h", "2026-08-04T24:00:00Z"),
            ("leap", "2026-08-04T23:59:60Z"),
            ("bad_date", "2026-02-30T09:02:00Z"),
            ("nine_digits", "2026-08-04T09:02:00.000000000Z"),
            ("fullwidth", "２026-08-04T09:02:00Z"),
            ("newline", "2026-08-04T09:02:00Z\n"),
        ]
    ),
    *((f"attempt_{name}", {"attempt_id": fn(new_id())}) for name, fn in UUID_VARIANTS.items()),
]


@pytest.mark.parametrize(("name", "change"), RENEW_ROWS, ids=[r[0] for r in RENEW_ROWS])
async def test_renew_body_rows(
    server_client: Any,
    dev: DeviceCreds,
    sync_conn: sqlite3.Connection,
    name: str,
    change: dict[str, Any],
) -> None:
    session = new_id()
    got = await claim_ok(server_client, dev, session)
    before = fingerprint(sync_conn)
    resp = await server_client.post(
        renew_path(got.task_id),
        data=json.dumps(got.renew_body(session, **change)),
        headers={"Content-Type": "application/json", **dev.headers()},
    )
    assert (resp.status, await resp.read()) == (400, b'{"error":"invalid_request"}')
    assert fingerprint(sync_conn) == before
    assert isinstance(got, Claimed)


@pytest.mark.parametrize(
    "change",
    [
        {"device_id": "other"},
        {"pdd_version_code": True},
        {"pdd_version_code": 1.0},
        {"state": "ready"},
        {"adb_serial": ""},
        {"client_version": " 0.1"},
        {"extra": 1},
    ],
)
async def test_heartbeat_body_rows(
    server_client: Any, ready_device: Maker, sync_conn: sqlite3.Connection, change: dict[str, Any]
) -> None:
    dev = ready_device()
    if change.get("device_id") == "other":
        change = {"device_id": new_id()}  # the body may only describe the authenticated device
    before = fingerprint(sync_conn)
    resp = await server_client.post(
        HEARTBEAT,
        data=json.dumps({**heartbeat_body(dev.device_id), **change}),
        headers={"Content-Type": "application/json", **dev.headers()},
    )
    assert (resp.status, await resp.read()) == (400, b'{"error":"invalid_request"}')
    assert fingerprint(sync_conn) == before


@pytest.mark.serial  # Hypothesis' default 200 ms deadline per example
@given(st.binary(max_size=300))
@hsettings(max_examples=400)
def test_decode_json_only_ever_raises_the_fixed_400(raw: bytes) -> None:
    try:
        jsonbody.decode_json(raw)
    except DeviceHTTPError as exc:
        assert (exc.status, exc.code) == (400, "invalid_request")
