"""Shared helpers of the use-cases: who is acting, ids, canonical hashing of request payloads."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import Any

from cmbuyer.schemas.canonical import canonical_json

__all__ = ["SYSTEM", "Actor", "canonical_json", "new_id", "payload_hash"]


@dataclass(frozen=True)
class Actor:
    """Who performs a use-case: ``kind`` in admin|device|system|cli and a stable id (username, device id)."""

    kind: str
    id: str


SYSTEM = Actor("system", "server")


def new_id() -> str:
    """A fresh lowercase UUIDv4 string."""
    return str(uuid.uuid4())


def payload_hash(value: Any) -> str:
    """SHA-256 hex of :func:`canonical_json` — the idempotency comparison form of a request."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
