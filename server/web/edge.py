"""The HTTP edge rules every route shares (encodings, slow bodies, refused bodies).

One home for four rules that sit below the route handlers:

- **Content-Encoding** (:func:`identity_only`): a request body is only ever read as sent. Any
  ``Content-Encoding`` header whose value is not exactly ``identity`` (repeated headers and lists
  included) is refused with 415 ``unsupported_media_type`` before a body byte is read — on device
  routes after authentication (authentication always comes first there), on every other route at
  once. aiohttp would otherwise decompress gzip/deflate/br bodies on the fly (a bomb costs CPU before
  anybody is authenticated) and a body that is not what its header says became a 500.
- **Body-read time limit** (:data:`BODY_READ_TIMEOUT_S`): every body reader (device JSON, multipart
  stalls, admin forms and the login form) gives up after this many seconds.
- **Refused bodies** (:func:`close_after`, :func:`refusal_middleware`): when a response is sent while
  the request body was not read to its end (401, 413, 415, an early 4xx …), the server sends the whole
  response, half-closes its side (FIN, so the client can still read the answer), reads and discards
  at most :data:`LINGER_BYTES` for at most :data:`LINGER_S`, then closes. aiohttp's own lingering
  (up to 10 s of unlimited reading) never starts.
- **Cut bodies** (:func:`read_chunk`, :class:`BodyCut`): every body reader reads through
  :func:`read_chunk`, which turns a connection that closed under the reader (the client left halfway
  through its body, or the guard below closed it) into :class:`BodyCut`. The middleware answers it with
  a quiet close: counted (:attr:`ConnectionGuard.cut_bodies`), at most one log line per
  :data:`LOG_INTERVAL_S`, no traceback and never aiohttp's 500 path.
- **Pending connections** (:class:`ConnectionGuard`): a connection that has not yet carried an
  authenticated request (device token or admin session) is *pending*. Pending connections are capped
  per client address and overall — the oldest pending connection is closed when a new one would
  exceed a cap — and each lives at most ``pending_connection_timeout`` seconds. A connection leaves
  the pending set for good at its first authenticated request, so a phone host's keep-alive
  connections (one address for many agents, or everybody behind a reverse proxy) are never capped
  as pending. Authenticated device connections are capped per device instead
  (``device_connections_max``): a device's new connection beyond the cap closes that
  device's least recently used one — at once when it is idle, after its answer when it carries a
  request — so a leaked token can hold at most that many idle connections and never starve other
  phones, and a device's own concurrent requests are never cut off mid-answer.
- **Accept-error log storms** (:class:`RateLimitedExceptionHandler`): the event loop's exception
  handler logs each distinct message at most once per :data:`LOG_INTERVAL_S` with a count of the
  repeats it swallowed (``socket.accept() out of system resource`` when descriptors run out).

aiohttp has no hook for connection accounting, so :func:`install_connection_guard` wraps
``aiohttp.web_server.Server.connection_made``/``connection_lost`` once per process (like
:mod:`.hardening` does for error pages); the wrapper finds the guard through the application that
the server serves and does nothing for applications without one. These are private internals (as is
``RequestHandler._lingering_time``): pyproject.toml bounds aiohttp below its next minor release and
tests/server/web/test_aiohttp_internals.py fails when they change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web, web_server

from cmbuyer.server.domain.errors import CmbuyerError

log = logging.getLogger("cmbuyer.http")

BODY_READ_TIMEOUT_S = 10.0
LINGER_S = 1.0
LINGER_BYTES = 64 * 1024
LOG_INTERVAL_S = 10.0

_IDENTITY = b"identity"
_CONTENT_ENCODING = b"content-encoding"
_MARK = "_cmbuyer_guarded"


def identity_only(raw_headers: tuple[tuple[bytes, bytes], ...]) -> bool:
    """True when the request declares no body encoding other than ``identity``.

    Every ``Content-Encoding`` header, and every comma-separated item in it, must be ``identity``
    (case-insensitive, surrounding spaces ignored); an empty value is refused too (fail closed).
    """
    for key, value in raw_headers:
        if key.lower() == _CONTENT_ENCODING:
            items = value.split(b",")
            if any(item.strip(b" \t").lower() != _IDENTITY for item in items):
                return False
    return True


# -- cut bodies ----------------------------------------------------------------------------------------


class BodyCut(CmbuyerError):
    """The connection closed before the request body was read to its end (client gone, or closed by
    the :class:`ConnectionGuard`). Raised by :func:`read_chunk`; :func:`refusal_middleware` turns it
    into a quiet, counted close."""


async def read_chunk(request: web.BaseRequest, n: int) -> bytes:
    """``request.content.read(n)`` (at most ``n`` bytes, ``b""`` at the end of the body), with a closed
    connection raised as :class:`BodyCut`. Timeouts are the caller's (``asyncio.timeout`` around it)."""
    try:
        return await request.content.read(n)
    except (ConnectionError, asyncio.IncompleteReadError) as exc:
        raise BodyCut() from exc
    except RuntimeError as exc:
        # aiohttp raises a bare RuntimeError("Connection closed.") when a read starts after the
        # transport went away (e.g. the guard closed it while the handler was still queued)
        transport = request.transport
        if transport is None or transport.is_closing():
            raise BodyCut() from exc
        raise


