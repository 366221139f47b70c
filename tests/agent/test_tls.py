"""The agent's side of TLS (agent/tls.py and HttpDeviceApi): https verified always (the system's
CAs or only ``--server-ca``), plain http only to a loopback server, a certificate that does not verify is a
final, clear error (never retried, never answered by plain HTTP), and what ``doctor`` reports about the
server's certificate. The server here is a stdlib HTTPS server on 127.0.0.1 with a trustme CA."""

from __future__ import annotations

import http.server
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trustme

from cmbuyer.agent.cli import _tls_check
from cmbuyer.agent.client import Credentials, HttpDeviceApi
from cmbuyer.agent.tls import ServerTlsError, certificate_report, check_server_url, verify_server

DEVICE = Credentials("6f1c2b8e-4a1d-4c7e-9b2a-1d3e5f7a9c0b", "t" * 43)


class _NoKeys:
    def key(self, purpose: str, scope: str = "") -> str:
        raise AssertionError("no keyed request here")

    def drop_key(self, purpose: str, scope: str = "") -> None:
        return None


@dataclass
class HttpsServer:
    url: str
    ca_file: Path
    hits: list[str]


class _Handler(http.server.BaseHTTPRequestHandler):
    hits: list[str]

    def do_POST(self) -> None:
        self.hits.append(self.path)
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        return None


def _serve(tmp_path: Path, not_after: datetime | None = None) -> Iterator[HttpsServer]:
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", common_name="cmbuyer-test", not_after=not_after)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    leaf.configure_cert(context)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    hits: list[str] = []
    handler = type("Handler", (_Handler,), {"hits": hits})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield HttpsServer(f"https://127.0.0.1:{server.server_address[1]}", ca_file, hits)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def https(tmp_path: Path) -> Iterator[HttpsServer]:
    yield from _serve(tmp_path)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080", "http://localhost:8080", "http://[::1]:8080"])
def test_plain_http_only_to_loopback(url: str) -> None:
    check_server_url(url)
    with pytest.raises(ServerTlsError, match="--server-ca"):
        check_server_url(url, Path("ca.pem"))


@pytest.mark.parametrize("url", ["http://10.0.0.5:8080", "http://phones.lan", "ftp://127.0.0.1", "127.0.0.1:8080"])
def test_anything_else_must_be_https(url: str) -> None:
    with pytest.raises(ServerTlsError):
        check_server_url(url)
    with pytest.raises(ServerTlsError):
        HttpDeviceApi(url, DEVICE, _NoKeys())


def test_with_the_ca_the_agent_talks(https: HttpsServer) -> None:
    api = HttpDeviceApi(https.url, DEVICE, _NoKeys(), server_ca=https.ca_file)
    assert api._post("/api/v1/ping", b"{}", "application/json", "ping") == (200, {})
    assert https.hits == ["/api/v1/ping"]
    verify_server(https.url, https.ca_file)


@pytest.mark.serial  # "at once": an upper bound on wall time
def test_without_the_ca_the_agent_refuses_at_once_and_sends_nothing(https: HttpsServer) -> None:
    api = HttpDeviceApi(https.url, DEVICE, _NoKeys(), retries=4, backoff=2.0)
    started = time.monotonic()
    with pytest.raises(ServerTlsError) as caught:
        api._post("/api/v1/ping", b"{}", "application/json", "ping")
    assert time.monotonic() - started < 2.0, "a verification failure must not be retried"
    assert "TLS" in caught.value.summary and "--server-ca" in caught.value.summary
    assert caught.value.final
    assert https.hits == [], "no request (and no token) may reach a server that did not verify"
    with pytest.raises(ServerTlsError, match="--server-ca"):
        verify_server(https.url, None)


def test_a_ca_file_that_is_not_pem_is_a_clear_error(https: HttpsServer, tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("nope")
    with pytest.raises(ServerTlsError, match="--server-ca"):
        HttpDeviceApi(https.url, DEVICE, _NoKeys(), server_ca=junk)


def test_certificate_report_and_doctor_line(https: HttpsServer) -> None:
    report = certificate_report(https.url, https.ca_file)
    assert report.verified and report.subject == "cmbuyer-test" and report.days_left is not None
    assert not report.expiring
    unverified = certificate_report(https.url, None)
    assert not unverified.verified and unverified.subject == "cmbuyer-test" and unverified.error
    checks: list[tuple[str, bool, str]] = []
    _tls_check(https.url, https.ca_file, lambda name, ok, detail="": checks.append((name, ok, detail)))
    _tls_check(https.url, None, lambda name, ok, detail="": checks.append((name, ok, detail)))
    assert checks[0][0] == "server certificate" and checks[0][1] and "已验证" in checks[0][2]
    assert not checks[1][1] and "未通过验证" in checks[1][2]


def test_a_certificate_close_to_expiry_is_flagged(tmp_path: Path) -> None:
    for server in _serve(tmp_path, not_after=datetime.now(UTC) + timedelta(days=5)):
        report = certificate_report(server.url, server.ca_file)
        assert report.verified and report.expiring and report.days_left is not None and report.days_left <= 5
        found: list[tuple[str, bool, str]] = []
        _tls_check(server.url, server.ca_file, lambda name, ok, detail="", out=found: out.append((name, ok, detail)))
        assert found and not found[0][1] and "还剩" in found[0][2]
