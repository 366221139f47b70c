"""SQLite access: one write owner with group commit, separate read connections (docs/architecture.md "Server layers").

Every write is a plain synchronous function ``job(conn) -> T`` over a :class:`sqlite3.Connection`
(built from store-layer calls). :meth:`Database.write` queues it; a single writer task takes every
queued job, runs them on the write connection's own thread inside **one** ``BEGIN IMMEDIATE``,
commits once, and only then answers each caller. This is the group-commit pattern (docs/performance.md):
per-request semantics are unchanged (a failing job's writes are undone and nothing else's; nobody
hears "ok" before the commit), but the fsync of ``synchronous=FULL`` is paid once per batch instead of
once per request.

How a failing job is isolated — optimistic first, savepoints only when needed. A SAVEPOINT per job
makes SQLite copy every page the job touches into a sub-journal; for a claim that doubled the SQL cost
(≈ 0.48 → 0.26 ms, docs/performance.md). So a batch first runs all its jobs without savepoints. If
every job succeeds, that pass commits. If one raises, the whole transaction is rolled back and the batch
runs again from the start, each job in its own SAVEPOINT (the design's original scheme), and only that
second pass commits: every answer still comes from the pass that committed. Jobs are therefore run
more than once in that case; they must be plain functions of the connection and their captured
arguments (no side effects outside the transaction) — which every store-layer job is. A lone job that
fails needs no second pass: rolling back the transaction is rolling back the job.

Jobs never run transaction-control statements (BEGIN, COMMIT, ROLLBACK, SAVEPOINT): the transaction is
the writer's. A job that ends it anyway is caught (``in_transaction`` turns false) and fails its batch
without a second pass; one that ends it and opens a new one cannot be told apart from a well-behaved job,
so that rule is kept by review, not checked at run time.

Because only the writer task ever touches the write connection, two requests can never interleave
inside one transaction, whatever the callers do. Other processes (the CLI) contend through SQLite's
own locking and ``busy_timeout``.

Failures: any ``sqlite3.Error`` or aiosqlite failure surfaces as :class:`StorageError` (→ 503 at the
HTTP edge). If SQLite itself rolled the whole transaction back (``SQLITE_FULL``, ``SQLITE_BUSY`` …;
seen as ``in_transaction`` turning false), every job of that batch fails with StorageError, since
none of them has been answered yet.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from cmbuyer.server.domain.errors import Unavailable

log = logging.getLogger("cmbuyer.db")

T = TypeVar("T")
Job = Callable[[sqlite3.Connection], T]

BUSY_TIMEOUT_MS = 5000
MAX_BATCH = 64
# A batch made only of short jobs (device requests: a handful of indexed statements, ≈ 0.5 ms) runs its
# jobs on the event-loop thread; see Database.write. Bounds how long one such batch holds the loop.
MAX_SHORT_BATCH = 32
# The writer's per-job savepoint: a name no job would open itself (a job's own "SAVEPOINT job" would
# otherwise catch the writer's ROLLBACK TO and keep the failed job's earlier writes).
_SAVEPOINT = "cmbuyer_writer_job"
# close() lets the batch in flight and every job queued before it finish (a lock wait ends within
# BUSY_TIMEOUT_MS); only past this grace is the writer cancelled.
CLOSE_GRACE_S = BUSY_TIMEOUT_MS / 1000 + 5


class StorageError(Unavailable):
    """The database could not serve a request (I/O, lock timeout, full disk, closed connection).

    Carries no SQL, path or parameter text, so it is safe to log; the HTTP edge maps it to 503.
    """


def configure_connection(conn: sqlite3.Connection, *, read_only: bool = False) -> None:
    """Apply the pragmas every connection needs (WAL, FULL sync, FKs, busy timeout)."""
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA foreign_keys = ON")
    if read_only:
        conn.execute("PRAGMA query_only = ON")


def connect_sync(path: Path, *, read_only: bool = False) -> sqlite3.Connection:
    """A configured synchronous connection in autocommit mode (explicit BEGIN only; CLI, migrations)."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    configure_connection(conn, read_only=read_only)
    return conn


