"""Local journal: one SQLite file per device serial (intent before effect: docs/agent.md "Journal").

Location: ``$CMBUYER_AGENT_STATE_DIR/<serial>.sqlite3`` (default ``./var/agent``); the serial is
made filesystem-safe (``192.168.0.173:5555`` → ``192.168.0.173_5555``). File mode 0600: it holds
claim tokens (the only place outside server memory).

Tables:
- ``idem_keys(purpose, scope, key)``  every idempotency key, written *before* its request is sent;
  a retry after a crash or a transport error reuses it. ``drop_key`` after a final answer.
- ``claims``  the claim (attempt id, generation, token, task snapshot) and its local state
  ``ACTIVE`` → ``FAIL_PENDING`` (the ``fail`` to send is stored in ``pending_fails`` before it is
  sent; recovery re-sends it with the same key) → ``FAILED_REPORTED`` | ``ABANDONED`` (refused);
  ``ACTIVE`` → ``FENCED``.
- ``submissions``  the submission phase ``PERMIT_RECEIVED → TAP_INTENT_RECORDED → TAPPED →
  RESULT_REPORTED`` plus the observed result and its ``result_key``. When the last look before the
  tap refuses it, ``PERMIT_RECEIVED → NOT_TAPPED → RESULT_REPORTED`` with ``UNKNOWN`` and its reason
  decided at once (no tap was sent; a tap intent is refused from there). A fence that answered with a
  replay (the first answer was lost: no permit, no tap) is journaled as phase ``NO_PERMIT`` with
  ``UNKNOWN`` decided, so recovery reports it if the first report fails.
- ``post_tap``  what was learnt after the tap beside the observation: its ``observation_reason``,
  the foreign package that was in front (recorded instead of a screenshot), the read-only
  confirmation's last journaled step (``confirm_step``, written *before* each of its actions) and
  its result (``order_sn``, the ORDER_CONFIRMATION asset). Recovery re-sends reason and order_sn
  with the stored result; it never resumes a confirmation (nothing in recovery touches the phone).
- ``meta``  key/value: ``hold`` = why the agent must not claim until a person acts; ``streaks`` =
  the hold policy's consecutive-failure counters (:mod:`cmbuyer.agent.holds`) and the last attempt
  they counted, so a restart neither forgets nor double-counts an attempt.

Every write is one ``BEGIN IMMEDIATE`` transaction with ``synchronous=FULL`` so a phase written
before a tap survives power loss.

States and phases are the enums of :mod:`cmbuyer.agent.journal_states`; a claim's state and a submission's
phase change only in :meth:`Journal._set_claim_state` / :meth:`Journal._set_phase`, the compare-and-set of
each table, which refuses a move its transition table does not hold before any SQL runs (no SQL here writes
a state as a literal: tests/agent/test_journal_literals.py). The file's format is ``PRAGMA user_version``
(:data:`SCHEMA_VERSION`); opening an older file runs the missing :data:`_UPGRADES` steps in order, each in
one transaction with its version stamp; a newer file is refused (an older agent must not guess at it).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cmbuyer.agent.journal_states import CLAIM_MOVES, PHASE_MOVES, PHASE_TRANSITIONS, TAP_LINE, ClaimState, Phase

# The phases on which the submit tap may be sent, in order (recovery and tests walk them).
PHASES = TAP_LINE
_SAFE_SERIAL = re.compile(r"[^A-Za-z0-9._-]")

# Version 1: the tables as every journal written before ``user_version`` existed has them (that code created
# them with ``IF NOT EXISTS`` and stamped no version, so such a file reads as version 0 and this step only
# stamps it). A later format change appends a step (plain SQL statements separated by ``;``); never edit one.
_V1_TABLES = """
CREATE TABLE IF NOT EXISTS idem_keys (
    purpose TEXT NOT NULL, scope TEXT NOT NULL, key TEXT NOT NULL, created_at TEXT NOT NULL,
    PRIMARY KEY (purpose, scope));