# -- refused bodies ------------------------------------------------------------------------------------


def _body_finished(request: web.BaseRequest) -> bool:
    # aiohttp's is_eof(): the whole body has *arrived* (read or not). A fully arrived, unread body
    # costs nothing more, so only a body still on its way makes the connection close.
    return request.content.is_eof()


async def close_after(request: web.BaseRequest, response: web.StreamResponse) -> web.StreamResponse:
    """Send ``response`` completely, half-close, drain at most LINGER_BYTES / LINGER_S, then close.

    Use for every response sent while the request body is still (partly) unread. Returns the
    response (already sent) so a handler or middleware can return it as usual.
    """
    response.force_close()
    transport = request.transport
    try:
        await response.prepare(request)
        await response.write_eof()
        if transport is not None and not transport.is_closing() and transport.can_write_eof():
            transport.write_eof()
    except (ConnectionError, RuntimeError):
        # the client is gone (or the transport refused the half-close): nothing left to linger for
        request.protocol.force_close()
        return response
    drained = 0
    # a timeout, a reset or a payload error (e.g. a body that is not what its encoding says) all
    # just end the linger: the answer is already sent
    with contextlib.suppress(Exception):
        async with asyncio.timeout(LINGER_S):
            while drained < LINGER_BYTES:
                chunk = await request.content.readany()
                if not chunk:
                    break
                drained += len(chunk)
    request.protocol.force_close()
    return response


