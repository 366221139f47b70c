"""Claim tokens (docs/api.md "Start-up"): versioned, domain-separated HMAC; random nonces; only nonce + SHA-256 of
the token in SQLite; the same token after a restart; a wrong or missing secret refuses start-up; the
comparison is constant-time and always runs."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from cmbuyer.server.app import create_app
from cmbuyer.server.clock import ManualClock
from cmbuyer.server.config import Secret, Settings
from cmbuyer.server.domain import claim_token
from cmbuyer.server.domain import claims as claim_check
from cmbuyer.server.domain.errors import StartupRefused
from cmbuyer.server.services.claim_secret import SecretMismatch, verify_secret
from cmbuyer.server.tx.common import new_id
from tests.server.claims.conftest import claim, claim_ok, post, renew_path
from tests.server.conftest import DeviceCreds, Maker

FIELDS = {
    "device_id": "d" * 36,
    "task_id": "t" * 36,
    "authorization_id": "a" * 36,
    "attempt_id": "x" * 36,
    "generation": 1,
    "nonce": b"\x01" * 32,
}


def test_message_is_versioned_domain_separated_and_length_prefixed() -> None:
    msg = claim_token.message(**FIELDS)  # type: ignore[arg-type]
    assert msg.startswith(len(claim_token.DOMAIN).to_bytes(4, "big") + b"cmbuyer/claim-token/v1")
    key = secrets.token_bytes(32)
    token = claim_token.derive(key, **FIELDS)
    assert len(token) == 64 and token == token.lower() and int(token, 16) >= 0
    # the same key used without the domain tag / framing gives another MAC
    naive = b"".join(str(v).encode() if not isinstance(v, bytes) else v for v in FIELDS.values())
    assert hmac.new(key, naive, hashlib.sha256).hexdigest() != token
    # moving a boundary between two fields changes the message (no concatenation ambiguity)
    shifted = dict(FIELDS, device_id="d" * 35, task_id="d" + "t" * 36)
    assert claim_token.message(**shifted) != msg  # type: ignore[arg-type]
    # every bound field matters, and so does the key
    for name, other in (
        ("device_id", "e" * 36),
        ("task_id", "u" * 36),
        ("authorization_id", "b" * 36),
        ("attempt_id", "y" * 36),
        ("generation", 2),
        ("nonce", b"\x02" * 32),
    ):
        assert claim_token.derive(key, **dict(FIELDS, **{name: other})) != token
    assert claim_token.derive(secrets.token_bytes(32), **FIELDS) != token
    with pytest.raises(ValueError):
        claim_token.message(**dict(FIELDS, nonce=b"\x01" * 31))  # type: ignore[arg-type]


@pytest.mark.serial  # Hypothesis' default 200 ms deadline per example
@given(
    st.text(min_size=0, max_size=8, alphabet="ab-"),
    st.text(min_size=0, max_size=8, alphabet="ab-"),
    st.text(min_size=0, max_size=8, alphabet="ab-"),
    st.text(min_size=0, max_size=8, alphabet="ab-"),
)
def test_framing_is_injective(d1: str, t1: str, d2: str, t2: str) -> None:
    m1 = claim_token.message(**dict(FIELDS, device_id=d1, task_id=t1))  # type: ignore[arg-type]
    m2 = claim_token.message(**dict(FIELDS, device_id=d2, task_id=t2))  # type: ignore[arg-type]
    assert (m1 == m2) == ((d1, t1) == (d2, t2))


async def test_nonces_random_tokens_distinct_and_no_plaintext_in_the_database(
    server_client: Any, ready_device: Maker, make_task: Maker, sync_conn: sqlite3.Connection, settings: Settings
) -> None:
    for i in range(12):
        make_task(start=True, goods_id=f"7{i}")
    tokens = []
    for i in range(12):
        dev = ready_device(f"p{i}")
        session = new_id()
        got = await claim_ok(server_client, dev, session)
        status, _, _ = await post(server_client, renew_path(got.task_id), dev, got.renew_body(session))
        assert status == 200
        tokens.append(got.token)
    rows = sync_conn.execute("SELECT nonce, token_hash FROM attempts").fetchall()
    nonces = [bytes(r[0]) for r in rows]
    assert len(set(nonces)) == 12 and all(len(n) == 32 for n in nonces)
    assert len(set(tokens)) == 12
    assert {bytes(r[1]) for r in rows} == {hashlib.sha256(bytes.fromhex(t)).digest() for t in tokens}
    await server_client.close()
    blobs = b"".join(p.read_bytes() for p in Path(settings.db_path).parent.glob(Path(settings.db_path).name + "*"))
    for token in tokens:
        assert token.encode() not in blobs and bytes.fromhex(token) not in blobs
        assert token.upper().encode() not in blobs


async def test_wrong_or_missing_secret_refuses_start_up_and_the_right_one_rebuilds_the_token(
    aiohttp_client: Any,
    server_client: Any,
    dev: DeviceCreds,
    settings: Settings,
    clock: ManualClock,
) -> None:
    session, key = new_id(), new_id()
    first = await claim_ok(server_client, dev, session, key)
    await server_client.close()
    wrong = replace(settings, claim_token_secret=Secret(secrets.token_bytes(32)))
    for bad in (wrong, replace(settings, claim_token_secret=None)):
        runner = web.AppRunner(create_app(bad, clock))
        with pytest.raises(StartupRefused, match="CMBUYER_CLAIM_TOKEN_SECRET"):
            await runner.setup()
        await runner.cleanup()
    again = await aiohttp_client(create_app(settings, clock))
    assert await claim(again, dev, session, key) == (200, first.raw)


def test_secret_check_covers_open_claims_beyond_the_newest(sync_conn: sqlite3.Connection) -> None:
    assert verify_secret(sync_conn, secrets.token_bytes(32)) == 0  # no claims yet: any secret starts


async def test_secret_check_refuses_a_mismatching_open_claim(
    server_client: Any, ready_device: Maker, make_task: Maker, sync_conn: sqlite3.Connection, policy: Any
) -> None:
    make_task(start=True)
    await claim_ok(server_client, ready_device(), new_id())
    assert verify_secret(sync_conn, policy.secret) == 1
    with pytest.raises(SecretMismatch):
        verify_secret(sync_conn, secrets.token_bytes(32))


async def test_token_comparison_is_constant_time_and_always_runs(
    server_client: Any, ready_device: Maker, make_task: Maker, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_task(start=True)
    a, b = ready_device("a"), ready_device("b")
    session = new_id()
    got = await claim_ok(server_client, a, session)
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(x: bytes, y: bytes) -> bool:
        calls.append((x, y))
        return real(x, y)

    monkeypatch.setattr(claim_token.hmac, "compare_digest", spy)
    # wrong device: the token comparison still runs (timing does not reveal which field was wrong)
    status, raw, _ = await post(server_client, renew_path(got.task_id), b, got.renew_body(new_id()))
    assert (status, json.loads(raw)) == (409, {"error": "claim_not_current"})
    assert len(calls) == 1
    assert claim_check.claim_token is claim_token
