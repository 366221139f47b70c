"""The one place the HTTP edge decides a request's client address (login throttle, audit rows, logs)."""

from __future__ import annotations

from aiohttp import web

from cmbuyer.server.domain.bind import forwarded_client
from cmbuyer.server.web.keys import SETTINGS


def client_address(request: web.Request) -> str:
    """The client's address: the TCP peer, or — only when that peer is one of ``CMBUYER_TRUSTED_PROXIES``
    — the client named in ``X-Forwarded-For`` (:func:`cmbuyer.server.domain.bind.forwarded_client`).
    ``"unknown"`` when the transport has no peer (a closed connection)."""
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    address = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
    trusted = request.app[SETTINGS].trusted_proxies
    if not trusted:
        return address
    return forwarded_client(address, request.headers.getall("X-Forwarded-For", []), trusted)
