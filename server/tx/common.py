"""Shared helpers of the use-cases: who is acting, ids, canonical hashing of request payloads, loading the
subject of a request by its id."""

from __future__ import annotations

import hashlib
import sqlite3
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from cmbuyer.schemas import is_uuid4
from cmbuyer.schemas.canonical import canonical_json
from cmbuyer.server.domain.errors import DomainError

__all__ = ["SYSTEM", "Actor", "canonical_json", "load", "new_id", "payload_hash"]

T = TypeVar("T")


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


def load(
    conn: sqlite3.Connection, get: Callable[[sqlite3.Connection, str], T | None], row_id: str, missing: DomainError
) -> T:
    """What ``get`` finds for ``row_id``; raises ``missing`` (a NotFound naming the subject) when there is
    nothing — a malformed id (not a UUIDv4) is not looked up and counts as unknown."""
    row = get(conn, row_id) if is_uuid4(row_id) else None
    if row is None:
        raise missing
    return row