def run_in_transaction(conn: sqlite3.Connection, job: Job[T]) -> T:
    """Run ``job`` in its own ``BEGIN IMMEDIATE`` … ``COMMIT`` on a sync connection (CLI, tools).

    Rolls back on any exception (checking ``in_transaction`` first); sqlite errors become
    :class:`StorageError`, other exceptions propagate unchanged after the rollback.
    """
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise StorageError("could not begin a write transaction") from exc
    try:
        result = job(conn)
        conn.execute("COMMIT")
        return result
    except sqlite3.Error as exc:
        _safe_rollback(conn)
        raise StorageError("write transaction failed") from exc
    except BaseException:
        _safe_rollback(conn)
        raise


def _safe_rollback(conn: sqlite3.Connection) -> None:
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except sqlite3.Error:
        log.warning("rollback failed; connection will be discarded by its owner")


def run_in_read_transaction(conn: sqlite3.Connection, job: Job[T]) -> T:
    """Run a read-only ``job`` inside one read transaction, so every statement sees the same commit
    (``Database.read(..., snapshot=True)``; tools). Errors propagate unchanged; the transaction is always
    ended."""
    if conn.in_transaction:
        _safe_rollback(conn)
    conn.execute("BEGIN")
    try:
        return job(conn)
    finally:
        _safe_rollback(conn)  # nothing to keep: ending a read transaction either way releases its snapshot


@dataclass
class _Pending:
    job: Job[Any]
    future: asyncio.Future[Any]
    short: bool = False
    outcome: tuple[bool, Any] | None = field(default=None)


def _run_batch(conn: sqlite3.Connection, batch: list[_Pending]) -> None:
    """Runs on the write connection's thread: one BEGIN IMMEDIATE, the jobs, one COMMIT — first without
    savepoints (:func:`_run_jobs_optimistic`), and again with a SAVEPOINT per job only when a job of a
    batch of several failed (module docstring).

    Never leaves a transaction open behind it: if one of its own bookkeeping statements (SAVEPOINT,
    RELEASE, ROLLBACK TO) or anything else unexpected fails, the whole batch is rolled back and every
    job of it fails with StorageError — otherwise the next BEGIN IMMEDIATE would fail forever.
    """
    if not _begin(conn, batch):
        return
    _finish_batch(conn, batch, _run_jobs_optimistic(conn, batch))


def _finish_batch(conn: sqlite3.Connection, batch: list[_Pending], failure: BaseException | None) -> None:
    """After the optimistic pass (inside its transaction): commit it when nothing failed; otherwise roll
    it back and — for a batch of several jobs — run the savepoint pass and commit that."""
    if failure is None:
        _commit(conn, batch)
        return
    if not conn.in_transaction:
        # SQLite (SQLITE_FULL, I/O error …) or a buggy job ended the transaction: earlier jobs' writes are
        # gone or out of our hands, so the whole batch fails — never a second pass (it could repeat
        # whatever the job did outside our transaction).
        for item in batch:
            item.outcome = (False, StorageError("transaction rolled back"))
        return
    _safe_rollback(conn)
    if len(batch) == 1:
        batch[0].outcome = (False, failure)
        return
    for item in batch:
        item.outcome = None
    if not _begin(conn, batch):
        return
    try:
        aborted = _run_jobs(conn, batch)
    except Exception as exc:  # bookkeeping failed: nobody has been answered yet, so drop the batch
        log.error("write batch failed: %s", exc.__class__.__name__)
        aborted = True
    if aborted:
        for item in batch:
            item.outcome = (False, StorageError("transaction rolled back"))
        _safe_rollback(conn)
        return
    _commit(conn, batch)


def _begin(conn: sqlite3.Connection, batch: list[_Pending]) -> bool:
    if conn.in_transaction:  # an earlier ROLLBACK failed: never let one leftover wedge every later batch
        _safe_rollback(conn)
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        for item in batch:
            item.outcome = (False, StorageError("could not begin a write transaction"))
        log.warning("BEGIN IMMEDIATE failed: %s", exc.__class__.__name__)
        return False
    return True


