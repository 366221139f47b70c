"""Shared helpers of the use-cases: who is acting, ids, canonical hashing of request payloads."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Actor:
    """Who performs a use-case: ``kind`` in admin|device|system|cli and a stable id (username, device id)."""

    kind: str
    id: str


SYSTEM = Actor("system", "server")


def new_id() -> str:
    """A fresh lowercase UUIDv4 string."""
    return str(uuid.uuid4())


# The exact settings of json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")), built
# once: json.dumps would construct a new encoder on every call (a measurable share of a claim job).
_CANONICAL = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def canonical_json(value: Any) -> str:
    """Deterministic JSON text (sorted keys, no spaces, UTF-8 kept): stored responses replay byte-identically."""
    return _CANONICAL.encode(value)


def payload_hash(value: Any) -> str:
    """SHA-256 hex of :func:`canonical_json` — the idempotency comparison form of a request."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
