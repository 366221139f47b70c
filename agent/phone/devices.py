"""The two device objects under the phone adapter, named by what the agent calls on them — and nothing more.

:class:`PhoneAdapter <cmbuyer.agent.phone.adapter.PhoneAdapter>` holds an adbutils device (``adbutils.AdbDevice``:
shell commands, among them the one submit tap) and a uiautomator2 device (``uiautomator2.Device``: hierarchy
dumps, screenshots, device info). Both libraries ship no type information (pyproject's mypy overrides), so
mypy sees their objects as ``Any`` and cannot check them against these protocols; what each side proves:

- ``mypy --strict`` (``make lint``): the adapter uses only the members named here (its fields are typed with
  these protocols, so any other call on a device fails the type check);
- tests/agent/phone/test_devices.py: the real ``adbutils.AdbDevice`` and ``uiautomator2.Device`` classes and
  the tests' stand-ins (tests/agent/simphone.py, the shell recorder) have every member, and accept the
  calls exactly as the adapter makes them (:data:`ADB_CALLS`, :data:`U2_CALLS`).

Parameters the adapter passes by position are positional-only here, so an implementation may name them as it
likes (adbutils says ``cmdargs``, the simulator ``cmd``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from PIL.Image import Image


class AdbDevice(Protocol):
    """adbutils' device, as the adapter uses it."""

    def shell(self, cmdargs: list[str], /, *, timeout: float) -> object:
        """Run ``cmdargs`` on the phone (``adb shell``) within ``timeout`` seconds; the output (the adapter
        reads it as text) or, for the submit tap, nothing read."""
        ...


class JsonRpc(Protocol):
    """uiautomator2's JSON-RPC proxy (``device.jsonrpc``), the one method the adapter calls on it."""

    def dumpWindowHierarchy(self, compressed: bool, max_depth: int, /) -> str | None:  # the RPC method name
        """The window hierarchy XML (``compressed`` False: every node; nodes down to ``max_depth``)."""
        ...


class U2Device(Protocol):
    """uiautomator2's device, as the adapter uses it."""

    @property
    def jsonrpc(self) -> JsonRpc:
        """The JSON-RPC proxy of the uiautomator2 server on the phone."""
        ...

    @property
    def info(self) -> object:
        """Device info (a dict with ``screenOn`` …; the adapter keeps it only when it is a dict)."""
        ...

    def screenshot(self) -> Image:
        """The screen now, as a Pillow image."""
        ...


# How the adapter calls each member: (member, positional arguments, keyword arguments); None for a property.
# tests/agent/phone/test_devices.py binds these to the real libraries' signatures and to the tests' fakes.
ADB_CALLS: tuple[tuple[str, tuple[object, ...] | None, dict[str, object]], ...] = (
    ("shell", (["getprop", "ro.build.version.release"],), {"timeout": 10.0}),
)
U2_CALLS: tuple[tuple[str, tuple[object, ...] | None, dict[str, object]], ...] = (
    ("jsonrpc", None, {}),
    ("info", None, {}),
    ("screenshot", (), {}),
)
