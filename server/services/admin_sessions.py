"""Admin login sessions and failed-login throttling (docs/admin.md "Identity and sessions").

* A session id is 32 random bytes (256 bits) sent as URL-safe base64 in the cookie; the database
  keeps only SHA-256 of those bytes.
* Expiry: ``now >= expires_at`` (absolute, ``created_at + session_absolute_ttl``) or
  ``now >= last_seen_at + session_idle_ttl`` ends a session; the boundary itself is expired.
* Login always creates a brand-new session id (no fixation); a session id presented at login is
  revoked; logout revokes server-side.
* Throttling (rule: domain/login_throttle.py): :func:`admit_guess` decides, in one write
  transaction with the stored records of the username key and the client-address key, whether a
  password may be checked, and counts the guess *before* it is checked — so guesses in flight count
  and a concurrent burst gets only a handful of passwords checked. Every back-off that starts or
  grows is audited (``admin.login_locked``).
* The username key is the username *at one client address*: a guesser who keeps a username
  backing off slows only its own address, never the person who types the right password elsewhere.
  The address key still bounds what one address may guess across usernames. ``admin unlock`` and
  ``admin passwd`` forget a username's records at every address (services/admins.py).

Password checking (argon2, CPU-bound) is done by the caller outside the transaction, after
:func:`admit_guess` said yes; the jobs here are the transactional halves.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timedelta

from cmbuyer.server.clock import from_wire, to_wire
from cmbuyer.server.config import Settings
from cmbuyer.server.domain import login_throttle
from cmbuyer.server.store import admins as admin_store
from cmbuyer.server.store import sessions as session_store
from cmbuyer.server.tx import audit as audit_tx
from cmbuyer.server.tx.common import Actor

SESSION_BYTES = 32
# last_seen_at is written at most once per this many seconds per session: a page view should not
# cost an fsync every time, and idle expiry only needs minute precision.
TOUCH_EVERY_S = 60
_TOKEN_RE = re.compile(r"[A-Za-z0-9_-]{43}", re.ASCII)
LOGIN = Actor("system", "login")  # the actor of the throttle's and failed logins' audit rows


@dataclass(frozen=True)
class AdminSession:
    """A valid session: who, and the raw cookie token (needed to derive the CSRF token)."""

    token: str
    id_hash: bytes
    admin_id: str
    username: str
    needs_touch: bool

    @property
    def actor(self) -> Actor:
        """The admin as the actor of the audit rows of this session's actions."""
        return Actor("admin", self.username)


def new_token() -> str:
    """A fresh session id: 32 bytes from ``secrets`` as unpadded URL-safe base64 (43 characters)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(SESSION_BYTES)).rstrip(b"=").decode("ascii")


def token_hash(token: str) -> bytes | None:
    """SHA-256 of the token's raw bytes, or None when ``token`` is not a well-formed session id."""
    if not isinstance(token, str) or _TOKEN_RE.fullmatch(token) is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=")
    except (binascii.Error, ValueError):
        return None
    if len(raw) != SESSION_BYTES:
        return None
    return hashlib.sha256(raw).digest()


def throttle_keys(username: str, client: str) -> tuple[str, str]:
    """``(user_key, address_key)`` for a login attempt from client address ``client``
    (:func:`login_throttle.keys`)."""
    return login_throttle.keys(username, client)


@dataclass(frozen=True)
class Admission:
    """Whether a login guess may be checked; ``retry_after_s`` (whole seconds) when it may not."""

    admitted: bool
    retry_after_s: int = 0


def _load(conn: sqlite3.Connection, key: str) -> login_throttle.KeyState | None:
    row = session_store.throttle_get(conn, key)
    if row is None:
        return None
    return login_throttle.KeyState(
        row.failures, from_wire(row.window_start), from_wire(row.locked_until) if row.locked_until else None
    )


def _store(conn: sqlite3.Connection, key: str, state: login_throttle.KeyState) -> None:
    until = to_wire(state.blocked_until) if state.blocked_until is not None else None
    session_store.throttle_put(conn, session_store.ThrottleRow(key, state.guesses, to_wire(state.last_at), until))


