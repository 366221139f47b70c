"""All SQL lives here: one module per aggregate, plain functions over a ``sqlite3.Connection``.

Functions are synchronous and run on a connection thread (see server/db.py); rows come back as
frozen dataclasses. Nothing here decides business rules — that is server/domain — and nothing here
opens transactions: the caller (a service job) is already inside one.
"""
