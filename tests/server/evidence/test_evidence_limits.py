"""Upload limits against the real server process: an unauthenticated 10 MiB upload is refused before
its body is read (also with Expect: 100-continue), and memory stays bounded for a 50 MiB field, a
50 MiB file stream with no length, and a part with 10,000 headers."""

from __future__ import annotations

import socket
import threading

import pytest

from cmbuyer.server.tx.common import new_id
from tests.server.conftest import DeviceCreds, Maker
from tests.server.submissions.helpers import evidence_path
from tests.server.submissions.live import LiveServer

# the live server's peak RSS is measured: alone (pytest -m serial)
pytestmark = pytest.mark.serial

MiB = 1024 * 1024
BOUNDARY = "cmbuyer-limit-test"


def _head(task_id: str, creds: DeviceCreds | None, extra: str) -> bytes:
    auth = "".join(f"{k}: {v}\r\n" for k, v in (creds.headers() if creds else {}).items())
    return (
        f"POST {evidence_path(task_id)} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}"
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n{extra}\r\n"
    ).encode()


def _read_response(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_unauthenticated_10_mib_refused_before_body(live: LiveServer) -> None:
    for extra in (f"Content-Length: {10 * MiB}\r\n", f"Content-Length: {10 * MiB}\r\nExpect: 100-continue\r\n"):
        with socket.create_connection(("127.0.0.1", live.port), timeout=5) as sock:
            sock.sendall(_head(new_id(), None, extra))  # headers only: not one body byte is sent
            response = _read_response(sock)
        assert response.startswith(b"HTTP/1.1 401"), response
        assert b"100 Continue" not in response


def _stream(live: LiveServer, creds: DeviceCreds, first: bytes, filler: bytes, total: int) -> bytes:
    """Send headers + a chunked body of ``total`` bytes (or until the server stops reading); return the
    response head."""
    sock = socket.create_connection(("127.0.0.1", live.port), timeout=20)
    response: list[bytes] = []

    def reader() -> None:
        try:
            response.append(_read_response(sock))
        except OSError:
            response.append(b"")

    t = threading.Thread(target=reader)
    try:
        sock.sendall(_head(new_id(), creds, "Transfer-Encoding: chunked\r\n"))
        t.start()
        sent = 0
        block = first
        try:
            while sent < total and not response:
                sock.sendall(f"{len(block):x}\r\n".encode() + block + b"\r\n")
                sent += len(block)
                block = filler
            sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server answered and closed while we were still sending
        t.join(20)
    finally:
        sock.close()
    return response[0] if response else b""


def test_memory_bounded_for_huge_field_stream_and_headers(live: LiveServer, make_device: Maker) -> None:
    creds = make_device()
    base = live.peak_rss_kib()
    field = f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="upload_key"\r\n\r\n'.encode()
    resp = _stream(live, creds, field, b"k" * MiB, 50 * MiB)
    assert resp.startswith(b"HTTP/1.1 413"), resp
    assert live.peak_rss_kib() - base < 8 * 1024  # a 50 MiB field never got buffered
    headers = f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\n'.encode() + b"".join(
        f"X-H{i}: v\r\n".encode() for i in range(10_000)
    )
    resp = _stream(live, creds, headers, b"", 0)
    assert resp.startswith(b"HTTP/1.1 400"), resp
    file_part = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\n'
        "Content-Type: image/png\r\n\r\n"
    ).encode()
    resp = _stream(live, creds, file_part, b"\x89PNG" * (MiB // 4), 50 * MiB)
    assert resp.startswith(b"HTTP/1.1 413"), resp
    # at most the 10 MiB cap (+ copies of it) was ever held, never the 50 MiB stream
    assert live.peak_rss_kib() - base < 40 * 1024
    assert live.proc is not None and live.proc.poll() is None