def admit_guess(conn: sqlite3.Connection, keys: tuple[str, str], username: str, now: datetime) -> Admission:
    """Decide whether one login guess may be checked, and count it if so (a write job).

    Both keys must admit (:func:`login_throttle.admit` with :data:`~login_throttle.USER_LIMIT` and
    :data:`~login_throttle.ADDRESS_LIMIT`); a refused guess changes nothing. An admitted guess is
    stored on both keys at once, so the decision and the record are one transaction. A back-off that
    this guess starts or lengthens writes an ``admin.login_locked`` audit row per key (never the
    password). Raises nothing business-level.
    """
    limits = (login_throttle.USER_LIMIT, login_throttle.ADDRESS_LIMIT)
    decisions = [login_throttle.admit(_load(conn, key), now, limit) for key, limit in zip(keys, limits, strict=True)]
    refused = [d.retry_after_s for d in decisions if not d.admitted]
    if refused:
        return Admission(False, max(refused))
    at = to_wire(now)
    for key, decision, scope in zip(keys, decisions, ("user", "address"), strict=True):
        assert decision.state is not None
        _store(conn, key, decision.state)
        if decision.backoff_s is not None:
            subject_kind, subject_id = ("admin", username[:64] or "-") if scope == "user" else ("client", keys[1][3:])
            audit_tx.record(
                conn,
                LOGIN,
                action="admin.login_locked",
                subject_kind=subject_kind,
                subject_id=subject_id,
                at=at,
                detail={
                    "scope": scope,
                    "client": keys[1][3:],
                    "guesses": decision.state.guesses,
                    "backoff_s": decision.backoff_s,
                    "locked_until": to_wire(decision.state.blocked_until) if decision.state.blocked_until else None,
                },
            )
    return Admission(True)


def record_failure(conn: sqlite3.Connection, username: str, now: datetime) -> None:
    """Audit one failed login (``admin.login_failed``, no password ever). The guess itself was
    already counted by :func:`admit_guess`."""
    audit_tx.record(
        conn, LOGIN, action="admin.login_failed", subject_kind="admin", subject_id=username[:64] or "-", at=to_wire(now)
    )


def login(
    conn: sqlite3.Connection,
    admin_id: str,
    keys: tuple[str, str],
    previous_hash: bytes | None,
    now: datetime,
    settings: Settings,
) -> str:
    """Create a new session for ``admin_id`` (password already verified) and return its token.

    Revokes ``previous_hash`` (any session id the browser presented at login), clears the user
    throttle key, takes this (right) guess back off the address key, and writes ``admin.login``.
    Raises nothing business-level: the caller was admitted by :func:`admit_guess` and checked the
    password.
    """
    at = to_wire(now)
    if previous_hash is not None:
        session_store.revoke(conn, previous_hash, at)
    token = new_token()
    digest = token_hash(token)
    assert digest is not None
    expires = to_wire(now + timedelta(seconds=settings.session_absolute_ttl))
    session_store.insert(conn, digest, admin_id, created_at=at, expires_at=expires)
    session_store.throttle_clear(conn, keys[0])
    address = _load(conn, keys[1])
    if address is not None:
        _store(conn, keys[1], login_throttle.undo_guess(address))
    admin = admin_store.by_id(conn, admin_id)
    actor = Actor("admin", admin.username if admin else admin_id)
    audit_tx.record(
        conn,
        actor,
        action="admin.login",
        subject_kind="admin",
        subject_id=admin_id,
        at=at,
        detail={"address": keys[1].removeprefix("ip:")},  # the client address the throttle counted
    )
    return token


def resolve(conn: sqlite3.Connection, token: str, now: datetime, settings: Settings) -> AdminSession | None:
    """The live session for cookie value ``token`` or None (unknown, malformed, revoked, idle or
    absolute expiry reached, admin disabled). Read-only."""
    digest = token_hash(token)
    if digest is None:
        return None
    row = session_store.get(conn, digest)
    if row is None or row.revoked_at is not None or row.admin_disabled:
        return None
    at = to_wire(now)
    idle_end = from_wire(row.last_seen_at) + timedelta(seconds=settings.session_idle_ttl)
    if at >= row.expires_at or now >= idle_end:
        return None
    needs_touch = now - from_wire(row.last_seen_at) >= timedelta(seconds=TOUCH_EVERY_S)
    return AdminSession(token, digest, row.admin_id, row.username, needs_touch)


def touch(conn: sqlite3.Connection, id_hash: bytes, now: datetime) -> None:
    """Record activity (moves the idle deadline)."""
    session_store.touch(conn, id_hash, to_wire(now))


def logout(conn: sqlite3.Connection, session: AdminSession, now: datetime) -> None:
    """Revoke the session server-side and write ``admin.logout``."""
    at = to_wire(now)
    if session_store.revoke(conn, session.id_hash, at):
        audit_tx.record(
            conn, session.actor, action="admin.logout", subject_kind="admin", subject_id=session.admin_id, at=at
        )


def sweep(conn: sqlite3.Connection, now: datetime) -> int:
    """Periodic housekeeping: delete sessions that ended more than a day ago, and throttle records
    the rule has forgotten anyway (no guess for :data:`~login_throttle.FORGET_S`, no back-off
    running — guesses at random usernames must not grow the table for ever). Returns how many
    sessions were deleted."""
    at = to_wire(now)
    session_store.throttle_delete_stale(conn, to_wire(now - timedelta(seconds=login_throttle.FORGET_S)), at)
    return session_store.delete_dead(conn, to_wire(now - timedelta(days=1)))
