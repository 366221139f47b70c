"""Which addresses ``serve`` may listen on, and which client address a request counts as (loopback only
without HTTPS: docs/operations.md "HTTPS: phone hosts on other machines").

Pure rules over :mod:`ipaddress` values: :func:`bind_refusal` decides whether a bind is allowed,
:func:`forwarded_client` picks the client address out of ``X-Forwarded-For``. The HTTP edge
(``server/web/client_address.py``) and ``cmbuyer-server serve`` are their only callers.
"""

from __future__ import annotations

from collections.abc import Sequence
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

Network = IPv4Network | IPv6Network
Address = IPv4Address | IPv6Address
# The interface addresses ``--behind-proxy`` may bind: RFC 1918, shared address space (RFC 6598), IPv6
# unique-local and link-local. Not ``ipaddress.is_private``, which also counts the documentation ranges.
PRIVATE_NETWORKS = tuple(
    ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7", "fe80::/10")
)
# Longest X-Forwarded-For value read; a longer one is ignored whole (a proxy writes a short chain).
MAX_FORWARDED_CHARS = 1024


def _parse(host: str) -> Address | None:
    try:
        return ip_address(host.strip("[]"))
    except ValueError:
        return None


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1); a host name is not loopback."""
    if host.lower() == "localhost":
        return True
    parsed = _parse(host)
    return parsed is not None and parsed.is_loopback


def bind_refusal(host: str, *, tls: bool, behind_proxy: bool, trusted_proxies: Sequence[Network]) -> str | None:
    """Why ``serve`` must not listen on ``host`` (one line), or None when it may.

    Loopback is always allowed. Anything else needs the server's own TLS, or ``behind_proxy`` with at least
    one trusted proxy and a loopback or private address (never the unspecified ``0.0.0.0``/``::``, which
    would also listen on public interfaces). Host names other than ``localhost`` count as non-loopback.
    """
    if is_loopback_host(host) or tls:
        return None
    if behind_proxy:
        if not trusted_proxies:
            return "--behind-proxy 需要在 CMBUYER_TRUSTED_PROXIES 中给出反向代理的地址"
        parsed = _parse(host)
        if parsed is None or not (parsed.is_loopback or any(parsed in net for net in PRIVATE_NETWORKS)):
            return (
                f"--behind-proxy 只能监听本机回环或内网地址，不能是 {host}；"
                "要监听其他地址请配置 TLS（--tls-cert/--tls-key）"
            )
        return None
    return (
        f"{host} 不是本机回环地址，且没有配置 TLS：请给出 --tls-cert/--tls-key（见 "
        "`cmbuyer-server tls init`），或使用 --behind-proxy 并设置 CMBUYER_TRUSTED_PROXIES"
    )


def is_trusted(peer: str, trusted_proxies: Sequence[Network]) -> bool:
    """True when ``peer`` (an address text) lies in one of ``trusted_proxies``."""
    parsed = _parse(peer)
    return parsed is not None and any(parsed in net for net in trusted_proxies)


def forwarded_scheme(peer: str, forwarded_proto: Sequence[str], trusted_proxies: Sequence[Network]) -> str | None:
    """``"https"``/``"http"`` as a trusted proxy says the browser reached it (``X-Forwarded-Proto``, one
    header line with one value), else None: from any other peer, or for anything else, the header is
    ignored and the connection's own scheme stands."""
    if len(forwarded_proto) != 1 or not is_trusted(peer, trusted_proxies):
        return None
    value = forwarded_proto[0].strip().lower()
    return value if value in ("https", "http") else None


def forwarded_client(peer: str, forwarded_for: Sequence[str], trusted_proxies: Sequence[Network]) -> str:
    """The address a request counts as (login throttle, audit, logs).

    ``peer`` is the TCP peer. Only when it is a trusted proxy is ``X-Forwarded-For`` read (every header line,
    in order): walking the chain from the right, trusted proxies are skipped and the first other address is
    the client. A malformed entry, an over-long value or a chain made only of proxies leaves the answer at
    the last address that could be vouched for (the peer, or the left-most proxy). From any other peer the
    header is ignored, so a client cannot choose its own address.
    """
    if not forwarded_for or not is_trusted(peer, trusted_proxies):
        return peer
    joined = ",".join(forwarded_for)
    if len(joined) > MAX_FORWARDED_CHARS:
        return peer
    client = peer
    for part in reversed(joined.split(",")):
        parsed = _parse(part.strip())
        if parsed is None:
            return client
        client = str(parsed)
        if not any(parsed in net for net in trusted_proxies):
            return client
    return client
