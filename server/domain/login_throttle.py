"""The admin login throttle rule. Pure: no I/O, no clock of its own.

A *guess* is one password check. Each throttle key (one username, one client address) may have
:attr:`Limit.free` guesses admitted; the guess that reaches that number starts a back-off during which
the key admits nothing (not even the right password — it is not checked at all), and each further
admitted guess doubles the back-off up to :attr:`Limit.cap_s`. A key that admitted nothing for
:data:`FORGET_S` starts over.

A guess is counted when it is *admitted*, before its password is hashed, in the same transaction that
read the key's record: guesses still in flight therefore count, and a burst of concurrent logins gets at
most ``free`` passwords checked per key, the rest refused with 429. A correct password then undoes its
own count (see services/admin_sessions.py). Nothing here refuses for longer than ``cap_s``, so the
right password always works again after a short wait (unlike a fixed long lock).

The keys (:func:`keys`): the username key is the username *at one client address*, so a
guesser who keeps a username backing off slows only itself; the person with the right password at
another address is never refused by it. The address key bounds one address's guesses across all
usernames. IPv6 addresses count by their /64.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import datetime, timedelta

FORGET_S = 15 * 60


@dataclass(frozen=True)
class Limit:
    """One key kind's limit: ``free`` guesses, then back-off ``base_s · 2^(n - free)`` s (n = admitted
    guesses so far), at most ``cap_s`` s."""

    free: int
    base_s: int
    cap_s: int

    def backoff_s(self, guesses: int) -> int | None:
        """Seconds of back-off after the ``guesses``-th admitted guess, or None below ``free``."""
        if guesses < self.free:
            return None
        return min(self.cap_s, self.base_s << min(guesses - self.free, 32))


# Per username: a person who mistypes twice is never slowed; a guesser gets 3 tries, then one try
# after 2 s, 4 s, 8 s … at most one every 5 minutes.
USER_LIMIT = Limit(free=3, base_s=2, cap_s=300)
# Per client address: more room, since several admins (or a reverse proxy) may share one address.
ADDRESS_LIMIT = Limit(free=10, base_s=2, cap_s=300)


@dataclass(frozen=True)
class KeyState:
    """A key's stored record: ``guesses`` admitted since it was last forgotten, when the last one was
    admitted, and the end of the current back-off (None when not backing off)."""

    guesses: int
    last_at: datetime
    blocked_until: datetime | None


@dataclass(frozen=True)
class Decision:
    """The outcome of :func:`admit` for one key.

    ``admitted``: the guess may be checked. ``state``: the record to store when every key admitted
    (unchanged on refusal). ``retry_after_s``: whole seconds until this key admits again (refusals).
    ``backoff_s``: set when this guess started or lengthened a back-off (to be audited).
    """

    admitted: bool
    state: KeyState | None
    retry_after_s: int = 0
    backoff_s: int | None = None


def admit(state: KeyState | None, now: datetime, limit: Limit) -> Decision:
    """Decide whether one more guess may be checked against a key whose record is ``state``.

    Refuses while ``now < blocked_until`` (the record is not changed: refused guesses are not
    counted, so waiting always helps). Otherwise counts the guess and, once ``limit.free`` is reached,
    sets a back-off starting now.
    """
    if state is not None and state.blocked_until is not None and now < state.blocked_until:
        wait = state.blocked_until - now
        return Decision(False, state, retry_after_s=max(1, -(-int(wait.total_seconds() * 1000) // 1000)))
    if state is None or now >= state.last_at + timedelta(seconds=FORGET_S):
        guesses = 1
    else:
        guesses = state.guesses + 1
    backoff = limit.backoff_s(guesses)
    until = now + timedelta(seconds=backoff) if backoff is not None else None
    return Decision(True, KeyState(guesses, now, until), backoff_s=backoff)


def undo_guess(state: KeyState) -> KeyState:
    """The record after an admitted guess turned out to be the right password: that guess no longer
    counts (a back-off already running keeps running)."""
    return KeyState(max(0, state.guesses - 1), state.last_at, state.blocked_until)


def client_key(client: str) -> str:
    """The address part of the keys for client address ``client`` (text as the web layer gives it): an
    IPv4 address as is (also when IPv4-mapped), an IPv6 address as its /64 network (one host usually
    holds a whole /64, so single IPv6 addresses would give a guesser endless fresh keys), any other
    text capped at 64 characters, "unknown" when empty."""
    try:
        ip = ipaddress.ip_address(client)
    except ValueError:
        return (client or "unknown")[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def user_prefix(username: str) -> str:
    """The start of every username key of ``username`` (lowercased, capped at 128): length-prefixed, so
    that no username's prefix is the start of another's (``"a"`` and ``"a@b"``)."""
    name = username.lower()[:128]
    return f"user:{len(name)}:{name}@"


def keys(username: str, client: str) -> tuple[str, str]:
    """``(user_key, address_key)`` of a login guess at ``username`` from client address ``client``."""
    address = client_key(client)
    return user_prefix(username) + address, "ip:" + address
