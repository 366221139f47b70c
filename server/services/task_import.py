"""Spreadsheet import of DRAFT tasks (docs/admin.md "Import"): the admin page
``/tasks/import`` and ``cmbuyer-server task import`` both run these steps.

1. :func:`parse` (no database; CPU-bound, run off the event loop): read the file
   (:mod:`cmbuyer.server.sheets.read`), map the header and check every row
   (:mod:`cmbuyer.server.domain.task_import`). Raises FileRefused for a file refused whole.
2. :func:`preview` (a read job): each ok row that repeats a task which is not cancelled — same canonical
   identity, or the same ``create_key`` with the same fields — becomes "已存在（任务 …）"; a ``create_key``
   already used for other fields is a row error.
3. :func:`import_rows` (one write transaction): the preview again, inside the transaction (so two confirms
   of one file, or two people importing the same file, create every task once), then one DRAFT per row
   still new, one ``task.create`` audit row each (detail names the import) and one ``task.import`` audit row
   for the file (its SHA-256, the counts).
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass, replace
from datetime import datetime

from cmbuyer.server.clock import to_wire
from cmbuyer.server.config import Settings
from cmbuyer.server.domain.states import TaskState
from cmbuyer.server.domain.task_fields import TaskFields
from cmbuyer.server.domain.task_import import RowCheck, check_rows, map_header
from cmbuyer.server.sheets.read import read_sheet
from cmbuyer.server.store import tasks as task_store
from cmbuyer.server.tx import audit as audit_tx
from cmbuyer.server.tx import drafts
from cmbuyer.server.tx.common import Actor, new_id

OK, EXISTS, ERROR = "ok", "exists", "error"


@dataclass(frozen=True)
class PreviewRow:
    """One data row as the person sees it: its line in the file, ``status`` (``ok`` · ``exists`` ·
    ``error``), the Chinese message ("" when ok), the fields when valid, the explicit create key, and the
    existing task's id for ``exists``."""

    line: int
    status: str
    message: str
    fields: TaskFields | None
    create_key: str | None
    task_id: str | None = None
    label: str = ""  # a refused row's title cell as typed


@dataclass(frozen=True)
class Parsed:
    """A parsed file: ``kind`` (xlsx/csv), the SHA-256 of its bytes, the ignored header names and the rows."""

    kind: str
    sha256: str
    unknown_columns: tuple[str, ...]
    rows: tuple[PreviewRow, ...]

    def count(self, status: str) -> int:
        """How many rows have ``status``."""
        return sum(1 for r in self.rows if r.status == status)


def _row(check: RowCheck) -> PreviewRow:
    if check.fields is None:
        return PreviewRow(check.line, ERROR, check.error or "", None, None, label=check.label)
    return PreviewRow(check.line, OK, "", check.fields, check.create_key)


def parse(data: bytes, settings: Settings) -> Parsed:
    """Read and check ``data`` (no database). Raises FileRefused (a ValidationFailed) for a refused file."""
    sheet = read_sheet(data, max_rows=settings.import_max_rows, max_bytes=settings.import_max_bytes)
    header = map_header(sheet.header)
    checks = check_rows(sheet.rows, header, max_quantity=settings.max_quantity, max_price=settings.max_total_price)
    return Parsed(sheet.kind, hashlib.sha256(data).hexdigest(), header.unknown, tuple(_row(c) for c in checks))


def preview(conn: sqlite3.Connection, parsed: Parsed) -> Parsed:
    """``parsed`` with the rows that repeat an existing task marked (see the module docstring)."""
    candidates = [r.fields.goods_id for r in parsed.rows if r.status == OK and r.fields is not None]
    live: dict[tuple[str, str, int, str], str] = {}
    for task in task_store.live_with_goods(conn, candidates, TaskState.CANCELLED):
        identity = (task.goods_id, task.sku_options, task.quantity, task.max_total_price)
        live.setdefault(identity, task.id)
    rows: list[PreviewRow] = []
    for row in parsed.rows:
        fields = row.fields
        if row.status == OK and fields is not None:
            if row.create_key is not None:
                row = _by_key(conn, row)
            else:
                existing = live.get(fields.identity())
                if existing is not None:
                    row = replace(row, status=EXISTS, message=f"已存在（任务 {existing}）", task_id=existing)
        rows.append(row)
    return replace(parsed, rows=tuple(rows))


def _by_key(conn: sqlite3.Connection, row: PreviewRow) -> PreviewRow:
    assert row.fields is not None and row.create_key is not None
    task = task_store.by_create_key(conn, row.create_key)
    if task is None:
        return row
    same = (task.title, task.product_url, task.sku_options, task.quantity, task.max_total_price) == (
        row.fields.title,
        row.fields.product_url,
        row.fields.sku_options,
        row.fields.quantity,
        row.fields.max_total_price,
    )
    if not same:
        return replace(row, status=ERROR, message="创建键：已用于另一个任务")
    return replace(row, status=EXISTS, message=f"已存在（任务 {task.id}）", task_id=task.id)


@dataclass(frozen=True)
class ImportResult:
    """What an import did: its id, the rows as finally judged (``ok`` rows now carry their new task id)."""

    import_id: str
    rows: tuple[PreviewRow, ...]

    def count(self, status: str) -> int:
        """How many rows have ``status``."""
        return sum(1 for r in self.rows if r.status == status)


def import_rows(
    conn: sqlite3.Connection, parsed: Parsed, actor: Actor, now: datetime, *, dry_run: bool = False
) -> ImportResult:
    """Create a DRAFT for every row still new (one write transaction; see the module docstring). With
    ``dry_run`` nothing is written and the answer is the preview."""
    judged = preview(conn, parsed)
    import_id = new_id()
    if dry_run:
        return ImportResult(import_id, judged.rows)
    out: list[PreviewRow] = []
    for row in judged.rows:
        if row.status == OK and row.fields is not None:
            task, _ = drafts.create_draft(
                conn,
                row.create_key or new_id(),
                row.fields,
                actor,
                now,
                detail={"import_id": import_id, "line": row.line},
            )
            row = replace(row, task_id=task.id)
        out.append(row)
    created = sum(1 for r in out if r.status == OK)
    audit_tx.record(
        conn,
        actor,
        "task.import",
        "import",
        import_id,
        at=to_wire(now),
        detail={
            "file_kind": judged.kind,
            "file_sha256": judged.sha256,
            "rows": len(out),
            "created": created,
            "existing": sum(1 for r in out if r.status == EXISTS),
            "refused": sum(1 for r in out if r.status == ERROR),
            "refused_lines": [r.line for r in out if r.status == ERROR][:100],
        },
    )
    return ImportResult(import_id, tuple(out))
