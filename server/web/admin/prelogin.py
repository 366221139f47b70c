"""The pre-login cookie ``cmbuyer_login`` (the login form's CSRF binding).

Only values this server process issued are accepted, and each is spent by the login it served:

* A value is ``base64url(nonce16 ‖ issued_at u32 ‖ HMAC-SHA256(key, nonce ‖ issued_at)[:16])`` (48
  characters). ``key`` is 32 random bytes made when the process starts, so a value the client chose —
  or one issued before a restart — never verifies: ``GET /login`` replaces it with a fresh one and
  ``POST /login`` refuses it (403 ``csrf_failed``). No database write happens per form view.
* A value lives :data:`TTL_S` from issue; an older one is replaced/refused the same way.
* A successful login spends the value it used (kept in memory until its TTL ends) and sets a fresh
  one, like the session id: a pre-login value seen before a login is never usable after it.

Single-process rule: the server runs as one process (docs/architecture.md "Server layers"), so the key and the spent
set live
in that process.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections import OrderedDict
from datetime import datetime

from aiohttp import web

TTL_S = 60 * 60
# Spent values are remembered until they expire anyway; only successful logins add one, so this bound
# is never reached in practice. Past it the oldest is forgotten (it expires within TTL_S regardless).
SPENT_MAX = 4096
_NONCE = 16
_MAC = 16
_LENGTH = 48  # base64url characters of nonce + time + mac (36 bytes)


class PreloginBook:
    """Issues, verifies and spends pre-login cookie values (see the module docstring).

    ``now`` arguments are aware datetimes from the app clock; nothing here does I/O.
    """

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)
        self._spent: OrderedDict[bytes, int] = OrderedDict()

    def _mac(self, body: bytes) -> bytes:
        return hmac.new(self._key, b"cmbuyer-prelogin-v1\x00" + body, hashlib.sha256).digest()[:_MAC]

    def issue(self, now: datetime) -> str:
        """A fresh value (48 URL-safe base64 characters)."""
        body = secrets.token_bytes(_NONCE) + int(now.timestamp()).to_bytes(4, "big")
        return base64.urlsafe_b64encode(body + self._mac(body)).decode("ascii")

    def _decode(self, value: object, now: datetime) -> tuple[bytes, int] | None:
        """``(nonce, issued_at)`` of a well-formed, authentic, unexpired value, else None."""
        if not isinstance(value, str) or len(value) != _LENGTH or not value.isascii():
            return None
        try:
            raw = base64.urlsafe_b64decode(value)
        except (binascii.Error, ValueError):
            return None
        body, mac = raw[:-_MAC], raw[-_MAC:]
        # the decoder skips characters outside the alphabet: only the canonical spelling counts
        if (
            len(raw) != _NONCE + 4 + _MAC
            or base64.urlsafe_b64encode(raw).decode("ascii") != value
            or not hmac.compare_digest(mac, self._mac(body))
        ):
            return None
        issued = int.from_bytes(body[_NONCE:], "big")
        if not issued <= now.timestamp() < issued + TTL_S:
            return None
        return body[:_NONCE], issued

    def valid(self, value: object, now: datetime) -> bool:
        """True for a value this process issued, not expired and not spent by a login."""
        decoded = self._decode(value, now)
        return decoded is not None and decoded[0] not in self._spent

    def spend(self, value: str, now: datetime) -> None:
        """Mark ``value`` used by a successful login (it is refused from now on)."""
        decoded = self._decode(value, now)
        cutoff = now.timestamp() - TTL_S
        while self._spent and (next(iter(self._spent.values())) < cutoff or len(self._spent) >= SPENT_MAX):
            self._spent.popitem(last=False)
        if decoded is not None:
            self._spent[decoded[0]] = decoded[1]


PRELOGIN = web.AppKey("cmbuyer_prelogin", PreloginBook)
