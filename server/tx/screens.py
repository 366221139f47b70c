"""The answer to an administrator's 查看当前屏幕, shared by the two ways a phone answers it: the
screenshot upload (``services/device_screen.py``) and, when another app was in front, the heartbeat's
``screen`` field (``services/heartbeat.py``)."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass

from cmbuyer.server.domain.errors import InvalidTransition, ValidationFailed
from cmbuyer.server.store import device_screens
from cmbuyer.server.store import devices as device_store
from cmbuyer.server.store.device_screens import Screen
from cmbuyer.server.tx import audit as audit_tx
from cmbuyer.server.tx.common import Actor, new_id

_PACKAGE = re.compile(r"[A-Za-z0-9._]{1,200}", re.ASCII)


@dataclass(frozen=True)
class Image:
    """A stored screenshot: its SHA-256 (the file is already in the evidence store), size and dimensions."""

    sha256: str
    byte_size: int
    width: int
    height: int


def record_answer(
    conn: sqlite3.Connection, device_id: str, request_id: str, *, image: Image | None, package: str | None, at: str
) -> tuple[Screen, bool]:
    """Store the device's answer to its pending request ``request_id``: an ``image`` or the ``package`` that was
    in front. Returns ``(screen, first)``; an answer already stored for this request is returned again with
    ``first=False`` when it is the same (a retry), nothing written.

    Raises ValidationFailed for a package that is not an Android package name, InvalidTransition (409
    ``invalid_state``) when ``request_id`` is not the device's pending request or was answered differently."""
    if package is not None and _PACKAGE.fullmatch(package) is None:
        raise ValidationFailed("foreground_package", "").because("package_name")
    stored = device_screens.by_request(conn, request_id)
    if stored is not None:
        same = (
            stored.device_id == device_id
            and stored.foreground_package == package
            and stored.sha256 == (image.sha256 if image else None)
        )
        if not same:
            raise InvalidTransition().because("screen_answered")
        return stored, False
    if not device_store.answer_screen(conn, device_id, request_id):
        raise InvalidTransition().because("screen_not_pending")
    screen = Screen(
        id=new_id(),
        device_id=device_id,
        request_id=request_id,
        sha256=image.sha256 if image else None,
        byte_size=image.byte_size if image else None,
        width=image.width if image else None,
        height=image.height if image else None,
        foreground_package=None if image else package,
        created_at=at,
    )
    device_screens.insert(conn, screen)
    audit_tx.record(
        conn,
        Actor("device", device_id),
        "device.screen",
        "device",
        device_id,
        at=at,
        detail={"screen_id": screen.id, "request_id": request_id, "foreground_package": screen.foreground_package},
    )
    return screen, True
