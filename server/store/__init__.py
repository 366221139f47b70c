"""All SQL lives here, plain functions over a ``sqlite3.Connection``.

- One module per aggregate (``tasks``, ``authorizations``, ``attempts``, ``submissions``, ``devices``,
  ``supervision``, ``evidence``, ``events``, …): its writes and the lookups the write paths need. A
  state column changes only through the module's compare-and-set ``set_state``, which checks the
  ``(expected, new)`` pair against the transition tables (server/domain/states.py) before any SQL runs
  and reports whether a row changed (docs/state-machines.md; tests/server/store/test_state_literals.py).
  The statement itself is built once, by ``_sql.compare_and_set``; ``_sql`` also holds the shared row
  mapping (``Table``) and the "one row or None" lookups.
- ``queries/``: read models behind pages, reports and checks; they never write.

Functions are synchronous and run on a connection thread (see server/db.py); rows come back as
frozen dataclasses or plain dicts. Nothing here decides business rules — that is server/domain — and
nothing here opens transactions: the caller (a service job) is already inside one.
"""
