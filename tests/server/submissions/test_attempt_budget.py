"""Per-attempt budgets over real HTTP: one claim cannot store more than its configured number of events,
evidence files or evidence bytes (docs/api.md, ``attempt_limit_reached``). A refused request writes no
row and — for evidence — no file; replays of what was accepted are still answered."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.schemas import validate
from cmbuyer.server.config import Settings, load_settings
from cmbuyer.server.domain.errors import SettingsError
from cmbuyer.server.domain.limits import AttemptBudget
from tests.server.evidence.pngs import padded_to
from tests.server.submissions.helpers import (
    ATTEMPT_LIMIT as LIMIT,
)
from tests.server.submissions.helpers import (
    Claim,
    event,
    events_body,
    events_path,
    evidence_fields,
    fingerprint,
    multipart,
    post_json,
    small_budget_settings,  # noqa: F401 (the small-budget ``settings`` fixture)
    upload,
)


def _files(settings: Settings) -> list[Path]:
    return sorted(p for p in settings.evidence_dir.rglob("*.png"))


async def _upload(client: Any, claimed: Claim, data: bytes, **over: str) -> tuple[int, bytes, bytes, str]:
    body, ctype = multipart(evidence_fields(claimed, data, **over), data)
    status, raw = await upload(client, claimed.device, claimed.task_id, body, ctype)
    return status, raw, body, ctype


async def test_events_up_to_the_budget_then_409_and_nothing_written(
    server_client: Any, claimed: Claim, sync_conn: sqlite3.Connection
) -> None:
    first = events_body(claimed, [event(summary=f"step {i}") for i in range(15)])
    status, raw_first = await post_json(server_client, events_path(claimed.task_id), claimed.device, first)
    assert status == 200, raw_first

    before = fingerprint(sync_conn)
    over = events_body(claimed, [event() for _ in range(6)])  # 15 + 6 = 21 > 20: refused whole
    status, raw = await post_json(server_client, events_path(claimed.task_id), claimed.device, over)
    assert (status, json.loads(raw)) == (409, LIMIT)
    validate("device_error.response", json.loads(raw))  # the agent can read the code (shared schema)
    assert fingerprint(sync_conn) == before

    exact = events_body(claimed, [event() for _ in range(5)])  # exactly 20: accepted
    status, raw = await post_json(server_client, events_path(claimed.task_id), claimed.device, exact)
    assert status == 200 and json.loads(raw)["last_seq"] == 20

    one_more = events_body(claimed, [event()])
    status, raw = await post_json(server_client, events_path(claimed.task_id), claimed.device, one_more)
    assert (status, json.loads(raw)) == (409, LIMIT)
    # what was accepted before the budget ran out still replays byte for byte
    assert await post_json(server_client, events_path(claimed.task_id), claimed.device, first) == (200, raw_first)
    assert (
        sync_conn.execute("SELECT count(*) FROM events WHERE attempt_id = ?", (claimed.attempt_id,)).fetchone()[0] == 20
    )


async def test_evidence_file_budget_refuses_before_the_file_is_stored(
    server_client: Any, claimed: Claim, settings: Settings, sync_conn: sqlite3.Connection
) -> None:
    accepted = []
    for size in (300, 301, 302):
        status, raw, body, ctype = await _upload(server_client, claimed, padded_to(size))
        assert status == 201, raw
        accepted.append((raw, body, ctype))
    files, before = _files(settings), fingerprint(sync_conn)

    status, raw, _, _ = await _upload(server_client, claimed, padded_to(303))  # a 4th file
    assert (status, json.loads(raw)) == (409, LIMIT)
    assert _files(settings) == files and fingerprint(sync_conn) == before

    raw, body, ctype = accepted[0]
    assert await upload(server_client, claimed.device, claimed.task_id, body, ctype) == (200, raw)


async def test_evidence_byte_budget(
    server_client: Any, claimed: Claim, settings: Settings, sync_conn: sqlite3.Connection
) -> None:
    assert (await _upload(server_client, claimed, padded_to(2000)))[0] == 201
    assert (await _upload(server_client, claimed, padded_to(1900)))[0] == 201
    files, before = _files(settings), fingerprint(sync_conn)
    status, raw, _, _ = await _upload(server_client, claimed, padded_to(101))  # 3,900 + 101 > 4,000
    assert (status, json.loads(raw)) == (409, LIMIT)
    assert _files(settings) == files and fingerprint(sync_conn) == before
    assert (await _upload(server_client, claimed, padded_to(100)))[0] == 201  # 4,000 exactly still fits


async def test_concurrent_uploads_never_pass_the_budget(
    server_client: Any, claimed: Claim, sync_conn: sqlite3.Connection
) -> None:
    """Eight uploads race past the read-only pre-check; the check inside the write transaction lets exactly
    as many in as the budget allows."""
    results = await asyncio.gather(*(_upload(server_client, claimed, padded_to(400 + i)) for i in range(8)))
    statuses = sorted(r[0] for r in results)
    assert statuses == [201, 201, 201] + [409] * 5
    assert all(json.loads(r[1]) == LIMIT for r in results if r[0] == 409)
    assert (
        sync_conn.execute(
            "SELECT count(*) FROM evidence_assets WHERE attempt_id = ?", (claimed.attempt_id,)
        ).fetchone()[0]
        == 3
    )


def test_budget_rule_boundaries() -> None:
    budget = AttemptBudget(events=20, evidence_files=3, evidence_bytes=4000)
    assert budget.events_fit(0, 20) and budget.events_fit(19, 1) and not budget.events_fit(20, 1)
    assert budget.evidence_fits(2, 3000, 1000) and not budget.evidence_fits(2, 3000, 1001)
    assert not budget.evidence_fits(3, 0, 1)


@pytest.mark.parametrize(
    "env, name",
    [
        ({"CMBUYER_EVENTS_PER_ATTEMPT": "19"}, "CMBUYER_EVENTS_PER_ATTEMPT"),
        ({"CMBUYER_EVIDENCE_PER_ATTEMPT": "0"}, "CMBUYER_EVIDENCE_PER_ATTEMPT"),
        ({"CMBUYER_EVIDENCE_BYTES_PER_ATTEMPT": "x"}, "CMBUYER_EVIDENCE_BYTES_PER_ATTEMPT"),
        (
            {"CMBUYER_EVIDENCE_MAX_BYTES": "5000", "CMBUYER_EVIDENCE_BYTES_PER_ATTEMPT": "4999"},
            "CMBUYER_EVIDENCE_BYTES_PER_ATTEMPT",
        ),
    ],
)
def test_bad_budget_settings_stop_start_up(tmp_path: Path, env: dict[str, str], name: str) -> None:
    with pytest.raises(SettingsError, match=name):
        load_settings(tmp_path, env)


def test_default_budgets(tmp_path: Path) -> None:
    s = load_settings(tmp_path, {})
    assert (s.events_per_attempt, s.evidence_per_attempt, s.evidence_bytes_per_attempt) == (1000, 32, 128 << 20)
