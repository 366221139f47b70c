"""A test-only bridge that lets today's code (SKU options, migration 0011) write a database whose schema is
older than 0011 (colour/size columns, NOT NULL colour): the migration attack tests drive today's API on a
0004/0005 database.

:func:`bridge_0010` adds the option column to each folded table (filled from the old columns) and a
``BEFORE INSERT`` trigger that re-inserts a row written without the old columns with them derived from the
options, then drops the original (``RAISE(IGNORE)``: the NOT NULL check never sees it). Today's code writes
only colour/size-shaped tasks here, so the derived values are exact. :func:`unbridge_0010` takes everything
off again, so a migration under test still runs on exactly its old schema.
"""

from __future__ import annotations

import sqlite3

# table → (today's options column, the old colour column, the old size column)
FOLDED = {
    "tasks": ("sku_options", "sku_color", "sku_size"),
    "authorizations": ("sku_options", "sku_color", "sku_size"),
    "order_submissions": ("selected_options", "selected_color", "selected_size"),
}


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info('{table}')")]


def bridge_0010(conn: sqlite3.Connection) -> None:
    """Bridge every folded table that still has its old columns (idempotent)."""
    for table, (options, color, size) in FOLDED.items():
        columns = _columns(conn, table)
        if color not in columns:
            continue
        if options not in columns:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {options} TEXT")
            columns.append(options)
        conn.execute(
            f"UPDATE {table} SET {options} = CASE WHEN {size} IS NULL THEN json_array(json_array('颜色', {color}))"
            f" ELSE json_array(json_array('颜色', {color}), json_array('尺码', {size})) END WHERE {options} IS NULL"
        )
        derived = {color: f"json_extract(new.{options}, '$[0][1]')", size: f"json_extract(new.{options}, '$[1][1]')"}
        values = ", ".join(derived.get(c, f"new.{c}") for c in columns)
        conn.execute(
            f"CREATE TRIGGER IF NOT EXISTS bridge_0010_{table} BEFORE INSERT ON {table} WHEN new.{color} IS NULL"
            f" BEGIN INSERT INTO {table} ({', '.join(columns)}) VALUES ({values}); SELECT RAISE(IGNORE); END"
        )


def unbridge_0010(conn: sqlite3.Connection) -> None:
    """Take the bridge off: triggers and added option columns."""
    for table, (options, color, _size) in FOLDED.items():
        conn.execute(f"DROP TRIGGER IF EXISTS bridge_0010_{table}")
        columns = _columns(conn, table)
        if color in columns and options in columns:
            conn.execute(f"ALTER TABLE {table} DROP COLUMN {options}")