def _commit(conn: sqlite3.Connection, batch: list[_Pending]) -> None:
    try:
        conn.execute("COMMIT")
    except sqlite3.Error:
        _safe_rollback(conn)
        for item in batch:
            item.outcome = (False, StorageError("commit failed"))


def _job_failure(exc: BaseException) -> BaseException:
    """What the caller of a failed job hears: its own exception, or StorageError for SQLite errors and
    interruptions (no SQL text, path or parameter ever reaches the caller)."""
    if isinstance(exc, sqlite3.Error):
        return StorageError("write failed")
    if isinstance(exc, (StopIteration, StopAsyncIteration)):
        # a future refuses these (TypeError); a job raising one is a bug like any other exception
        return RuntimeError(f"write job raised {exc.__class__.__name__}")
    if isinstance(exc, Exception):
        return exc
    return StorageError("write interrupted")


def _run_jobs_optimistic(conn: sqlite3.Connection, batch: list[_Pending]) -> BaseException | None:
    """Every job in order, no savepoints; stops at the first job that raises and returns what its caller
    would hear (the caller then rolls back). None when all succeeded (outcomes set)."""
    for item in batch:
        try:
            item.outcome = (True, item.job(conn))
        except BaseException as exc:
            return _job_failure(exc)
        if not conn.in_transaction:  # the job ended the transaction itself (a bug): later jobs must not
            return StorageError("a job ended the transaction")  # run in autocommit mode (see _finish_batch)
    return None


def _run_jobs(conn: sqlite3.Connection, batch: list[_Pending]) -> bool:
    """Each job in its own SAVEPOINT; returns True when SQLite rolled the whole transaction back."""
    aborted = False
    for item in batch:
        if aborted:
            item.outcome = (False, StorageError("transaction aborted by an earlier statement"))
            continue
        conn.execute(f"SAVEPOINT {_SAVEPOINT}")
        try:
            value = item.job(conn)
        except BaseException as exc:
            if not conn.in_transaction:
                aborted = True  # SQLite rolled back everything: earlier jobs' writes are gone too.
            else:
                conn.execute(f"ROLLBACK TO {_SAVEPOINT}")
                conn.execute(f"RELEASE {_SAVEPOINT}")
            item.outcome = (False, _job_failure(exc))
        else:
            conn.execute(f"RELEASE {_SAVEPOINT}")
            item.outcome = (True, value)
    return aborted


