"""server/domain/bind.py: where ``serve`` may listen without TLS, and whose address a forwarded request is."""

from __future__ import annotations

from ipaddress import ip_network

import pytest

from cmbuyer.server.domain.bind import bind_refusal, forwarded_client, forwarded_scheme, is_loopback_host

PROXY = (ip_network("10.0.0.5/32"),)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", "LOCALHOST"])
def test_loopback_needs_nothing(host: str) -> None:
    assert is_loopback_host(host)
    assert bind_refusal(host, tls=False, behind_proxy=False, trusted_proxies=()) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.8", "192.168.1.4", "203.0.113.5", "phonehub.lan"])
def test_anything_else_needs_tls(host: str) -> None:
    refusal = bind_refusal(host, tls=False, behind_proxy=False, trusted_proxies=())
    assert refusal is not None and "TLS" in refusal and host in refusal
    assert bind_refusal(host, tls=True, behind_proxy=False, trusted_proxies=()) is None


def test_behind_a_proxy_only_private_interfaces_with_a_trusted_proxy() -> None:
    assert bind_refusal("10.0.0.8", tls=False, behind_proxy=True, trusted_proxies=PROXY) is None
    assert "CMBUYER_TRUSTED_PROXIES" in str(bind_refusal("10.0.0.8", tls=False, behind_proxy=True, trusted_proxies=()))
    assert bind_refusal("fd00::8", tls=False, behind_proxy=True, trusted_proxies=PROXY) is None
    for host in ("0.0.0.0", "::", "203.0.113.5", "93.184.216.34", "phonehub.lan"):
        assert bind_refusal(host, tls=False, behind_proxy=True, trusted_proxies=PROXY) is not None


@pytest.mark.parametrize(
    ("peer", "header", "client"),
    [
        ("203.0.113.9", ["198.51.100.1"], "203.0.113.9"),  # untrusted peer: header ignored
        ("10.0.0.5", [], "10.0.0.5"),  # trusted, no header
        ("10.0.0.5", ["198.51.100.1"], "198.51.100.1"),
        ("10.0.0.5", ["192.0.2.1, 198.51.100.1"], "198.51.100.1"),  # right-most non-proxy wins
        ("10.0.0.5", ["192.0.2.1", "198.51.100.1, 10.0.0.5"], "198.51.100.1"),  # several lines, proxy skipped
        ("10.0.0.5", ["198.51.100.1, junk"], "10.0.0.5"),  # malformed: the last vouched-for address
        ("10.0.0.5", ["junk, 198.51.100.1"], "198.51.100.1"),
        ("10.0.0.5", ["10.0.0.5"], "10.0.0.5"),
        ("10.0.0.5", ["1.1.1.1," * 200], "10.0.0.5"),  # over-long: ignored whole
    ],
)
def test_forwarded_client(peer: str, header: list[str], client: str) -> None:
    assert forwarded_client(peer, header, PROXY) == client


def test_forwarded_scheme() -> None:
    assert forwarded_scheme("10.0.0.5", ["https"], PROXY) == "https"
    assert forwarded_scheme("10.0.0.5", [" HTTP "], PROXY) == "http"
    assert forwarded_scheme("203.0.113.9", ["https"], PROXY) is None  # untrusted peer
    assert forwarded_scheme("10.0.0.5", ["https", "http"], PROXY) is None  # ambiguous
    assert forwarded_scheme("10.0.0.5", ["wss"], PROXY) is None
    assert forwarded_scheme("10.0.0.5", [], PROXY) is None
