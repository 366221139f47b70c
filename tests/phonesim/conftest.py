"""Fixtures for the phone simulator (reusable from tests/agent and tests/e2e via
``cmbuyer.phonesim.testing``; copy these three fixtures or import them in a conftest)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cmbuyer.phonesim import PhoneSim
from cmbuyer.phonesim.testing import patch_adb

PRODUCT_URL = "pinduoduo://com.xunmeng.pinduoduo/goods.html?goods_id={}"
GOODS = "937122477375"


@pytest.fixture
def phonesim_factory(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., PhoneSim]]:
    """``phonesim_factory(scenario=None, serials=("sim-1",))`` → a started PhoneSim that
    adbutils/uiautomator2 talk to (env + ``adbutils.adb`` patched); all stopped at teardown."""
    sims: list[PhoneSim] = []

    def make(scenario: Any = None, serials: tuple[str, ...] = ("sim-1",), **kw: Any) -> PhoneSim:
        sim = PhoneSim(scenario, serials=serials, **kw)
        sims.append(sim)
        patch_adb(monkeypatch, sim.start())
        return sim

    yield make
    for sim in sims:
        sim.stop()


@pytest.fixture
def phonesim(phonesim_factory: Callable[..., PhoneSim]) -> PhoneSim:
    """A started simulator with one phone ``sim-1`` on the built-in scenario."""
    return phonesim_factory()


@pytest.fixture
def u2dev(phonesim: PhoneSim) -> Iterator[Any]:
    """``uiautomator2.connect("sim-1")`` against :func:`phonesim`."""
    import uiautomator2 as u2

    d = u2.connect("sim-1")
    yield d
    d.stop_uiautomator(wait=False)  # close a relaunch stream, if a fault made u2 open one
