"""agent/phone/devices.py: the real adbutils and uiautomator2 device classes and the tests' stand-ins provide
every member of the two protocols, and accept the calls as the adapter makes them (mypy cannot: both
libraries are untyped, so their objects are ``Any`` to it). That the adapter uses nothing else is mypy's part:
its device fields are typed with the protocols (``make lint``)."""

from __future__ import annotations

import inspect
from typing import Any

import adbutils
import pytest
import uiautomator2

from cmbuyer.agent.phone import devices
from tests.agent.screens.test_order_sheet_readers import _ShellRecorder
from tests.agent.simphone import SimPhone


def members(protocol: type) -> set[str]:
    """The names a protocol declares (its public methods and properties)."""
    return {name for name in vars(protocol) if not name.startswith("_")}


def check(cls: type, calls: tuple[tuple[str, tuple[object, ...] | None, dict[str, object]], ...]) -> None:
    """``cls`` has every member of ``calls``: a property where the adapter reads one, else a method whose
    signature binds the adapter's arguments."""
    for name, args, kwargs in calls:
        found = inspect.getattr_static(cls, name)
        if args is None:
            assert isinstance(found, property), f"{cls.__name__}.{name} is not a property"
        else:
            inspect.signature(getattr(cls, name)).bind(object(), *args, **kwargs)  # TypeError when it does not fit


def test_the_call_tables_cover_the_protocols() -> None:
    assert members(devices.AdbDevice) == {name for name, _, _ in devices.ADB_CALLS}
    assert members(devices.U2Device) == {name for name, _, _ in devices.U2_CALLS}
    assert members(devices.JsonRpc) == {"dumpWindowHierarchy"}


@pytest.mark.parametrize("cls", [adbutils.AdbDevice, SimPhone, _ShellRecorder])
def test_adb_devices_fit(cls: type) -> None:
    check(cls, devices.ADB_CALLS)


@pytest.mark.parametrize("cls", [uiautomator2.Device, SimPhone])
def test_uiautomator2_devices_fit(cls: type) -> None:
    check(cls, devices.U2_CALLS)


def test_the_json_rpc_dump_is_sent_as_the_adapter_asks() -> None:
    """uiautomator2's ``jsonrpc`` is a proxy that turns any attribute into a remote call: run it against a
    recording stand-in to see the method and parameters the dump sends (the simulator's fake: its own method)."""
    sent: list[tuple[str, Any]] = []

    class Server:
        def jsonrpc_call(self, method: str, params: Any, timeout: float) -> str:
            sent.append((method, params))
            return "<hierarchy/>"

    proxy = inspect.getattr_static(uiautomator2.Device, "jsonrpc").fget(Server())
    assert proxy.dumpWindowHierarchy(False, 50) == "<hierarchy/>"
    assert sent == [("dumpWindowHierarchy", (False, 50))]
    inspect.signature(SimPhone().jsonrpc.dumpWindowHierarchy).bind(False, 50)
