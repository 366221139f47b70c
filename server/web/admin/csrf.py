"""CSRF synchronizer tokens for the admin pages (OWASP "HMAC-based token" variant).

The token is bound to the session: ``HMAC-SHA256(session_secret, "cmbuyer-admin-csrf-v1" ‖ 0x00 ‖
session id)`` as 64 hex characters. It is therefore stored "in the session" without a column: only
the holder of this exact session id can present it, another session's token never matches, and a
new session (login) means a new token. Before login the same construction runs over the random
pre-login cookie with a separate label, so the login form is protected too. Comparisons use
:func:`hmac.compare_digest`.
"""

from __future__ import annotations

import hashlib
import hmac

from cmbuyer.server.config import Settings

_SESSION_LABEL = b"cmbuyer-admin-csrf-v1\x00"
_LOGIN_LABEL = b"cmbuyer-login-csrf-v1\x00"


def _key(settings: Settings) -> bytes:
    secret = settings.session_secret
    if secret is None:
        raise RuntimeError("CMBUYER_SESSION_SECRET is not set")
    return secret.reveal()


def _mac(settings: Settings, label: bytes, value: str) -> str:
    return hmac.new(_key(settings), label + value.encode("ascii", "replace"), hashlib.sha256).hexdigest()


def session_token(settings: Settings, session_id: str) -> str:
    """The CSRF token of a logged-in session (64 lowercase hex)."""
    return _mac(settings, _SESSION_LABEL, session_id)


def login_token(settings: Settings, prelogin_id: str) -> str:
    """The CSRF token of the login form for one pre-login cookie value."""
    return _mac(settings, _LOGIN_LABEL, prelogin_id)


def _same(expected: str, supplied: str) -> bool:
    return hmac.compare_digest(expected.encode("ascii"), supplied.encode("utf-8", "replace"))


def check_session_token(settings: Settings, session_id: str, supplied: str) -> bool:
    """Constant-time check of a supplied token against the session's token."""
    return _same(session_token(settings, session_id), supplied)


def check_login_token(settings: Settings, prelogin_id: str, supplied: str) -> bool:
    """Constant-time check of the login form's token against the pre-login cookie."""
    return _same(login_token(settings, prelogin_id), supplied)
