"""Per-attempt budgets under attack (server/domain/limits.py, services/events.py,
services/evidence_upload.py) over the real HTTP API with small budgets: concurrent batches and replays
at the event cap, one upload key racing for the last evidence slot, an exhausted budget after the claim
closed (regressions that held; the existing tests cover neither same-key races nor concurrent batches),
and one found by review and fixed: the evidence pre-check could refuse a pure replay (last test)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from typing import Any

from cmbuyer.server.clock import ManualClock
from cmbuyer.server.config import Settings
from cmbuyer.server.db import connect_sync, run_in_read_transaction, run_in_transaction
from cmbuyer.server.domain.errors import Conflict
from cmbuyer.server.domain.limits import AttemptBudget
from cmbuyer.server.evidence import files
from cmbuyer.server.services import evidence_upload
from tests.server.evidence.pngs import padded_to
from tests.server.submissions.helpers import (
    ATTEMPT_LIMIT as LIMIT,
)
from tests.server.submissions.helpers import (
    Claim,
    direct_upload,
    event,
    events_body,
    events_path,
    evidence_fields,
    fail_body,
    fail_path,
    multipart,
    post_json,
    small_budget_settings,  # noqa: F401 (the small-budget ``settings`` fixture)
    upload,
    upload_png,
)


async def test_concurrent_event_batches_and_replays_at_the_cap(
    server_client: Any, settings: Settings, claimed: Claim, sync_conn: sqlite3.Connection
) -> None:
    """15 events held; ten one-event batches race with three replays of the first batch. Exactly five
    fit (seq 16–20, no gap, no duplicate), five get the fixed 409 and write nothing, every replay is
    the original answer byte for byte; the refused keys stay refused on retry."""
    path = events_path(claimed.task_id)
    first = events_body(claimed, [event(summary=f"s {i}") for i in range(15)])
    status, raw_first = await post_json(server_client, path, claimed.device, first)
    assert status == 200, raw_first
    singles = [events_body(claimed, [event(summary=f"x {i}")]) for i in range(10)]
    results = await asyncio.gather(
        *(post_json(server_client, path, claimed.device, b) for b in singles),
        *(post_json(server_client, path, claimed.device, first) for _ in range(3)),
    )
    assert results[10:] == [(200, raw_first)] * 3
    ok = [json.loads(r) for s, r in results[:10] if s == 200]
    refused = [body for (s, r), body in zip(results[:10], singles, strict=True) if s != 200]
    assert sorted(o["first_seq"] for o in ok) == [16, 17, 18, 19, 20]
    assert all(s == 200 or (s, json.loads(r)) == (409, LIMIT) for s, r in results[:10])
    seqs = [
        r[0]
        for r in sync_conn.execute("SELECT seq FROM events WHERE attempt_id = ? ORDER BY seq", (claimed.attempt_id,))
    ]
    assert seqs == list(range(1, 21))
    assert sync_conn.execute("SELECT count(*) FROM audit_log WHERE action = 'events.append'").fetchone()[0] == 6
    for body in refused:  # a refused batch was never remembered: its retry is judged again, and refused again
        status, raw = await post_json(server_client, path, claimed.device, body)
        assert (status, json.loads(raw)) == (409, LIMIT)


async def test_same_upload_key_racing_for_the_last_slot(
    server_client: Any, settings: Settings, claimed: Claim, sync_conn: sqlite3.Connection
) -> None:
    """Two files held, one slot left. Five copies of one upload (same key, same bytes) and three with the
    same key but other bytes arrive at once: exactly one row and one audit row; the rest are 200 replays
    of the winner or a 409 — never a second row, a second audit row or a 500. A fresh key afterwards
    gets the budget 409 and every row's file is in place."""
    for size in (300, 301):
        assert (await upload_png(server_client, claimed, padded_to(size)))[0] == 201
    key = "3f1c2a4e-9d7b-4c1e-8a2f-6b5d4e3c2a10"
    same = padded_to(302)
    fields = evidence_fields(claimed, same, upload_key=key)
    bodies = [multipart(fields, same)] * 5
    for size in (303, 304, 305):
        other = padded_to(size)
        bodies.append(multipart(evidence_fields(claimed, other, upload_key=key), other))
    results = await asyncio.gather(*(upload(server_client, claimed.device, claimed.task_id, b, c) for b, c in bodies))
    winners = [r for r in results if r[0] == 201]
    assert len(winners) == 1, results
    win_body = json.loads(winners[0][1])
    for status, raw in results:
        assert status in (200, 201, 409), (status, raw)
        if status == 200:
            assert json.loads(raw) == win_body
        if status == 409:  # attempt_limit_reached comes from the pre-check race (test below)
            assert json.loads(raw) in ({"error": "idempotency_conflict"}, LIMIT)
    assert (
        sync_conn.execute(
            "SELECT count(*) FROM evidence_assets WHERE attempt_id = ?", (claimed.attempt_id,)
        ).fetchone()[0]
        == 3
    )
    assert sync_conn.execute("SELECT count(*) FROM audit_log WHERE action = 'evidence.upload'").fetchone()[0] == 3
    status, raw = await upload_png(server_client, claimed, padded_to(306))
    assert (status, json.loads(raw)) == (409, LIMIT)
    for (sha,) in sync_conn.execute("SELECT sha256 FROM evidence_assets"):
        assert files.exists(settings.evidence_dir, sha)


