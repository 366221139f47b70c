"""Device idempotency records (docs/api.md "Conventions"): same key + same canonical payload on the same endpoint
replays the
stored status and body byte for byte; anything else with that key is ``409 idempotency_conflict`` (the
lookup is :func:`cmbuyer.server.tx.device_tx.replay_scoped`; this module stores the outcomes).
A request that failed validation or a rule stores nothing (its job raised, so its savepoint rolled
back), so a corrected retry with the same key is processed normally."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from cmbuyer.server.domain import claim_token
from cmbuyer.server.store import device_requests
from cmbuyer.server.tx.common import payload_hash


def claim_request_form(body: dict[str, Any], **url_ids: str) -> dict[str, Any]:
    """The idempotency comparison form of a request that carries a claim token: the body plus the URL's
    ids (``attempt_id=…``, ``task_id=…``, ``submission_id=…``), with ``claim_token`` replaced by its SHA-256
    hex — so even the stored request hash is not derived from the plain token."""
    return {**body, **url_ids, "claim_token": claim_token.token_hash(body["claim_token"]).hex()}


@dataclass(frozen=True)
class Stored:
    """A response to send as is: HTTP ``status`` and the exact ``body`` text (None for 204)."""

    status: int
    body: str | None
    attempt_id: str | None = None


def remember(
    conn: sqlite3.Connection,
    device_id: str,
    key: str,
    endpoint: str,
    payload: Any,
    *,
    status: int,
    text: str | None,
    at: str,
    attempt_id: str | None = None,
) -> Stored:
    """Store the outcome (in the same transaction as the change) and return it as it will be sent.

    ``text`` is the body already encoded with ``canonical_json`` (None for 204): the caller encodes, so a
    hot path does not encode the same body twice (:meth:`cmbuyer.server.tx.device_tx.DeviceWrite.remember`
    encodes a dict body)."""
    device_requests.insert(
        conn,
        device_requests.DeviceRequest(device_id, key, endpoint, payload_hash(payload), status, attempt_id, text, at),
    )
    return Stored(status, text, attempt_id)
