"""Numbered plain-SQL migrations (``migrations/NNNN_name.sql``), each applied in one transaction
together with its record (name + SHA-256 checksum) — the sqlite-utils pattern (docs/architecture.md "Server layers").

Start-up refuses a database with pending migrations, with a migration the code does not know
(a newer database), or whose recorded checksum differs from the file (a tampered or edited
migration): see :func:`check_current`.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from dataclasses import dataclass
from importlib import resources

from cmbuyer.server.db import StorageError, run_in_transaction
from cmbuyer.server.domain.errors import CmbuyerError
from cmbuyer.server.store import migrations as store

_NAME = re.compile(r"([0-9]{4})_[a-z0-9_]+\.sql", re.ASCII)


class MigrationError(CmbuyerError):
    """The database and the code disagree about the schema; the message says how (one line)."""


@dataclass(frozen=True)
class Migration:
    """One migration file: ``number`` (1-based, contiguous), ``name`` (file name), SQL and checksum."""

    number: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        """SHA-256 hex of the file's UTF-8 bytes."""
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


def available() -> list[Migration]:
    """The migrations shipped with the code, in order. Raises MigrationError on a gap or bad name."""
    found: list[Migration] = []
    for entry in resources.files("cmbuyer.migrations").iterdir():
        m = _NAME.fullmatch(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    found.sort(key=lambda mig: mig.number)
    for expected, mig in enumerate(found, 1):
        if mig.number != expected:
            raise MigrationError(f"migration numbers must be contiguous; {mig.name} is out of place")
    return found


def split_statements(sql: str) -> list[str]:
    """Split a script into statements with :func:`sqlite3.complete_statement` (trigger-safe).

    ``executescript`` is not used because it COMMITs first, which would break "one migration, one
    transaction".
    """
    statements: list[str] = []
    buffer = ""
    for line in sql.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                statements.append(buffer.strip())
            buffer = ""
    if buffer.strip() and not all(part.strip().startswith("--") or not part.strip() for part in buffer.splitlines()):
        raise MigrationError("migration ends with an incomplete statement")
    return statements


def status(conn: sqlite3.Connection) -> tuple[list[Migration], list[str]]:
    """Return ``(pending, problems)``; problems are one-line descriptions of refusal reasons."""
    code = available()
    applied = store.applied(conn)
    problems: list[str] = []
    by_name = {m.name: m for m in code}
    for name, checksum in applied.items():
        mig = by_name.get(name)
        if mig is None:
            problems.append(f"database has migration {name} that this code does not know (newer database)")
        elif mig.checksum != checksum:
            problems.append(f"migration {name} checksum differs from the applied one (edited or tampered)")
    pending = [m for m in code if m.name not in applied]
    if applied and pending and pending[0].number <= max(by_name[n].number for n in applied if n in by_name):
        problems.append("migrations were applied out of order")
    return pending, problems


def migrate(conn: sqlite3.Connection, applied_at: str) -> list[str]:
    """Apply every pending migration, each in its own BEGIN IMMEDIATE with its record, foreign keys
    enforced by a ``foreign_key_check`` before each COMMIT instead of statement by statement.

    Returns the names applied. Raises MigrationError when :func:`status` reports problems, when SQLite
    fails or a constraint refuses existing rows (``migration NNNN_… failed: …``), or when a migration
    would leave a dangling foreign key; the failing migration leaves nothing behind. The connection has
    ``foreign_keys = ON`` again on return, whatever happened.
    """
    store.ensure_table(conn)
    pending, problems = status(conn)
    if problems:
        raise MigrationError(problems[0])
    done: list[str] = []
    # SQLite's procedure for schema changes (https://sqlite.org/lang_altertable.html, "otheralter"): foreign
    # keys off while a migration rebuilds a table that others refer to (with them on, DROP TABLE would
    # first delete every row and trip the children's references), and PRAGMA foreign_key_check inside the
    # transaction, so a migration that leaves a dangling reference is rolled back, never committed. The
    # pragma is a no-op inside a transaction, hence set around each one.
    store.set_foreign_keys(conn, False)
    try:
        for mig in pending:

            def job(c: sqlite3.Connection, mig: Migration = mig) -> bool:
                # `pending` was read before this transaction took the write lock: another `migrate` may have
                # applied this one meanwhile (a rebuild would run again on the new schema and only then
                # trip over the record), so decide again under the lock.
                if mig.name in store.applied(c):
                    return False
                for statement in split_statements(mig.sql):
                    c.execute(statement)
                dangling = store.foreign_key_problems(c)
                if dangling:
                    where = ", ".join(f"{n} in {child} → {parent}" for (child, parent), n in sorted(dangling.items()))
                    raise MigrationError(
                        f"migration {mig.name} refused: rows with a dangling foreign key ({where}); nothing was applied"
                    )
                store.record(c, mig.name, mig.checksum, applied_at)
                return True

            try:
                applied_now = run_in_transaction(conn, job)
            except StorageError as exc:
                raise MigrationError(f"migration {mig.name} failed: {exc.__cause__ or exc}") from exc
            if applied_now:
                done.append(mig.name)
    finally:
        store.set_foreign_keys(conn, True)
    return done


def check_current(conn: sqlite3.Connection) -> None:
    """Refuse a database that is not exactly at the code's schema (start-up rule, docs/architecture.md "Server
    layers")."""
    store.ensure_table(conn)
    pending, problems = status(conn)
    if problems:
        raise MigrationError(problems[0])
    if pending:
        raise MigrationError(
            f"{len(pending)} pending migration(s), first {pending[0].name}; run `cmbuyer-server migrate`"
        )
