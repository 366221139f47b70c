"""Storage failure injected in the middle of fence / result / evidence / events / fail (docs/api.md
"The HTTP edge (every route)"): the answer is an empty 503, nothing is half-written (no row references an evidence file
whose
row failed), and a retry with the same idempotency key works once the storage is back."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.server.config import Settings
from cmbuyer.server.db import StorageError
from cmbuyer.server.web.keys import CLOCK, DB
from tests.server.store.conftest import StorageFault, counts
from tests.server.submissions import helpers

Fault = tuple[str, str, str]  # (table, op, mode) of StorageFault.on
FAULTS: list[Fault] = [
    ("device_requests", "INSERT", "ABORT"),
    ("device_requests", "INSERT", "ROLLBACK"),
    ("audit_log", "INSERT", "ABORT"),
    ("audit_log", "INSERT", "ROLLBACK"),
]


def faults(*extra: Fault) -> pytest.MarkDecorator:
    """Parametrize ``case`` with FAULTS and ``extra`` (test ids ``table-op-mode``)."""
    return pytest.mark.parametrize("case", [*FAULTS, *extra], ids="-".join)


async def refused_then_retried(
    fault: StorageFault,
    conn: sqlite3.Connection,
    case: Fault,
    send: Callable[[], Awaitable[tuple[int, bytes]]],
    tries: int = 1,
) -> tuple[int, bytes]:
    """With ``case`` injected, ``send()`` answers an empty 503 (each of ``tries`` times) and nothing is
    half-written; then the fault is lifted and the answer of one more ``send()`` is returned."""
    before = helpers.fingerprint(conn)
    await fault.on(*case)
    for _ in range(tries):
        assert await send() == (503, b"")
    assert helpers.fingerprint(conn) == before  # nothing half-written (no row refers to a file whose row failed)
    await fault.off()
    return await send()


async def _post_refused_then_replayed(
    client: Any,
    c: helpers.Claim,
    path: str,
    body: dict[str, Any],
    fault: StorageFault,
    conn: sqlite3.Connection,
    case: Fault,
) -> bytes:
    """POST ``body`` to ``path`` as ``c``'s device: refused with ``case`` injected (:func:`refused_then_retried`),
    then ``200``, and the same request again replays the same bytes; returns the ``200`` answer."""

    def send() -> Awaitable[tuple[int, bytes]]:
        return helpers.post_json(client, path, c.device, body)

    status, first = await refused_then_retried(fault, conn, case, send)
    assert status == 200, first
    assert await send() == (200, first)
    return first


async def _fence(client: Any, c: helpers.Claim, body: dict[str, Any]) -> tuple[int, bytes]:
    return await helpers.post_json(client, helpers.fence_path(c.attempt_id), c.device, body)


@faults(("order_submissions", "INSERT", "ABORT"), ("tasks", "UPDATE", "ROLLBACK"))
async def test_fence_storage_failure_then_retry_same_key(
    server_client: Any, claimed: helpers.Claim, fault: StorageFault, sync_conn: sqlite3.Connection, case: Fault
) -> None:
    body = helpers.fence_body(claimed)
    status, raw = await refused_then_retried(
        fault, sync_conn, case, lambda: _fence(server_client, claimed, body), tries=2
    )
    assert status == 200 and json.loads(raw)["click_permitted"] is True  # the first *committed* answer
    status, raw = await _fence(server_client, claimed, body)
    assert status == 200 and json.loads(raw)["click_permitted"] is False


async def test_fence_lost_with_its_batch_is_never_answered(
    server_client: Any, claimed: helpers.Claim, sync_conn: sqlite3.Connection
) -> None:
    """Group commit: the fence job succeeds in its savepoint, a later job of the same batch makes SQLite
    roll the whole transaction back → the fence caller gets StorageError, never a permit; the retry
    with the same key is then the one and only permit."""
    app = server_client.server.app
    db, clock = app[DB], app[CLOCK]
    await db.write(lambda c: c.execute("CREATE TEMP TABLE boom (x)"))
    await db.write(
        lambda c: c.execute(
            "CREATE TEMP TRIGGER boom_t BEFORE INSERT ON boom BEGIN SELECT RAISE(ROLLBACK, 'boom'); END"
        )
    )
    body = helpers.fence_body(claimed)
    results = await asyncio.gather(
        db.write(helpers.fence_job(claimed, body, clock.now())),
        db.write(lambda c: c.execute("INSERT INTO boom VALUES (1)")),
        return_exceptions=True,
    )
    assert all(isinstance(r, StorageError) for r in results), results
    assert sync_conn.execute("SELECT count(*) FROM order_submissions").fetchone()[0] == 0
    status, raw = await _fence(server_client, claimed, body)
    assert status == 200 and json.loads(raw)["click_permitted"] is True


@faults(("order_submissions", "UPDATE", "ABORT"), ("attempts", "UPDATE", "ROLLBACK"))
async def test_result_storage_failure_then_retry_same_key(
    server_client: Any, claimed: helpers.Claim, fault: StorageFault, sync_conn: sqlite3.Connection, case: Fault
) -> None:
    _, raw = await _fence(server_client, claimed, helpers.fence_body(claimed))
    sid = json.loads(raw)["submission_id"]
    await _post_refused_then_replayed(
        server_client,
        claimed,
        helpers.result_path(sid),
        helpers.result_body(claimed, "UNKNOWN"),
        fault,
        sync_conn,
        case,
    )


@faults(("evidence_assets", "INSERT", "ABORT"))
async def test_evidence_storage_failure_then_retry_same_key(
    server_client: Any,
    claimed: helpers.Claim,
    fault: StorageFault,
    sync_conn: sqlite3.Connection,
    settings: Settings,
    case: Fault,
) -> None:
    data = helpers.png()
    fields = helpers.evidence_fields(claimed, data)
    body, ctype = helpers.multipart(fields, data)

    def send() -> Awaitable[tuple[int, bytes]]:
        return helpers.upload(server_client, claimed.device, claimed.task_id, body, ctype)

    status, first = await refused_then_retried(fault, sync_conn, case, send)
    assert status == 201, first
    asset = json.loads(first)
    row = sync_conn.execute("SELECT sha256 FROM evidence_assets WHERE id = ?", (asset["asset_id"],)).fetchone()
    path = Path(settings.evidence_dir) / row[0][:2] / row[0][2:4] / f"{row[0]}.png"
    assert path.read_bytes() == data  # every row points at its complete file
    assert await send() == (200, first)


async def test_evidence_file_store_failure_is_503_and_retry_works(
    server_client: Any, claimed: helpers.Claim, sync_conn: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cmbuyer.server.evidence import files as evidence_files

    real_store = evidence_files.store

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError(28, "No space left on device")

    data = helpers.png()
    body, ctype = helpers.multipart(helpers.evidence_fields(claimed, data), data)
    before = counts(sync_conn)
    monkeypatch.setattr(evidence_files, "store", broken)
    assert await helpers.upload(server_client, claimed.device, claimed.task_id, body, ctype) == (503, b"")
    assert counts(sync_conn) == before
    monkeypatch.setattr(evidence_files, "store", real_store)
    status, _ = await helpers.upload(server_client, claimed.device, claimed.task_id, body, ctype)
    assert status == 201


@faults(("events", "INSERT", "ABORT"), ("tasks", "UPDATE", "ROLLBACK"))
async def test_events_storage_failure_then_retry_same_key(
    server_client: Any, claimed: helpers.Claim, fault: StorageFault, sync_conn: sqlite3.Connection, case: Fault
) -> None:
    first = await _post_refused_then_replayed(
        server_client,
        claimed,
        helpers.events_path(claimed.task_id),
        helpers.events_body(claimed),
        fault,
        sync_conn,
        case,
    )
    assert json.loads(first)["first_seq"] == 1


@faults(("authorizations", "UPDATE", "ABORT"))
async def test_fail_storage_failure_then_retry_same_key(
    server_client: Any, claimed: helpers.Claim, fault: StorageFault, sync_conn: sqlite3.Connection, case: Fault
) -> None:
    await _post_refused_then_replayed(
        server_client,
        claimed,
        helpers.fail_path(claimed.attempt_id),
        helpers.fail_body(claimed),
        fault,
        sync_conn,
        case,
    )


async def test_disk_full_by_max_page_count_is_503_not_500(
    server_client: Any, claimed: helpers.Claim, fault: StorageFault, sync_conn: sqlite3.Connection
) -> None:
    """``PRAGMA max_page_count`` at the current size: requests that need a new page get 503; after the
    limit is lifted the same keys work. Events are appended until the file must grow."""
    await fault.disk_full()
    statuses: set[int] = set()
    sent: list[dict[str, Any]] = []
    for _ in range(400):
        body = helpers.events_body(
            claimed,
            events=[
                {
                    "step": "OPEN_PRODUCT",
                    "outcome": "OK",
                    "reason_code": None,
                    "summary": "x" * 200,
                    "occurred_at": "2026-08-04T09:00:01Z",
                }
            ]
            * 20,
        )
        status, raw = await helpers.post_json(server_client, helpers.events_path(claimed.task_id), claimed.device, body)
        statuses.add(status)
        if status == 503:
            assert raw == b""
            sent.append(body)
            break
    assert statuses <= {200, 503} and 503 in statuses
    await fault.off()
    status, _ = await helpers.post_json(server_client, helpers.events_path(claimed.task_id), claimed.device, sent[0])
    assert status == 200
    assert sync_conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
