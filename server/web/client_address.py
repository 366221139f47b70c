"""The one place the HTTP edge decides who a request came from: its client address (login throttle, audit
rows) and the scheme the browser used — both taken from a reverse proxy's headers only when the TCP peer
is one of ``CMBUYER_TRUSTED_PROXIES`` (rules in :mod:`cmbuyer.server.domain.bind`)."""

from __future__ import annotations

from aiohttp import web

from cmbuyer.server.domain.bind import forwarded_client, forwarded_scheme
from cmbuyer.server.web.keys import SETTINGS


def _peer(request: web.Request) -> str:
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    return str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"


def request_scheme(request: web.Request) -> str:
    """The scheme the browser used: the connection's own (``https`` under the server's TLS), or what a
    trusted proxy says in ``X-Forwarded-Proto`` (a TLS-terminating proxy in front of ``serve
    --behind-proxy``) — the admin pages' same-origin check compares ``Origin`` with it."""
    trusted = request.app[SETTINGS].trusted_proxies
    if trusted:
        said = forwarded_scheme(_peer(request), request.headers.getall("X-Forwarded-Proto", []), trusted)
        if said is not None:
            return said
    return request.scheme


def client_address(request: web.Request) -> str:
    """The client's address: the TCP peer, or — only when that peer is one of ``CMBUYER_TRUSTED_PROXIES``
    — the client named in ``X-Forwarded-For`` (:func:`cmbuyer.server.domain.bind.forwarded_client`).
    ``"unknown"`` when the transport has no peer (a closed connection)."""
    address = _peer(request)
    trusted = request.app[SETTINGS].trusted_proxies
    if not trusted:
        return address
    return forwarded_client(address, request.headers.getall("X-Forwarded-For", []), trusted)
