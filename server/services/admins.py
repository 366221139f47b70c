"""Administrator accounts: argon2id password hashes (argon2-cffi), add / change password / list."""

from __future__ import annotations

import re
import sqlite3
from datetime import datetime

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from cmbuyer.server.clock import to_wire
from cmbuyer.server.domain import login_throttle
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import NotFound, ValidationFailed, refusal
from cmbuyer.server.store import admins as admin_store
from cmbuyer.server.store import sessions as session_store
from cmbuyer.server.tx import audit as audit_tx
from cmbuyer.server.tx.common import Actor, new_id

_HASHER = PasswordHasher()
_USERNAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}", re.ASCII)
MIN_PASSWORD = 10
# A fixed hash to verify against when the user does not exist, so timing does not reveal usernames.
_DUMMY_HASH = _HASHER.hash("cmbuyer-dummy-password")


def hash_password(password: str) -> str:
    """argon2id hash of ``password`` (≥ 10 characters, ≤ 1024). Raises ValidationFailed."""
    if not isinstance(password, str) or not MIN_PASSWORD <= len(password) <= 1024:
        raise ValidationFailed("password", "").because("password_length", min=str(MIN_PASSWORD))
    return _HASHER.hash(password)


def verify_password(stored_hash: str | None, password: str) -> bool:
    """Constant-work check of ``password`` against ``stored_hash`` (None → dummy hash, always False)."""
    try:
        ok = _HASHER.verify(stored_hash or _DUMMY_HASH, password)
    except (VerificationError, InvalidHashError):
        return False
    return bool(ok) and stored_hash is not None


def add_admin(conn: sqlite3.Connection, username: str, password: str, actor: Actor, now: datetime) -> str:
    """Create an admin; returns its id. Conflict ``username_taken`` when the name exists."""
    if not _USERNAME.fullmatch(username or ""):
        raise ValidationFailed("username", "").because("username")
    if admin_store.by_username(conn, username) is not None:
        raise refusal(Code.USERNAME_TAKEN).because("admin")
    admin_id = new_id()
    at = to_wire(now)
    admin_store.insert(conn, admin_id, username, hash_password(password), at)
    audit_tx.record(conn, actor, "admin.add", "admin", admin_id, at=at, detail={"username": username})
    return admin_id


def change_password(conn: sqlite3.Connection, username: str, password: str, actor: Actor, now: datetime) -> None:
    """Replace an admin's password hash and forget the username's login throttle records (an operator
    who resets a password wants that person able to log in now; audited as :func:`unlock_login` is).
    NotFound for an unknown username."""
    admin = admin_store.by_username(conn, username)
    if admin is None:
        raise NotFound().because("admin")
    at = to_wire(now)
    admin_store.set_password(conn, admin.id, hash_password(password), at)
    audit_tx.record(conn, actor, "admin.passwd", "admin", admin.id, at=at)
    _forget_throttle(conn, admin.username, actor, at)


def unlock_login(conn: sqlite3.Connection, username: str, actor: Actor, now: datetime) -> int:
    """``admin unlock``: forget the login throttle records of an existing admin's username at every
    client address, audited ``admin.login_unlocked`` with the count; returns the count. Address records
    are kept: they belong to an address, not a username, and end by themselves within
    :attr:`~login_throttle.Limit.cap_s`. NotFound for an unknown username."""
    admin = admin_store.by_username(conn, username)
    if admin is None:
        raise NotFound().because("admin")
    return _forget_throttle(conn, admin.username, actor, to_wire(now))


def _forget_throttle(conn: sqlite3.Connection, username: str, actor: Actor, at: str) -> int:
    cleared = session_store.throttle_clear_prefix(conn, login_throttle.user_prefix(username))
    detail = {"records": cleared}
    audit_tx.record(conn, actor, "admin.login_unlocked", "admin", username, at=at, detail=detail)
    return cleared