@web.middleware
async def refusal_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Outermost middleware: any response sent before the body was read to its end closes the
    connection through :func:`close_after` (bounded linger) instead of aiohttp's 10 s drain; a
    :class:`BodyCut` becomes a quiet counted close (see the module docstring)."""
    try:
        response = await handler(request)
    except BodyCut:
        guard = request.app.get(GUARD)
        if isinstance(guard, ConnectionGuard):
            guard.body_cut()
        request.protocol.force_close()
        # nobody is left to read it: aiohttp's send fails quietly on the closed transport
        return web.Response(status=400)
    except web.HTTPException as exc:
        if not _body_finished(request):
            await close_after(request, exc)
        raise  # aiohttp sends a raised HTTPException itself; an already sent one is left as is
    if not _body_finished(request):
        return await close_after(request, response)
    return response


# -- pending connections -------------------------------------------------------------------------------

GUARD = web.AppKey("connection_guard", object)


@dataclass
class _Pending:
    address: str
    timer: asyncio.TimerHandle | None = field(default=None)


class ConnectionGuard:
    """Caps on pending (not yet authenticated) connections; see the module docstring.

    ``max_total`` is clamped to half the process's descriptor limit (``RLIMIT_NOFILE`` soft value)
    so that pending connections alone can never exhaust descriptors. ``timeout`` is in seconds.
    """

    def __init__(self, max_total: int, per_address: int, timeout: float, per_owner: int = 8) -> None:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        limit = soft // 2 if soft not in (resource.RLIM_INFINITY, -1) else max_total
        self.max_total = max(1, min(max_total, limit))
        self.per_address = per_address
        self.timeout = timeout
        self.per_owner = per_owner
        self._pending: OrderedDict[Any, _Pending] = OrderedDict()
        self._per_address: dict[str, int] = {}
        # authenticated connections per owner (a device), least recently used first
        self._owned: dict[str, OrderedDict[Any, None]] = {}
        self._owner_of: dict[Any, str] = {}
        self.closed_by_cap = 0
        self.closed_by_timeout = 0
        self.closed_by_owner_cap = 0
        self.cut_bodies = 0
        self._log = RateLimitedLog(log)

    def body_cut(self) -> None:
        """Count a request whose connection closed during its body (one rate-limited log line)."""
        self.cut_bodies += 1
        self._log.log(logging.INFO, "a connection closed before its request body was read")

    def pending_count(self, address: str | None = None) -> int:
        """How many connections are pending (from ``address``, or in total)."""
        if address is None:
            return len(self._pending)
        return self._per_address.get(address, 0)

    def opened(self, protocol: Any, transport: Any) -> None:
        """A new connection: track it as pending and close the oldest pending ones beyond the caps."""
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        entry = _Pending(address)
        entry.timer = asyncio.get_running_loop().call_later(self.timeout, self._expire, protocol)
        self._pending[protocol] = entry
        self._per_address[address] = self._per_address.get(address, 0) + 1
        if self._per_address[address] > self.per_address:
            oldest = next(p for p, e in self._pending.items() if e.address == address)
            self._evict(oldest, "per-address cap")
        while len(self._pending) > self.max_total:
            self._evict(next(iter(self._pending)), "overall cap")

    def proven(self, protocol: Any, owner: str | None = None) -> None:
        """The connection carried an authenticated request: never capped or timed out as pending again.
        With an ``owner`` (``"device:<id>"``) it counts toward that owner's cap, as its most recently
        used connection; beyond ``per_owner`` the owner's least recently used connection is closed."""
        self._forget(protocol)
        if owner is None:
            return
        self._disown(protocol)
        conns = self._owned.setdefault(owner, OrderedDict())
        conns[protocol] = None
        conns.move_to_end(protocol)  # most recently used last
        self._owner_of[protocol] = owner
        while len(conns) > self.per_owner:
            oldest = next(iter(conns))
            self._disown(oldest)
            self.closed_by_owner_cap += 1
            self._log.log(logging.WARNING, "closing a device's least recently used connection (per-device cap)")
            # a connection carrying a request closes after its answer is sent (close()), an idle
            # keep-alive one at once (force_close()): a device's own concurrent requests (a fence among
            # them) are never cut off mid-answer, while its idle connections cannot pile up.
            # RequestHandler._request_in_progress is private (tests/server/web/test_aiohttp_internals.py)
            if getattr(oldest, "_request_in_progress", False):
                oldest.close()
            else:
                oldest.force_close()

    def owned_count(self, owner: str) -> int:
        """How many open authenticated connections ``owner`` holds."""
        return len(self._owned.get(owner, ()))

    def closed(self, protocol: Any) -> None:
        """The connection is gone."""
        self._forget(protocol)
        self._disown(protocol)

    def _disown(self, protocol: Any) -> None:
        owner = self._owner_of.pop(protocol, None)
        if owner is None:
            return
        conns = self._owned[owner]
        conns.pop(protocol, None)
        if not conns:
            del self._owned[owner]

    def _forget(self, protocol: Any) -> _Pending | None:
        entry = self._pending.pop(protocol, None)
        if entry is None:
            return None
        if entry.timer is not None:
            entry.timer.cancel()
        left = self._per_address[entry.address] - 1
        if left:
            self._per_address[entry.address] = left
        else:
            del self._per_address[entry.address]
        return entry

    def _evict(self, protocol: Any, why: str) -> None:
        self._forget(protocol)
        self.closed_by_cap += 1
        self._log.log(logging.WARNING, "closing the oldest pending connection (%s)", why)
        protocol.force_close()

    def _expire(self, protocol: Any) -> None:
        if self._forget(protocol) is None:
            return
        self.closed_by_timeout += 1
        self._log.log(logging.INFO, "closing a pending connection (no authenticated request within %ss)", self.timeout)
        protocol.force_close()


def prove(request: web.BaseRequest, owner: str | None = None) -> None:
    """Mark the request's connection as authenticated (device token or admin session checked);
    ``owner`` (``"device:<id>"``) puts it under that owner's connection cap."""
    guard = request.app.get(GUARD) if isinstance(request, web.Request) else None
    if isinstance(guard, ConnectionGuard):
        guard.proven(request.protocol, owner)


