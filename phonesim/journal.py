"""What each simulated phone saw, and assertion helpers over it.

Entries are plain dicts so the same helpers work in-process (``phone.journal.entries()``)
and on a JSON-lines file written by a simulator subprocess (:func:`read_journal`).
Every entry has ``seq`` (per phone, from 1), ``ts`` (Unix seconds), ``serial``, ``kind``.
Kinds: ``tap`` (x, y, via, screen, node, target, role, payment, effect, dropped, applied,
package), ``key``, ``deep_link``, ``swipe`` (points, via, screen, package, list, list_bounds, moved,
effect), ``text``, ``order``, ``fault``, ``dump``, ``screenshot`` (screen, format, package = the
foreground package when it was taken), ``shell``, ``rpc``, ``screen`` (transition).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from cmbuyer.schemas.payment import PAYMENT_WORDS

from .nodes import PDD
from .system_ui import LAUNCHER

Entry = dict[str, Any]


class JournalSink:
    """A JSON-lines file shared by all phones of one simulator; one line per entry, flushed."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._fh: IO[str] | None = self.path.open("a", encoding="utf-8")

    def write(self, entry: Entry) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")
                self._fh.flush()

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


class Journal:
    """Append-only, thread-safe record for one phone."""

    def __init__(self, serial: str, sink: JournalSink | None = None):
        self.serial = serial
        self._sink = sink
        self._lock = threading.Lock()
        self._entries: list[Entry] = []

    def record(self, kind: str, **data: Any) -> Entry:
        with self._lock:
            entry = {
                "seq": len(self._entries) + 1,
                "ts": round(time.time(), 6),
                "serial": self.serial,
                "kind": kind,
                **data,
            }
            self._entries.append(entry)
        if self._sink is not None:
            self._sink.write(entry)
        return entry

    def entries(self, kind: str | None = None) -> list[Entry]:
        """A copy of the entries, optionally of one kind."""
        with self._lock:
            return [dict(e) for e in self._entries if kind is None or e["kind"] == kind]

    # convenience wrappers over the module-level helpers
    def taps(self, role: str | None = None) -> list[Entry]:
        return taps(self.entries(), role=role)

    def order_counts(self) -> dict[str, int]:
        return order_counts(self.entries())

    def assert_single_submit_tap(self, goods_id: str | None = None) -> Entry:
        return assert_single_submit_tap(self.entries(), goods_id=goods_id)

    def assert_no_payment_taps(self) -> None:
        assert_no_payment_taps(self.entries())

    def assert_no_foreign_screenshots(self, app_package: str = PDD) -> None:
        assert_no_foreign_screenshots(self.entries(), app_package=app_package)


def is_payment_text(*texts: str) -> bool:
    """True when any text contains a word of a payment control (:data:`cmbuyer.schemas.payment.PAYMENT_WORDS`)."""
    return any(word in t for t in texts if t for word in PAYMENT_WORDS)


def read_journal(path: str | Path) -> list[Entry]:
    """Entries of a JSON-lines journal written with ``cmbuyer-phonesim --journal FILE``.

    A partially written last line (the simulator was killed mid-write) is ignored.
    """
    out: list[Entry] = []
    for line in Path(path).read_text("utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _pick(entries: Iterable[Entry], serial: str | None) -> list[Entry]:
    return [e for e in entries if serial is None or e.get("serial") == serial]


def taps(entries: Iterable[Entry], role: str | None = None, serial: str | None = None) -> list[Entry]:
    """Tap entries (every path: ``input tap``, RPC ``click``, selector clicks), optionally by role."""
    return [e for e in _pick(entries, serial) if e["kind"] == "tap" and (role is None or e.get("role") == role)]


def submit_taps(entries: Iterable[Entry], goods_id: str | None = None, serial: str | None = None) -> list[Entry]:
    """Taps that landed on a ``提交订单`` control (applied or not)."""
    return [e for e in taps(entries, role="submit", serial=serial) if goods_id is None or e.get("goods_id") == goods_id]


def payment_taps(entries: Iterable[Entry], serial: str | None = None) -> list[Entry]:
    return [e for e in taps(entries, serial=serial) if e.get("payment")]


def orders(entries: Iterable[Entry], serial: str | None = None) -> list[Entry]:
    return [e for e in _pick(entries, serial) if e["kind"] == "order"]


def order_counts(entries: Iterable[Entry], serial: str | None = None) -> dict[str, int]:
    """``{goods_id: number of orders created}`` (pending-payment orders included)."""
    return dict(Counter(e["goods_id"] for e in orders(entries, serial=serial)))


def assert_single_submit_tap(entries: Iterable[Entry], goods_id: str | None = None, serial: str | None = None) -> Entry:
    """Exactly one tap on the submit control (per goods id when given); returns it."""
    found = submit_taps(list(entries), goods_id=goods_id, serial=serial)
    assert len(found) == 1, f"expected exactly one submit tap, got {len(found)}: {found}"
    return found[0]


def assert_no_payment_taps(entries: Iterable[Entry], serial: str | None = None) -> None:
    found = payment_taps(list(entries), serial=serial)
    assert not found, f"taps on payment controls: {found}"


def assert_order_counts(entries: Iterable[Entry], expected: dict[str, int], serial: str | None = None) -> None:
    got = order_counts(list(entries), serial=serial)
    assert got == expected, f"order counts {got} != expected {expected}"


def screenshots(entries: Iterable[Entry], serial: str | None = None) -> list[Entry]:
    """Screenshot entries (``screencap -p`` and RPC ``takeScreenshot``) with their ``package``."""
    return [e for e in _pick(entries, serial) if e["kind"] == "screenshot"]


def foreign_screenshots(entries: Iterable[Entry], app_package: str = PDD, serial: str | None = None) -> list[Entry]:
    """Screenshots taken while another app (e.g. a cashier) was in front (launcher excluded)."""
    return [e for e in screenshots(entries, serial=serial) if e.get("package") not in (app_package, LAUNCHER)]


def assert_no_foreign_screenshots(entries: Iterable[Entry], app_package: str = PDD, serial: str | None = None) -> None:
    """The evidence rules (docs/api.md "POST /api/v1/tasks/{id}/evidence") refuse screenshots of external payment pages:
    none taken while one was in front."""
    found = foreign_screenshots(list(entries), app_package=app_package, serial=serial)
    assert not found, f"screenshots while a foreign app was in front: {found}"


def swipes(entries: Iterable[Entry], list_name: str | None = None, serial: str | None = None) -> list[Entry]:
    """Swipe entries, optionally only those that started inside the option list ``list_name``."""
    return [
        e for e in _pick(entries, serial) if e["kind"] == "swipe" and (list_name is None or e.get("list") == list_name)
    ]
