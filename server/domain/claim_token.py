"""Claim tokens (docs/api.md "Start-up", "POST /api/v1/tasks/claim-next"): proof that a request comes from the holder of
one attempt's claim — never a permission to submit.

``token = HMAC-SHA256(claim_token_secret, message)`` as 64 lowercase hex, where ``message`` is a
versioned, domain-separated, length-prefixed encoding of device / task / authorization / attempt /
generation / nonce. The database keeps only the 32-byte random nonce and SHA-256(token bytes), so the
server can rebuild the same token after a restart (replays) while a DB leak reveals no token.
Pure functions: the secret comes in as an argument.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

from cmbuyer.server.domain.rows import StoredClaim

DOMAIN = b"cmbuyer/claim-token/v1"
NONCE_BYTES = 32


def _field(value: bytes) -> bytes:
    return struct.pack(">I", len(value)) + value


def message(
    *, device_id: str, task_id: str, authorization_id: str, attempt_id: str, generation: int, nonce: bytes
) -> bytes:
    """The exact bytes that are MACed. Length prefixes make field boundaries unambiguous, the domain
    tag keeps these MACs from ever colliding with another use of the same key."""
    if len(nonce) != NONCE_BYTES:
        raise ValueError("nonce must be 32 bytes")
    return b"".join(
        [
            _field(DOMAIN),
            _field(device_id.encode("ascii")),
            _field(task_id.encode("ascii")),
            _field(authorization_id.encode("ascii")),
            _field(attempt_id.encode("ascii")),
            struct.pack(">Q", generation),
            _field(nonce),
        ]
    )


def derive(secret: bytes, **fields: object) -> str:
    """64-lowercase-hex token for the claim described by ``fields`` (see :func:`message`)."""
    return hmac.new(secret, message(**fields), hashlib.sha256).hexdigest()  # type: ignore[arg-type]


def rebuilt(secret: bytes, claim: StoredClaim) -> str | None:
    """The token of a stored ``claim`` derived again with ``secret``, or None when it does not hash to the
    stored ``token_hash`` (the secret is not the one that issued it: callers fail closed, never a
    substitute token — docs/api.md "Start-up")."""
    token = derive(
        secret,
        device_id=claim.device_id,
        task_id=claim.task_id,
        authorization_id=claim.authorization_id,
        attempt_id=claim.id,
        generation=claim.claim_generation,
        nonce=claim.nonce,
    )
    return token if matches(claim.token_hash, token) else None


def token_hash(token_hex: str) -> bytes:
    """SHA-256 of the token's 32 raw bytes — the only form stored. ``token_hex`` must be valid hex."""
    return hashlib.sha256(bytes.fromhex(token_hex)).digest()


def matches(stored_hash: bytes, presented_token: str) -> bool:
    """Constant-time check that ``presented_token`` (64 lowercase hex, already validated) hashes to
    ``stored_hash``."""
    return hmac.compare_digest(stored_hash, token_hash(presented_token))
