"""What the agent's log lines say about the work in hand: in JSON mode (``run --json-logs``)
every line carries ``task_id`` and ``attempt_id`` while a claim is worked on, and ``step`` and
``reason_code`` on the lines of a flow step (the same step name and reason code as its event on the
server, docs/agent.md "Reason codes"). Text lines stay short and carry none of it.

Per thread: the runner and its flow run on one thread; the lease keeper and the BUSY heartbeat have their
own and log without a claim. Nothing here is ever a token: only ids, step names and reason codes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_local = threading.local()


def current() -> dict[str, str]:
    """The fields to add to a JSON log line on this thread (a copy; empty outside a claim)."""
    return dict(getattr(_local, "fields", {}))


@contextmanager
def claim(task_id: str, attempt_id: str) -> Iterator[None]:
    """While inside: the thread's lines carry ``task_id`` and ``attempt_id``."""
    before = current()
    _local.fields = {**before, "task_id": task_id, "attempt_id": attempt_id}
    try:
        yield
    finally:
        _local.fields = before


@contextmanager
def step(name: str | None, reason_code: str | None = None) -> Iterator[None]:
    """While inside: the thread's lines carry ``step`` and ``reason_code`` (each when given)."""
    before = current()
    extra = {k: v for k, v in (("step", name), ("reason_code", reason_code)) if v}
    _local.fields = {**before, **extra}
    try:
        yield
    finally:
        _local.fields = before