def _guard_of(server: Any) -> ConnectionGuard | None:
    app = getattr(getattr(server, "request_handler", None), "__self__", None)
    if isinstance(app, web.Application):
        guard = app.get(GUARD)
        if isinstance(guard, ConnectionGuard):
            return guard
    return None


def install_connection_guard() -> None:
    """Route aiohttp's per-connection callbacks to the serving application's guard (idempotent)."""
    server_cls: Any = web_server.Server
    if getattr(server_cls.connection_made, _MARK, False):
        return
    made, lost = server_cls.connection_made, server_cls.connection_lost

    def connection_made(self: Any, handler: Any, transport: Any) -> None:
        made(self, handler, transport)
        guard = _guard_of(self)
        if guard is not None:
            # aiohttp's own lingering (10 s of unbounded reading, and a logged "Unhandled exception"
            # when the abandoned body fails to decode) is switched off: answers sent before the body
            # was read go through close_after, and the few that bypass the middlewares (an expect
            # handler's refusal) simply close.
            handler._lingering_time = 0.0
            guard.opened(handler, transport)

    def connection_lost(self: Any, handler: Any, exc: BaseException | None = None) -> None:
        guard = _guard_of(self)
        if guard is not None:
            guard.closed(handler)
        lost(self, handler, exc)

    setattr(connection_made, _MARK, True)
    server_cls.connection_made = connection_made
    server_cls.connection_lost = connection_lost


# -- log storms -----------------------------------------------------------------------------------------


class _Throttle:
    """Per-key "at most once per ``interval`` seconds" gate; memory: one entry per distinct key."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._last: dict[str, tuple[float, int]] = {}

    def allow(self, key: str) -> int | None:
        """None when ``key`` passed within the interval (the repeat is counted), else the number of
        repeats swallowed since it last passed."""
        now = time.monotonic()
        last, suppressed = self._last.get(key, (float("-inf"), 0))
        if now - last < self.interval:
            self._last[key] = (last, suppressed + 1)
            return None
        self._last[key] = (now, 0)
        return suppressed


class RateLimitedLog:
    """Log each distinct line at most once per ``interval`` seconds; the next line that gets through
    says how many repeats were swallowed meanwhile."""

    def __init__(self, logger: logging.Logger, interval: float = LOG_INTERVAL_S) -> None:
        self._logger = logger
        self._throttle = _Throttle(interval)

    def log(self, level: int, msg: str, *args: Any) -> None:
        """Format ``msg % args`` and log it at ``level`` unless the same text was logged recently."""
        text = msg % args if args else msg
        suppressed = self._throttle.allow(text)
        if suppressed is None:
            return
        if suppressed:
            text += f" (and {suppressed} more like this in the last {self._throttle.interval:.0f}s)"
        self._logger.log(level, "%s", text)


class RateLimitedExceptionHandler:
    """An asyncio loop exception handler that lets each distinct error through at most once per
    ``interval`` seconds (to ``previous``, or the loop's default handler, traceback included) and
    counts the repeats in between (accept errors repeat for as long as descriptors are exhausted).
    Install with ``loop.set_exception_handler``."""

    def __init__(
        self,
        previous: Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object] | None = None,
        logger: logging.Logger = log,
        interval: float = LOG_INTERVAL_S,
    ) -> None:
        self._previous = previous
        self._logger = logger
        self._throttle = _Throttle(interval)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        suppressed = self._throttle.allow(f"{context.get('message')}|{exc.__class__.__name__}|{exc}")
        if suppressed is None:
            return
        if isinstance(exc, OSError) and str(context.get("message", "")).startswith("socket.accept()"):
            # Out of descriptors (or kernel memory): asyncio pauses accepting for a second and retries.
            # One line, no traceback — the cause is the limit, not the code (docs/operations.md).
            self._logger.error(
                "accepting connections failed: %s (descriptor limit %s)%s",
                exc.strerror,
                resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                f"; {suppressed} more in the last {self._throttle.interval:.0f}s" if suppressed else "",
            )
            return
        if suppressed:
            self._logger.error(
                "%d more event-loop errors like the next one in the last %.0fs", suppressed, self._throttle.interval
            )
        if self._previous is not None:
            self._previous(loop, context)
        else:
            loop.default_exception_handler(context)