CREATE TABLE IF NOT EXISTS claims (
    attempt_id TEXT PRIMARY KEY, task_id TEXT NOT NULL, task_version INTEGER NOT NULL,
    authorization_id TEXT NOT NULL, claim_generation INTEGER NOT NULL, claim_token TEXT NOT NULL,
    session_id TEXT NOT NULL, lease_expires_at TEXT NOT NULL, authorization_expires_at TEXT NOT NULL,
    task_json TEXT NOT NULL, state TEXT NOT NULL, reason TEXT, created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS submissions (
    attempt_id TEXT PRIMARY KEY REFERENCES claims(attempt_id), submission_id TEXT NOT NULL,
    phase TEXT NOT NULL, observation TEXT, evidence_asset_id TEXT, result_key TEXT,
    updated_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS post_tap (
    attempt_id TEXT PRIMARY KEY REFERENCES submissions(attempt_id), observation_reason TEXT,
    foreground_package TEXT, confirm_step TEXT, order_sn TEXT, confirm_asset_id TEXT,
    updated_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pending_fails (
    attempt_id TEXT PRIMARY KEY REFERENCES claims(attempt_id), reason_code TEXT NOT NULL,
    summary TEXT NOT NULL, evidence_asset_id TEXT, created_at TEXT NOT NULL);
"""
# Step n brings a file from version n-1 to n.
_UPGRADES: tuple[str, ...] = (_V1_TABLES,)
SCHEMA_VERSION = len(_UPGRADES)
# The points at which :attr:`Journal.commit_hook` is called, each right after its write is committed
# (``CLAIM_ANSWERED``: the server's claim arrived, nothing journaled yet; ``CONFIRM_STEP``: a step of the
# read-only confirmation is journaled, not yet done). Crash tests stop the process at one of them.
COMMIT_POINTS = (
    "CLAIM_ANSWERED",
    "CLAIMED",
    "PERMIT_RECEIVED",
    "TAP_INTENT_RECORDED",
    "TAPPED",
    "NOT_TAPPED",
    "OBSERVED",
    "CONFIRM_STEP",
    "RESULT_REPORTED",
)
CommitHook = Callable[[str], None]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def journal_path(serial: str, state_dir: Path) -> Path:
    """``<state_dir>/<serial>.sqlite3`` with the serial made file-safe (``state_dir``: the agent's
    ``CMBUYER_AGENT_STATE_DIR``, agent/settings.py)."""
    return state_dir / f"{_SAFE_SERIAL.sub('_', serial)}.sqlite3"


class JournalError(Exception):
    """The journal cannot be read or written: the agent must stop (fail closed, docs/architecture.md "Safety rules")."""


@dataclass(frozen=True)
class ClaimRow:
    attempt_id: str
    task_id: str
    task_version: int
    authorization_id: str
    claim_generation: int
    claim_token: str = field(repr=False)
    session_id: str
    lease_expires_at: str
    authorization_expires_at: str
    task: dict[str, Any]
    state: ClaimState
    reason: str | None


@dataclass(frozen=True)
class SubmissionRow:
    attempt_id: str
    submission_id: str
    phase: Phase
    observation: str | None
    evidence_asset_id: str | None
    result_key: str | None
    observation_reason: str | None = None
    order_sn: str | None = None


# The claim columns in ClaimRow's order (``task_json`` holds ``task``), with the table: "SELECT {this} WHERE …".
_CLAIM_COLUMNS = (
    "attempt_id, task_id, task_version, authorization_id, claim_generation, claim_token, session_id, "
    "lease_expires_at, authorization_expires_at, task_json, state, reason FROM claims"
)
_SUBMISSION_COLUMNS = (
    "s.attempt_id, s.submission_id, s.phase, s.observation, s.evidence_asset_id, "
    "s.result_key, p.observation_reason, p.order_sn FROM submissions s "
    "LEFT JOIN post_tap p ON p.attempt_id = s.attempt_id"
)


def _phase_of(value: str) -> Phase:
    try:
        return Phase(value)
    except ValueError:
        raise JournalError(f"unknown submission phase {value!r} in the journal") from None


def _submission_row(row: tuple[Any, ...]) -> SubmissionRow:
    return SubmissionRow(row[0], row[1], _phase_of(row[2]), *row[3:])


# The phases :meth:`Journal.advance` moves to, each by its use-case of the phase transition table.
_ADVANCES: dict[str, str] = {
    Phase.TAP_INTENT_RECORDED: "tap_intent",
    Phase.TAPPED: "tapped",
    Phase.RESULT_REPORTED: "reported",
}


class Journal:
    """The journal of one device. Not shared between threads (one agent process per serial).

    ``commit_hook`` (None in production) is called with the name of each :data:`COMMIT_POINTS` entry
    right after that point is committed, on the thread that wrote it; tests/agent/pausing_agent.py sets
    one that never returns, so tests/agent/test_kill_restart.py can SIGKILL the agent at exactly that
    journal phase.
    """

    def __init__(self, path: Path, *, commit_hook: CommitHook | None = None) -> None:
        self.path = path
        self.commit_hook = commit_hook
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            os.close(fd)
            # The lease keeper thread persists renew keys too: one connection guarded by a lock.
            self._db = sqlite3.connect(path, isolation_level=None, timeout=10, check_same_thread=False)
            self._lock = threading.RLock()
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            try:
                self._upgrade()
            except BaseException:
                self._db.close()  # a refused file is left as found, and not held open
                raise
        except (OSError, sqlite3.Error) as exc:
            raise JournalError(f"cannot open journal: {type(exc).__name__}") from exc

    def _upgrade(self) -> None:
        """Bring the file to :data:`SCHEMA_VERSION`: each missing step in order, each in one transaction
        with its version stamp (a crash between steps leaves a file the next start resumes). Raises
        :class:`JournalError` for a file of a newer format, unchanged."""
        if int(self._db.execute("PRAGMA user_version").fetchone()[0]) == SCHEMA_VERSION:
            return  # the usual open: no write lock taken (``journal`` may read beside a running agent)
        for version, step in enumerate(_UPGRADES, start=1):
            with self._tx_unlocked() as db:
                # read inside the write lock: another process opening the same file cannot run a step twice
                found = int(db.execute("PRAGMA user_version").fetchone()[0])
                if found > SCHEMA_VERSION:
                    raise JournalError(f"journal format {found} is newer than this agent's {SCHEMA_VERSION}")
                if found >= version:
                    continue
                for statement in step.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {version:d}")  # a pragma takes no bound parameter

    @classmethod
    def for_serial(cls, serial: str, state_dir: Path) -> Journal:
        """The journal of the phone ``serial`` in ``state_dir`` (:func:`journal_path`)."""
        return cls(journal_path(serial, state_dir))

    def _committed(self, point: str) -> None:
        if self.commit_hook is not None:
            self.commit_hook(point)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            with self._tx_unlocked() as db:
                yield db

    @contextmanager
    def _tx_unlocked(self) -> Iterator[sqlite3.Connection]:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise JournalError(f"journal write failed: {type(exc).__name__}") from exc

    def _one(self, sql: str, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        try:
            with self._lock:
                row: tuple[Any, ...] | None = self._db.execute(sql, args).fetchone()
        except sqlite3.Error as exc:
            raise JournalError(f"journal read failed: {type(exc).__name__}") from exc
        return row

    def _all(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        try:
            with self._lock:
                rows: list[tuple[Any, ...]] = self._db.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise JournalError(f"journal read failed: {type(exc).__name__}") from exc
        return rows

    # --- idempotency keys -------------------------------------------------------------------
    def key(self, purpose: str, scope: str = "") -> str:
        """The persisted key for (purpose, scope), creating and committing it first if new."""
        with self._tx() as db:
            row = db.execute("SELECT key FROM idem_keys WHERE purpose=? AND scope=?", (purpose, scope)).fetchone()
            if row:
                return str(row[0])
            key = str(uuid.uuid4())
            db.execute(
                "INSERT INTO idem_keys (purpose, scope, key, created_at) VALUES (?, ?, ?, ?)",
                (purpose, scope, key, _now()),
            )
            return key

    def key_scopes(self, purpose: str) -> list[str]:
        """Scopes of the keys of ``purpose`` still journaled, oldest first (e.g. the session of a
        claim-next whose answer a crash left unjournaled)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT scope FROM idem_keys WHERE purpose=? ORDER BY created_at", (purpose,)
            ).fetchall()
        return [str(r[0]) for r in rows]

    def drop_key(self, purpose: str, scope: str = "") -> None:
        """Forget a key after a final answer, so the next logical request gets a fresh one."""
        with self._tx() as db:
            db.execute("DELETE FROM idem_keys WHERE purpose=? AND scope=?", (purpose, scope))

    # --- claims -----------------------------------------------------------------------------
    def record_claim(
        self,
        *,
        attempt_id: str,
        task_id: str,
        task_version: int,
        authorization_id: str,
        claim_generation: int,
        claim_token: str,
        session_id: str,
        lease_expires_at: str,
        authorization_expires_at: str,
        task: dict[str, Any],
    ) -> None:
        self._committed("CLAIM_ANSWERED")  # the server claimed, nothing journaled yet
        now = _now()
        with self._tx() as db:
            db.execute(
                "INSERT INTO claims (attempt_id, task_id, task_version, authorization_id, claim_generation, "
                "claim_token, session_id, lease_expires_at, authorization_expires_at, task_json, state, reason, "
                "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(attempt_id) DO UPDATE SET lease_expires_at=excluded.lease_expires_at, "
                "updated_at=excluded.updated_at",
                (
                    attempt_id,
                    task_id,
                    task_version,
                    authorization_id,
                    claim_generation,
                    claim_token,
                    session_id,
                    lease_expires_at,
                    authorization_expires_at,
                    json.dumps(task, ensure_ascii=False, sort_keys=True),
                    ClaimState.ACTIVE,
                    None,
                    now,
                    now,
                ),
            )
            # Journaled claim ⇔ its claim-next key forgotten, in one transaction: a key left behind
            # would make the next start replay a claim that recovery has already settled.
            db.execute("DELETE FROM idem_keys WHERE purpose='claim_request' AND scope=?", (session_id,))
        self._committed("CLAIMED")

    def update_lease(self, attempt_id: str, lease_expires_at: str) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE claims SET lease_expires_at=?, updated_at=? WHERE attempt_id=?",
                (lease_expires_at, _now(), attempt_id),
            )

    def set_claim_state(self, attempt_id: str, state: ClaimState, reason: str | None = None) -> None:
        """Move the claim to ``state`` with ``reason`` (replacing the one stored). Raises
        :class:`JournalError` (nothing written) when no claim is journaled for ``attempt_id`` or no use-case
        of :data:`~cmbuyer.agent.journal_states.CLAIM_TRANSITIONS` moves its state to ``state``."""
        with self._tx() as db:
            current, _ = self._claim_state(db, attempt_id)
            self._set_claim_state(db, attempt_id, current, state, reason)

    @staticmethod
    def _claim_state(db: sqlite3.Connection, attempt_id: str) -> tuple[str, str | None]:
        """``(state, reason)`` of the journaled claim; JournalError when there is none."""
        row = db.execute("SELECT state, reason FROM claims WHERE attempt_id = ?", (attempt_id,)).fetchone()
        if row is None:
            raise JournalError("no claim journaled for this attempt")
        return str(row[0]), row[1]

    @staticmethod
    def _set_claim_state(
        db: sqlite3.Connection, attempt_id: str, expected: str, new: ClaimState, reason: str | None
    ) -> None:
        """The one write of ``claims.state``: ``expected`` → ``new`` (and ``reason``), inside the caller's
        transaction. The pair is checked against the claim transition table before any SQL; the UPDATE
        holds only while the state is still ``expected``. Raises :class:`JournalError` otherwise."""
        if (str(expected), str(new)) not in CLAIM_MOVES:
            raise JournalError(f"illegal claim move {expected} -> {new}")
        changed = db.execute(
            "UPDATE claims SET state = ?, reason = ?, updated_at = ? WHERE attempt_id = ? AND state = ?",
            (new, reason, _now(), attempt_id, expected),
        ).rowcount
        if changed != 1:
            raise JournalError(f"claim not in state {expected}: not moved to {new}")

    @staticmethod
    def _set_phase(db: sqlite3.Connection, attempt_id: str, expected: str, new: str) -> None:
        """The one write of ``submissions.phase``: ``expected`` → ``new``, inside the caller's transaction.
        The pair is checked against the phase transition table before any SQL; the UPDATE holds only while
        the phase is still ``expected``. Raises :class:`JournalError` otherwise (nothing written)."""
        if (str(expected), str(new)) not in PHASE_MOVES:
            raise JournalError(f"illegal phase move {expected} -> {new}")
        changed = db.execute(
            "UPDATE submissions SET phase = ?, updated_at = ? WHERE attempt_id = ? AND phase = ?",
            (new, _now(), attempt_id, expected),
        ).rowcount
        if changed != 1:
            raise JournalError(f"submission not in phase {expected}: not moved to {new}")

    def _claim_row(self, row: tuple[Any, ...]) -> ClaimRow:
        try:
            state = ClaimState(row[10])
        except ValueError:
            raise JournalError(f"unknown claim state {row[10]!r} in the journal") from None
        return ClaimRow(
            attempt_id=row[0],
            task_id=row[1],
            task_version=row[2],
            authorization_id=row[3],
            claim_generation=row[4],
            claim_token=row[5],
            session_id=row[6],
            lease_expires_at=row[7],
            authorization_expires_at=row[8],
            task=json.loads(row[9]),
            state=state,
            reason=row[11],
        )

    def claim(self, attempt_id: str) -> ClaimRow | None:
        row = self._one(f"SELECT {_CLAIM_COLUMNS} WHERE attempt_id=?", (attempt_id,))
        return self._claim_row(row) if row else None

    def claims(self, state: ClaimState | None = None) -> list[ClaimRow]:
        if state is None:
            rows = self._all(f"SELECT {_CLAIM_COLUMNS} ORDER BY created_at", ())
        else:
            rows = self._all(f"SELECT {_CLAIM_COLUMNS} WHERE state=? ORDER BY created_at", (state,))
        return [self._claim_row(r) for r in rows]

    # --- submission phases ------------------------------------------------------------------
    def record_permit(self, attempt_id: str, submission_id: str) -> None:
        """PERMIT_RECEIVED. Refuses a second permit for the same attempt (never two taps)."""
        with self._tx() as db:
            existing = db.execute("SELECT phase FROM submissions WHERE attempt_id=?", (attempt_id,)).fetchone()
            if existing:
                raise JournalError("a permit is already journaled for this attempt")
            db.execute(
                "INSERT INTO submissions (attempt_id, submission_id, phase, updated_at) VALUES (?, ?, ?, ?)",
                (attempt_id, submission_id, Phase.PERMIT_RECEIVED, _now()),
            )
            current, reason = self._claim_state(db, attempt_id)
            self._set_claim_state(db, attempt_id, current, ClaimState.FENCED, reason)
        self._committed("PERMIT_RECEIVED")

    def record_fence_without_permit(self, attempt_id: str, submission_id: str) -> str:
        """The fence answered with a replay (click_permitted=false): a submission exists on the
        server but we hold no permit and never tap. Journal it as ``NO_PERMIT`` with ``UNKNOWN``
        decided; returns the result_key to report it with."""
        key = self.key("result", attempt_id)
        with self._tx() as db:
            db.execute(
                "INSERT INTO submissions (attempt_id, submission_id, phase, observation, result_key, updated_at) "
                "VALUES (?, ?, ?, 'UNKNOWN', ?, ?) ON CONFLICT(attempt_id) DO NOTHING",
                (attempt_id, submission_id, Phase.NO_PERMIT, key, _now()),
            )
            current, _ = self._claim_state(db, attempt_id)
            self._set_claim_state(db, attempt_id, current, ClaimState.FENCED, "fence replay: no permit")
        return key

    def record_not_tapped(self, attempt_id: str, reason: str) -> str:
        """The permit is journaled but the submit tap will NOT be sent (the last look before it failed:
        agent/submit.py). Phase ``PERMIT_RECEIVED`` → ``NOT_TAPPED`` with ``UNKNOWN`` decided and
        ``reason`` (the wire ``observation_reason``) stored, in one transaction, before anything else
        happens; returns the result_key. From ``NOT_TAPPED`` the only move is to ``RESULT_REPORTED``:
        the journal refuses a tap intent afterwards, and recovery re-sends this result (never "maybe
        tapped"). Refused (JournalError) unless the phase is ``PERMIT_RECEIVED``: after the tap intent
        nobody may claim that no tap was sent."""
        key = self.key("result", attempt_id)
        with self._tx() as db:
            self._move(db, attempt_id, "not_tapped")
            db.execute(
                "UPDATE submissions SET observation='UNKNOWN', result_key=?, updated_at=? WHERE attempt_id=?",
                (key, _now(), attempt_id),
            )
            db.execute(
                "INSERT INTO post_tap (attempt_id, observation_reason, updated_at) VALUES (?,?,?) "
                "ON CONFLICT(attempt_id) DO NOTHING",
                (attempt_id, reason, _now()),
            )
        self._committed("NOT_TAPPED")
        return key

    @staticmethod
    def _phase(db: sqlite3.Connection, attempt_id: str) -> Phase:
        """The submission's phase; JournalError when no permit (or fence replay) is journaled."""
        row = db.execute("SELECT phase FROM submissions WHERE attempt_id=?", (attempt_id,)).fetchone()
        if row is None:
            raise JournalError("no permit journaled for this attempt")
        return _phase_of(row[0])

    @classmethod
    def _move(cls, db: sqlite3.Connection, attempt_id: str, use_case: str) -> tuple[Phase, Phase]:
        """Apply ``use_case`` to the submission's phase (the transition table decides the new phase, the
        compare-and-set writes it); returns ``(from, to)``. JournalError when the use-case is not allowed."""
        current = cls._phase(db, attempt_id)
        new = PHASE_TRANSITIONS.get((current, use_case))
        if new is None:
            raise JournalError(f"illegal phase move: {use_case} at {current}")
        cls._set_phase(db, attempt_id, current, new)
        return current, new

    def advance(self, attempt_id: str, phase: str) -> None:
        """Move the submission to ``phase`` along :data:`~cmbuyer.agent.journal_states.PHASE_TRANSITIONS`:
        forward by exactly one step on the tap line, or to RESULT_REPORTED from any phase short of it (a
        result — often UNKNOWN — can be reported without the tap having happened). ``NO_PERMIT`` and
        ``NOT_TAPPED`` move only to RESULT_REPORTED (never a tap intent). Raises :class:`JournalError`
        (nothing written) for any other move. The commit hook sees moves from the tap line only."""
        use_case = _ADVANCES.get(phase)
        if use_case is None:  # NOT_TAPPED has its own call; PERMIT_RECEIVED and NO_PERMIT are inserted
            raise JournalError(f"illegal phase move to {phase}")
        with self._tx() as db:
            current, new = self._move(db, attempt_id, use_case)
        if current in TAP_LINE:
            self._committed(new)

    def record_observation(
        self,
        attempt_id: str,
        observation: str,
        evidence_asset_id: str | None,
        *,
        reason: str | None = None,
        foreground_package: str | None = None,
    ) -> str:
        """Store the result to report (before sending) and return its result_key, which is the
        journaled key ``("result", attempt_id)``. A result already decided is kept: recovery
        re-sends exactly that result with its key. ``reason`` is the wire ``observation_reason``;
        ``foreground_package`` the foreign app that was in front (no screenshot was taken of it)."""
        key = self.key("result", attempt_id)
        with self._tx() as db:
            row = db.execute("SELECT observation FROM submissions WHERE attempt_id=?", (attempt_id,)).fetchone()
            if row is None:
                raise JournalError("no permit journaled for this attempt")
            if row[0] is None:
                db.execute(
                    "UPDATE submissions SET observation=?, evidence_asset_id=?, result_key=?, "
                    "updated_at=? WHERE attempt_id=?",
                    (observation, evidence_asset_id, key, _now(), attempt_id),
                )
                db.execute(
                    "INSERT INTO post_tap (attempt_id, observation_reason, foreground_package, "
                    "updated_at) VALUES (?,?,?,?) ON CONFLICT(attempt_id) DO NOTHING",
                    (attempt_id, reason, foreground_package, _now()),
                )
            elif evidence_asset_id is not None:
                # 'not tapped' was journaled first, before the screenshot existed; nothing has been
                # reported yet (that happens after this call), so the result can still carry it
                db.execute(
                    "UPDATE submissions SET evidence_asset_id=?, updated_at=? WHERE attempt_id=? "
                    "AND phase=? AND observation=? AND evidence_asset_id IS NULL",
                    (evidence_asset_id, _now(), attempt_id, Phase.NOT_TAPPED, observation),
                )
        self._committed("OBSERVED")
        return key

    def _unreported_post_tap(self, db: sqlite3.Connection, attempt_id: str) -> None:
        row = db.execute(
            "SELECT s.phase, s.observation, p.attempt_id FROM submissions s LEFT JOIN post_tap p "
            "ON p.attempt_id = s.attempt_id WHERE s.attempt_id=?",
            (attempt_id,),
        ).fetchone()
        if row is None or row[1] is None or row[2] is None:
            raise JournalError("no observation journaled for this attempt")
        if row[0] == Phase.RESULT_REPORTED:
            raise JournalError("the result is already reported: the confirmation is over")

    def record_confirm_step(self, attempt_id: str, step: str) -> None:
        """Journal the read-only confirmation's next step *before* doing it (after the observation,
        before the report). A crash from here on is recovered by reporting the stored result."""
        with self._tx() as db:
            self._unreported_post_tap(db, attempt_id)
            db.execute(
                "UPDATE post_tap SET confirm_step=?, updated_at=? WHERE attempt_id=?", (step, _now(), attempt_id)
            )
        self._committed("CONFIRM_STEP")

    def record_confirmation(
        self, attempt_id: str, order_sn: str | None, asset_id: str | None, *, read: bool = True
    ) -> None:
        """The confirmation's result, journaled before the report that carries it (so a re-send
        after a crash carries the same ``order_sn`` under the same key). Kept once written.
        ``confirm_step`` becomes ``DONE`` (the list was read) or ``STOPPED`` (left to a person)."""
        with self._tx() as db:
            self._unreported_post_tap(db, attempt_id)
            db.execute(
                "UPDATE post_tap SET confirm_step=?, order_sn=coalesce(order_sn, ?), "
                "confirm_asset_id=coalesce(confirm_asset_id, ?), updated_at=? WHERE attempt_id=?",
                ("DONE" if read else "STOPPED", order_sn, asset_id, _now(), attempt_id),
            )

    def order_sns_taken(self, attempt_id: str) -> frozenset[str]:
        """Order numbers other attempts on this phone's journal identified as theirs: the
        read-only confirmation of ``attempt_id`` never takes one of them for its own order."""
        rows = self._all("SELECT order_sn FROM post_tap WHERE order_sn IS NOT NULL AND attempt_id <> ?", (attempt_id,))
        return frozenset(str(r[0]) for r in rows)

    def post_tap(self, attempt_id: str) -> dict[str, str | None] | None:
        """The post_tap row as a dict (tests, ``journal`` summary); None when none."""
        row = self._one(
            "SELECT observation_reason, foreground_package, confirm_step, order_sn, "
            "confirm_asset_id FROM post_tap WHERE attempt_id=?",
            (attempt_id,),
        )
        if row is None:
            return None
        return dict(
            zip(
                ("observation_reason", "foreground_package", "confirm_step", "order_sn", "confirm_asset_id"),
                row,
                strict=True,
            )
        )

    def submission(self, attempt_id: str) -> SubmissionRow | None:
        row = self._one(f"SELECT {_SUBMISSION_COLUMNS} WHERE s.attempt_id=?", (attempt_id,))
        return _submission_row(row) if row else None

    def unreported_submissions(self) -> list[SubmissionRow]:
        rows = self._all(
            f"SELECT {_SUBMISSION_COLUMNS} WHERE s.phase != ? ORDER BY s.updated_at", (Phase.RESULT_REPORTED,)
        )
        return [_submission_row(r) for r in rows]

    # --- fails (intent before effect, like the submit tap) ------------------------------------
    def record_fail_intent(
        self, attempt_id: str, reason_code: str, summary: str, evidence_asset_id: str | None
    ) -> tuple[str, str, str | None]:
        """Store the ``fail`` to send (state FAIL_PENDING) before sending it, and return what is
        stored: a fail decided earlier is kept, so a re-send after a crash or a transport error
        carries exactly the same payload under the same key."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO pending_fails (attempt_id, reason_code, summary, evidence_asset_id, created_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(attempt_id) DO NOTHING",
                (attempt_id, reason_code, summary, evidence_asset_id, _now()),
            )
            current, _ = self._claim_state(db, attempt_id)
            # a claim past the fence or settled keeps its state: the fail is stored, nothing else moves
            if current in (ClaimState.ACTIVE, ClaimState.FAIL_PENDING):
                self._set_claim_state(db, attempt_id, current, ClaimState.FAIL_PENDING, reason_code)
            row = db.execute(
                "SELECT reason_code, summary, evidence_asset_id FROM pending_fails WHERE attempt_id=?", (attempt_id,)
            ).fetchone()
        return str(row[0]), str(row[1]), row[2]

    def pending_fail(self, attempt_id: str) -> tuple[str, str, str | None] | None:
        row = self._one(
            "SELECT reason_code, summary, evidence_asset_id FROM pending_fails WHERE attempt_id=?", (attempt_id,)
        )
        return (str(row[0]), str(row[1]), row[2]) if row else None

    def recovery_pending(self) -> bool:
        """Does the journal still owe the server something (an unreported submission, an attempt
        left open before the fence, an undelivered fail)? The runner claims nothing until not."""
        row = self._one(
            "SELECT (SELECT count(*) FROM submissions WHERE phase != ?) + "
            "(SELECT count(*) FROM claims WHERE state IN (?, ?))",
            (Phase.RESULT_REPORTED, ClaimState.ACTIVE, ClaimState.FAIL_PENDING),
        )
        return bool(row and row[0])

    # --- holds ------------------------------------------------------------------------------
    def set_hold(self, reason: str) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO meta (name, value) VALUES ('hold', ?) "
                "ON CONFLICT(name) DO UPDATE SET value=excluded.value",
                (reason,),
            )
            db.execute("DELETE FROM meta WHERE name = 'hold_attempt'")  # not set after one attempt

    def clear_hold(self) -> None:
        """A person handled the phone: drop the hold (and the attempt it was set on) and reset the streak
        counters."""
        with self._tx() as db:
            db.execute("DELETE FROM meta WHERE name IN ('hold', 'hold_attempt', 'streaks')")

    def streaks(self) -> tuple[int, int]:
        """``(crashes, failures)``: the hold policy's consecutive counters (0, 0 when none)."""
        row = self._one("SELECT value FROM meta WHERE name='streaks'", ())
        data = json.loads(row[0]) if row else {}
        return int(data.get("crashes", 0)), int(data.get("failures", 0))

    def settle_attempt(self, attempt_id: str, decide: Callable[[int, int], tuple[int, int, str | None]]) -> str | None:
        """Count how ``attempt_id`` ended, once: ``decide(crashes, failures)`` returns the new counters
        and the hold to set (or None). Counters and hold are written in one transaction; an attempt
        already counted (e.g. a crash noticed on two restarts in a row) changes nothing. Returns the
        hold in effect when this call decided one (an earlier hold is kept and returned), else None."""
        with self._tx() as db:
            row = db.execute("SELECT value FROM meta WHERE name='streaks'").fetchone()
            data = json.loads(row[0]) if row else {}
            if data.get("last_attempt") == attempt_id:
                return None
            crashes, failures, hold = decide(int(data.get("crashes", 0)), int(data.get("failures", 0)))
            value = json.dumps({"crashes": crashes, "failures": failures, "last_attempt": attempt_id})
            db.execute(
                "INSERT INTO meta (name, value) VALUES ('streaks', ?) "
                "ON CONFLICT(name) DO UPDATE SET value=excluded.value",
                (value,),
            )
            if hold is None:
                return None
            # An earlier hold (e.g. a refused fail) stays: it is what a person must see first.
            added = db.execute(
                "INSERT INTO meta (name, value) VALUES ('hold', ?) ON CONFLICT(name) DO NOTHING", (hold,)
            ).rowcount
            if added:
                # the attempt this hold was set on: the server shows its task and failure screenshot
                db.execute(
                    "INSERT INTO meta (name, value) VALUES ('hold_attempt', ?) "
                    "ON CONFLICT(name) DO UPDATE SET value=excluded.value",
                    (attempt_id,),
                )
            return str(db.execute("SELECT value FROM meta WHERE name='hold'").fetchone()[0])

    def hold(self) -> str | None:
        row = self._one("SELECT value FROM meta WHERE name='hold'", ())
        return str(row[0]) if row else None

    def hold_attempt(self) -> str | None:
        """The attempt the hold was set on, when the hold policy set it after an attempt (else None)."""
        row = self._one("SELECT value FROM meta WHERE name='hold_attempt'", ())
        return str(row[0]) if row else None

    def summary(self) -> dict[str, Any]:
        """Local state for ``cmbuyer-agent journal`` (no tokens)."""
        return {
            "path": str(self.path),
            "hold": self.hold(),
            "streaks": dict(zip(("crashes", "failures"), self.streaks(), strict=True)),
            "claims": [
                {
                    "attempt_id": c.attempt_id,
                    "task_id": c.task_id,
                    "state": c.state,
                    "reason": c.reason,
                    "lease_expires_at": c.lease_expires_at,
                }
                for c in self.claims()
            ],
            "submissions": [
                {
                    "attempt_id": s.attempt_id,
                    "submission_id": s.submission_id,
                    "phase": s.phase,
                    "observation": s.observation,
                    "observation_reason": s.observation_reason,
                    "order_sn": s.order_sn,
                }
                for s in (self.submission(c.attempt_id) for c in self.claims())
                if s
            ],
            "pending_keys": [
                {"purpose": p, "scope": s}
                for p, s in self._db.execute("SELECT purpose, scope FROM idem_keys ORDER BY created_at").fetchall()
            ],
        }
