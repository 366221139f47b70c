"""Helpers for tests (tests/phonesim, tests/agent, tests/e2e) and the demo.

adbutils creates its module-level client ``adbutils.adb`` at import time from
``ANDROID_ADB_SERVER_PORT``, and uiautomator2's ``connect(serial)`` uses that global. Setting
the environment variable after import is therefore not enough: :func:`adb_env` (and the
fixtures) also swap ``adbutils.adb`` for a client on the simulator's port.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .process import SimProcess
from .scenario import Scenario
from .server import PhoneSim

ENV_PORT = "ANDROID_ADB_SERVER_PORT"
ENV_HOST = "ANDROID_ADB_SERVER_HOST"


@contextmanager
def adb_env(port: int, host: str = "127.0.0.1") -> Iterator[None]:
    """Point adbutils/uiautomator2 at ``host:port`` for the duration (env vars + ``adbutils.adb``)."""
    import adbutils

    saved_env = {k: os.environ.get(k) for k in (ENV_PORT, ENV_HOST)}
    saved_adb, saved_device = adbutils.adb, adbutils.device
    os.environ[ENV_PORT] = str(port)
    os.environ[ENV_HOST] = host
    adbutils.adb = adbutils.AdbClient(host=host, port=port)
    adbutils.device = adbutils.adb.device
    try:
        yield
    finally:
        adbutils.adb, adbutils.device = saved_adb, saved_device
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def patch_adb(monkeypatch: Any, port: int, host: str = "127.0.0.1") -> None:
    """The pytest ``monkeypatch`` flavour of :func:`adb_env` (undone at test teardown)."""
    import adbutils

    monkeypatch.setenv(ENV_PORT, str(port))
    monkeypatch.setenv(ENV_HOST, host)
    client = adbutils.AdbClient(host=host, port=port)
    monkeypatch.setattr(adbutils, "adb", client)
    monkeypatch.setattr(adbutils, "device", client.device)


@contextmanager
def _serving(sim: PhoneSim | SimProcess, set_env: bool) -> Iterator[None]:
    """Start ``sim`` (in-process or subprocess), with ``set_env`` point adbutils at its port while
    the block runs (:func:`adb_env`), and stop it on exit, whether the block raised or not."""
    port = sim.start()
    try:
        if set_env:
            with adb_env(port, sim.host):
                yield
        else:
            yield
    finally:
        sim.stop()


@contextmanager
def running_sim(
    scenario: Scenario | dict[str, Any] | str | Path | None = None,
    serials: list[str] | tuple[str, ...] = ("sim-1",),
    journal_path: str | Path | None = None,
    set_env: bool = True,
    **options: Any,
) -> Iterator[PhoneSim]:
    """An in-process simulator on a free loopback port, adbutils pointed at it, stopped on exit.
    ``options`` go to :class:`PhoneSim` (``session=DIR``, ``record_session=DIR``, ``report_path=``)."""
    sim = PhoneSim(scenario, serials=serials, journal_path=journal_path, **options)
    with _serving(sim, set_env):
        yield sim


@contextmanager
def running_sim_process(
    scenario: str | Path | dict[str, Any] | None = None,
    serials: list[str] | tuple[str, ...] = ("sim-1",),
    journal_path: str | Path | None = None,
    set_env: bool = False,
    extra_args: list[str] | None = None,
) -> Iterator[SimProcess]:
    """The simulator as a subprocess (``python -m cmbuyer.phonesim.cli``); SIGTERM on exit."""
    proc = SimProcess(scenario, serials=serials, journal_path=journal_path, extra_args=extra_args)
    with _serving(proc, set_env):
        yield proc


@contextmanager
def adbutils_leaks_ignored() -> Iterator[None]:
    """Collect the sockets adbutils 2.12 leaks when a request fails, without ResourceWarnings.

    ``BaseDevice.open_transport`` raises on ``FAIL`` (or on a dropped link) before anything
    closes its connection, so the socket is only closed by the garbage collector, which emits
    ``ResourceWarning: unclosed socket``; with pytest's ``filterwarnings = error`` that fails an
    unrelated later test. Wrap code that expects adb failures in this context manager.
    """
    import gc
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            yield
        finally:
            gc.collect()