async def test_exhausted_budget_after_the_claim_closed(
    server_client: Any, settings: Settings, claimed: Claim, sync_conn: sqlite3.Connection
) -> None:
    """Budget used up, then the attempt fails: a new upload or batch is claim_not_current (the claim check
    comes first), a replay of an accepted upload is still its 200, and nothing is stored."""
    accepted = []
    for size in (300, 301, 302):
        body, ctype = multipart(evidence_fields(claimed, padded_to(size)), padded_to(size))
        status, raw = await upload(server_client, claimed.device, claimed.task_id, body, ctype)
        assert status == 201
        accepted.append((body, ctype, raw))
    status, raw = await post_json(server_client, fail_path(claimed.attempt_id), claimed.device, fail_body(claimed))
    assert status == 200, raw
    on_disk = sorted(settings.evidence_dir.rglob("*"))
    status, raw = await upload_png(server_client, claimed, padded_to(400))
    assert (status, json.loads(raw)) == (409, {"error": "claim_not_current"})
    status, raw = await post_json(
        server_client, events_path(claimed.task_id), claimed.device, events_body(claimed, [event()])
    )
    assert (status, json.loads(raw)) == (409, {"error": "claim_not_current"})
    body, ctype, raw_first = accepted[0]
    assert await upload(server_client, claimed.device, claimed.task_id, body, ctype) == (200, raw_first)
    assert sorted(settings.evidence_dir.rglob("*")) == on_disk


async def test_precheck_never_refuses_a_pure_replay_whose_original_commits_meanwhile(
    server_client: Any, settings: Settings, claimed: Claim, clock: ManualClock, sync_conn: sqlite3.Connection
) -> None:
    """Found: ``may_upload`` runs on the server's reader connections, which are autocommit — its three
    reads (key lookup, attempt, usage) each see a different snapshot. When the original of a retried
    upload (same key, same bytes) takes the attempt's last slot and commits between the key lookup and
    the usage count, the retry's pre-check answers ``409 attempt_limit_reached`` (or claim_not_current
    if the claim closed meanwhile) although the write job would answer the replay ``200`` — and the
    agent treats a 409 as final for an upload that was in fact stored. Seen over HTTP in about one run
    in fifteen of eight same-key uploads racing for the last slot; made deterministic here by committing
    the original from the reader's statement trace (the test's own connection, no project code patched)."""
    for size in (300, 301):
        assert (await upload_png(server_client, claimed, padded_to(size)))[0] == 201
    data = padded_to(302)
    up = direct_upload(claimed, data)
    budget = AttemptBudget(
        events=settings.events_per_attempt,
        evidence_files=settings.evidence_per_attempt,
        evidence_bytes=settings.evidence_bytes_per_attempt,
    )
    device = claimed.device.device_id
    files.store(settings.evidence_dir, up.sha256, data)

    def record(c: sqlite3.Connection) -> Any:
        return evidence_upload.record_upload(
            c, device_id=device, upload=up, now=clock.now(), budget=budget, evidence_dir=settings.evidence_dir
        )

    originals: list[Any] = []

    def original_commits_now(sql: str) -> None:
        if "evidence_assets" in sql and not originals:
            originals.append(run_in_transaction(sync_conn, record))

    reader = connect_sync(settings.db_path, read_only=True)  # configured like the server's readers
    reader.set_trace_callback(original_commits_now)
    try:
        # as the server runs it: one read snapshot (Database.read(..., snapshot=True))
        verdict = run_in_read_transaction(
            reader, lambda c: evidence_upload.may_upload(c, device_id=device, upload=up, budget=budget)
        )
    except Conflict as exc:
        verdict = exc.code
    finally:
        reader.close()
    assert [o.status for o in originals] == [201]
    assert run_in_transaction(sync_conn, record).status == 200  # the write job answers the retry as a replay
    assert verdict is True, f"the pre-check refused a pure replay of a stored upload with {verdict!r}"