class Database:
    """The process's database handle: one writer (group commit) plus a pool of readers.

    Use ``await db.write(job)`` for anything that changes state and ``await db.read(job)`` for
    queries (``job(conn) -> T`` is synchronous and runs on a connection thread; it must only call
    store-layer functions). Both raise :class:`StorageError` on storage failure.
    """

    def __init__(self, path: Path, *, readers: int = 2, replicated: bool = False) -> None:
        self.path = path
        # Litestream replicates this file (CMBUYER_REPLICA_URL): it owns checkpoints, so the writer makes
        # none of its own (its "Tips & Caveats"; server/replication.py) — an application checkpoint racing
        # Litestream's lock switch could drop WAL frames before they are copied.
        self.replicated = replicated
        self._readers_n = readers
        self._writer: aiosqlite.Connection | None = None
        self._readers: asyncio.Queue[aiosqlite.Connection] | None = None
        self._reader_conns: list[aiosqlite.Connection] = []
        self._inline: sqlite3.Connection | None = None
        self._queue: asyncio.Queue[_Pending | None] | None = None  # None: stop after the jobs before it
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self.on_commit: list[Callable[[], None]] = []

    async def open(self) -> None:
        """Open the connections and start the writer task. Raises StorageError."""
        self._closing = False
        try:
            self._writer = await self._connect(read_only=False)
            if self.replicated:
                await self._on_thread(self._writer, lambda c: c.execute("PRAGMA wal_autocheckpoint = 0"))
            self._readers = asyncio.Queue()
            for _ in range(self._readers_n):
                conn = await self._connect(read_only=True)
                self._reader_conns.append(conn)
                self._readers.put_nowait(conn)
            self._inline = connect_sync(self.path, read_only=True)
            self._inline.execute("PRAGMA busy_timeout = 0")  # never wait on the event-loop thread
        except (sqlite3.Error, OSError, ValueError) as exc:
            await self.close()
            raise StorageError("cannot open the database") from exc
        self._queue = asyncio.Queue()
        self._task = asyncio.create_task(self._writer_loop(), name="cmbuyer-db-writer")

    async def _connect(self, *, read_only: bool) -> aiosqlite.Connection:
        conn = await aiosqlite.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        await self._on_thread(conn, lambda c: configure_connection(c, read_only=read_only))
        return conn

    @staticmethod
    def _raw(conn: aiosqlite.Connection) -> sqlite3.Connection:
        """The sqlite3 connection inside an aiosqlite one (private attribute; aiosqlite is pinned < 0.23)."""
        raw: sqlite3.Connection = conn._conn
        return raw

    @classmethod
    async def _on_thread(cls, conn: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
        # aiosqlite runs each connection on its own thread; running the whole job there is one hop per
        # transaction instead of one per statement (measured 380/s vs 1,000+/s, docs/performance.md). The ignore: the
        # private _execute carries no annotations.
        result: T = await conn._execute(fn, cls._raw(conn))  # type: ignore[no-untyped-call]
        return result

    async def close(self) -> None:
        """Stop the writer (after queued jobs finish) and close every connection."""
        if self._task is not None and self._queue is not None:
            self._closing = True
            if not self._task.done():
                # Let the batch in flight finish and answer from what it really did: cancelling it mid-hop
                # would tell callers "failed" while aiosqlite still runs the queued COMMIT.
                self._queue.put_nowait(None)
                try:
                    await asyncio.wait_for(asyncio.shield(self._task), CLOSE_GRACE_S)
                except TimeoutError:
                    log.error("writer did not finish within %.0f s; cancelling it", CLOSE_GRACE_S)
                    self._task.cancel()
                    try:
                        await self._task
                    except asyncio.CancelledError:
                        pass
                except Exception as exc:  # the writer died earlier: its callers were already answered
                    log.error("writer ended with %s", exc.__class__.__name__)
            while not self._queue.empty():
                item = self._queue.get_nowait()
                if item is not None and not item.future.done():
                    item.future.set_exception(StorageError("database closed"))
            self._task = None
        for conn in [self._writer, *self._reader_conns]:
            if conn is not None:
                try:
                    await conn.close()
                except (sqlite3.Error, ValueError):
                    log.warning("closing a connection failed")
        if self._inline is not None:
            try:
                self._inline.close()
            except sqlite3.Error:
                log.warning("closing a connection failed")
        self._writer = None
        self._inline = None
        self._reader_conns = []
        self._readers = None

    async def write(self, job: Job[T], *, short: bool = False) -> T:
        """Run ``job`` inside the next group-committed write transaction and return its value.

        The value is returned only after COMMIT succeeded. An exception raised by ``job`` rolls back
        that job's writes only and is re-raised here; storage failures raise :class:`StorageError`.
        ``job`` may run more than once (module docstring); only the committed run's value is returned.

        ``short=True`` promises a job of a few indexed statements (every device API request). A batch made
        only of such jobs (at most MAX_SHORT_BATCH) runs them on the event-loop thread, between a BEGIN
        IMMEDIATE and a COMMIT that still run on the connection's thread (they may wait for a lock or an
        fsync). Why: the jobs are Python code that needs the GIL either way, and on a second thread every
        statement hands the GIL back and forth with the event loop — that cost ≈ 0.3 ms per claim under
        load, more than the SQL itself (docs/performance.md). Long jobs (admin actions over many tasks,
        sweeps) keep the default and never block the loop.
        """
        if self._queue is None or self._task is None or self._task.done() or self._closing:
            raise StorageError("database is not open")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Pending(job, future, short))
        return await future

    async def read(self, job: Job[T], *, snapshot: bool = False) -> T:
        """Run a read-only ``job`` on a reader connection (query_only=ON). Raises StorageError.

        Each statement of a plain read sees the latest commit at that moment. ``snapshot=True`` runs the
        whole job in one read transaction, so all its statements see the same commit — needed when a
        decision combines several reads that a concurrent write could change in between.
        """
        if self._readers is None:
            raise StorageError("database is not open")
        conn = await self._readers.get()
        try:
            return await self._on_thread(conn, (lambda c: run_in_read_transaction(c, job)) if snapshot else job)
        except (sqlite3.Error, ValueError) as exc:
            raise StorageError("read failed") from exc
        finally:
            if self._readers is not None:
                self._readers.put_nowait(conn)

    async def read_inline(self, job: Job[T]) -> T:
        """Run a *tiny* read-only ``job`` (one indexed lookup, tens of microseconds) directly on the
        event-loop thread, on a dedicated query-only connection. Raises StorageError.

        Same answer as :meth:`read` — every call is a fresh autocommit read of the latest commit, nothing
        is cached — without the thread hop, which costs more CPU than such a lookup (≈ 0.2–0.3 ms per
        device request, docs/performance.md). The connection never waits for a lock (busy_timeout 0);
        when SQLite answers BUSY/LOCKED (WAL recovery or reset by another process) the job is retried
        through :meth:`read`, which waits as usual. Never pass a job that may scan: it blocks the loop.
        """
        conn = self._inline
        if conn is None:
            return await self.read(job)
        try:
            return job(conn)
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                return await self.read(job)
            raise StorageError("read failed") from exc
        except (sqlite3.Error, ValueError) as exc:
            raise StorageError("read failed") from exc

    async def _rollback_writer(self) -> None:
        """Best effort: make sure no transaction is left open on the write connection."""
        if self._writer is None:
            return
        try:
            await self._on_thread(self._writer, _safe_rollback)
        except Exception as exc:
            log.error("rollback on the write connection failed: %s", exc.__class__.__name__)

    async def _writer_loop(self) -> None:
        assert self._queue is not None and self._writer is not None
        stopping = False
        while not stopping:
            first = await self._queue.get()
            if first is None:
                return
            batch = [first]
            short = first.short
            while len(batch) < MAX_BATCH and not self._queue.empty():
                if short and len(batch) >= MAX_SHORT_BATCH:
                    break
                item = self._queue.get_nowait()
                if item is None:
                    stopping = True
                    break
                short = short and item.short
                batch.append(item)
            try:
                if short:
                    await self._run_short_batch(batch)
                else:
                    await self._on_thread(self._writer, functools.partial(_run_batch, batch=batch))
            except asyncio.CancelledError:
                for item in batch:
                    if not item.future.done():
                        item.future.set_exception(StorageError("database closed"))
                raise
            except Exception as exc:  # the writer task must never die: later writes would hang forever
                log.error("write connection failed: %s", exc.__class__.__name__)
                for item in batch:
                    item.outcome = (False, StorageError("write connection failed"))
                await self._rollback_writer()
            committed = False
            for item in batch:
                ok, value = item.outcome or (False, StorageError("job did not run"))
                committed = committed or ok
                if item.future.done():
                    continue
                if ok:
                    item.future.set_result(value)
                else:
                    item.future.set_exception(value)  # never StopIteration: _job_failure wraps it
            if committed:
                for hook in list(self.on_commit):
                    try:
                        hook()
                    except Exception as exc:  # a notification hook must not kill the writer
                        log.error("on_commit hook failed: %s", exc.__class__.__name__)

    async def _run_short_batch(self, batch: list[_Pending]) -> None:
        """:func:`_run_batch` with the optimistic pass on the event-loop thread (see :meth:`write`)."""
        assert self._writer is not None
        if not await self._on_thread(self._writer, lambda c: _begin(c, batch)):
            return
        # only this task uses the connection, one step at a time, so the loop thread may run the jobs
        failure = _run_jobs_optimistic(self._raw(self._writer), batch)
        await self._on_thread(self._writer, lambda c: _finish_batch(c, batch, failure))
