"""Start-up check of the claim-token secret (docs/api.md "Start-up"): the configured
``CMBUYER_CLAIM_TOKEN_SECRET`` must rebuild the stored token hash of every OPEN attempt and of the
newest attempts. Otherwise the server refuses to start (fail closed) instead of issuing tokens that
would not match, or substitute tokens for existing claims."""

from __future__ import annotations

import sqlite3

from cmbuyer.server.domain import claim_token
from cmbuyer.server.domain.errors import CmbuyerError
from cmbuyer.server.store import attempts as attempt_store


class SecretMismatch(CmbuyerError):
    """The secret does not reproduce an existing claim (or is missing); the message is one line."""


def verify_secret(conn: sqlite3.Connection, secret: bytes) -> int:
    """Return how many claims were checked; raise :class:`SecretMismatch` on the first mismatch."""
    checked = 0
    for attempt in attempt_store.for_secret_check(conn):
        if claim_token.rebuilt(secret, attempt) is None:
            raise SecretMismatch("CMBUYER_CLAIM_TOKEN_SECRET does not reproduce the tokens of existing claims")
        checked += 1
    return checked
