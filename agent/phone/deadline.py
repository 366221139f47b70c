"""Per-call deadlines for blocking phone calls (uiautomator2's own timeouts are
unreliable — minutes by default — so every call runs in a worker thread we stop waiting for).

A call that overruns raises :class:`PhoneTimeout`; the worker thread is abandoned (daemon) and its
late result is discarded. For the submit tap an overrun means UNKNOWN, never "try again".
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from cmbuyer.agent.errors import PhoneTimeout

T = TypeVar("T")


def call_with_deadline(fn: Callable[[], T], seconds: float, what: str) -> T:
    """Run ``fn()`` in a daemon thread; return its result, re-raise its exception, or raise
    PhoneTimeout(what) after ``seconds``."""
    value: list[T] = []
    error: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            value.append(fn())
        except BaseException as exc:  # re-raised in the caller's thread
            error.append(exc)
        finally:
            done.set()

    worker = threading.Thread(target=run, name=f"phone-call:{what}", daemon=True)
    worker.start()
    if not done.wait(seconds):
        raise PhoneTimeout(f"{what} exceeded {seconds:.1f}s")
    if error:
        raise error[0]
    return value[0]
