"""PhoneSim: several simulated phones behind one adb server, run in a background thread.

    sim = PhoneSim(scenario="my.yaml", serials=["sim-1", "sim-2"])
    port = sim.start()                 # 0 = pick a free loopback port
    os.environ["ANDROID_ADB_SERVER_PORT"] = str(port)
    ...uiautomator2.connect("sim-1")...
    sim.phone("sim-1").inject("empty_dump", times=3)
    sim.phone("sim-1").journal.assert_single_submit_tap()
    sim.stop()

Stopping closes every client connection and joins every thread it started.
"""

from __future__ import annotations

import itertools
import socket
import threading
from pathlib import Path
from typing import Any

from .adb import AdbServer, close_quietly
from .journal import Journal, JournalSink
from .phone import Phone
from .scenario import Scenario, load_scenario


class PhoneSim:
    """The simulator. ``scenario``: dict, file path, :class:`Scenario` or None (built-in default).

    ``journal_path`` additionally appends every journal entry of every phone to a JSON-lines file.
    """

    def __init__(self, scenario: Scenario | dict[str, Any] | str | Path | None = None,
                 serials: list[str] | tuple[str, ...] = ("sim-1",), host: str = "127.0.0.1", port: int = 0,
                 journal_path: str | Path | None = None):
        self.scenario = load_scenario(scenario)
        self.host = host
        self._want_port = port
        self._sink = JournalSink(journal_path) if journal_path else None
        self._stopping = threading.Event()
        self._tids = itertools.count(1)
        self.phones: dict[str, Phone] = {}
        self._conns: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._conn_lock = threading.Lock()
        self._server: AdbServer | None = None
        for serial in serials:
            self.add_phone(serial)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> int:
        """Bind and serve in a background thread; returns the port."""
        if self._server is None:
            self._server = AdbServer(self, self.host, self._want_port)
            self._server.start()
        return self._server.port

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("PhoneSim not started")
        return self._server.port

    def env(self) -> dict[str, str]:
        """Environment variables that point adbutils/uiautomator2 at this simulator."""
        return {"ANDROID_ADB_SERVER_HOST": self.host, "ANDROID_ADB_SERVER_PORT": str(self.port)}

    def stop(self) -> None:
        """Stop serving, drop every connection, wake sleeping phones, join all threads. Idempotent."""
        self._stopping.set()
        if self._server is not None:
            self._server.stop()
        with self._conn_lock:
            conns, threads = list(self._conns), list(self._threads)
        for sock in conns:
            close_quietly(sock)
        for t in threads:
            if t is not threading.current_thread():
                t.join(timeout=5)
        self._server = None
        if self._sink is not None:
            self._sink.close()

    def __enter__(self) -> PhoneSim:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ phones
    def add_phone(self, serial: str, scenario: Scenario | dict[str, Any] | str | Path | None = None) -> Phone:
        """Add a phone (optionally with its own scenario); it shows up in ``host:devices`` at once."""
        if not serial or any(c.isspace() for c in serial):
            raise ValueError(f"bad serial {serial!r}")
        scen = load_scenario(scenario) if scenario is not None else self.scenario
        phone = Phone(scen.for_phone(serial), next(self._tids), self._stopping, self._sink)
        self.phones[serial] = phone
        return phone

    def remove_phone(self, serial: str) -> None:
        """Unplug a phone: it disappears from ``host:devices``; its requests then FAIL."""
        self.phones.pop(serial, None)

    def phone(self, serial: str = "sim-1") -> Phone:
        return self.phones[serial]

    def journal(self, serial: str = "sim-1") -> Journal:
        return self.phones[serial].journal

    # ------------------------------------------------------------------ used by the adb handlers
    def _track(self, sock: socket.socket) -> None:
        with self._conn_lock:
            self._conns.add(sock)
            self._threads.add(threading.current_thread())
        if self._stopping.is_set():
            close_quietly(sock)

    def _untrack(self, sock: socket.socket) -> None:
        with self._conn_lock:
            self._conns.discard(sock)
            self._threads.discard(threading.current_thread())
