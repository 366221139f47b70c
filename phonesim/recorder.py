"""Session recorder: a simulated phone writes every action it applies, and the screen after it,
as a captures directory + ``session.json`` that :mod:`cmbuyer.phonesim.session` plays back.

Attach with ``PhoneSim(..., record_session=DIR)``, ``sim.add_phone(serial, record_session=DIR)`` or
``cmbuyer-phonesim --record-session DIR``. The start capture is the screen when recording begins;
after each applied action (tap, swipe, BACK/HOME, deep link, launch, force-stop; any transport) the
app model's settled screen is captured — a new capture unless it is identical to the current one
(consecutive duplicates are not stored; the step then leads back to the same capture). Captures keep
only the windows of the package in front (no status bar and no launcher — its gesture strip — when an
app is in front) and follow the session contract: ``dump.xml``, ``screenshot.png``, ``meta.json``
(``capture_format`` 1). ``session.json`` is rewritten atomically after every step, so a recording
cut short is still a valid session.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import screens
from .hierarchy import render_xml
from .nodes import Node
from .screenshot import png_bytes, render_image
from .session import SESSION_FILE, SESSION_FORMAT, _same_action

if TYPE_CHECKING:
    from .phone import Phone

log = logging.getLogger(__name__)
CAPTURE_FORMAT = 1


class RecorderError(ValueError):
    """The recording directory cannot be used (not empty, not writable)."""


def _utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SessionRecorder:
    """Records one phone into ``directory`` (created 0700; must not already hold a session or a
    capture). ``conflicts`` lists actions that led elsewhere than a step already recorded for the
    same capture (the first step is kept: playback never has to choose)."""

    def __init__(self, directory: str | Path, phone: Phone):
        self.root = Path(directory)
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            busy = (self.root / SESSION_FILE).exists() or any(p.is_dir() for p in self.root.iterdir())
        except OSError as exc:
            raise RecorderError(f"cannot record into {self.root}: {exc}") from None
        if busy:
            raise RecorderError(f"{self.root} already holds a session or captures: record into an empty directory")
        self.serial = phone.serial
        self.app = {
            "package": phone.cfg.app.package,
            "version_name": phone.cfg.app.version_name,
            "version_code": phone.cfg.app.version_code,
        }
        self.names: list[str] = []
        self.keys: dict[str, str] = {}
        self.steps: list[dict[str, Any]] = []
        self.conflicts: list[dict[str, Any]] = []
        self._closed = False
        self.start = self.current = self._capture(phone, None)
        self._write_session()

    # ---------------------------------------------------------------- called by Phone (under its lock)
    def after_action(self, phone: Phone, action: dict[str, Any]) -> None:
        """Capture the screen after ``action`` and add the step ``current → that capture``."""
        if self._closed:
            return
        try:
            before = self.current
            self.current = self._capture(phone, self.current)
            self._add_step(before, action, self.current)
            self._write_session()
        except OSError as exc:  # the phone keeps working; the session is as complete as the disk allowed
            log.error("session recorder %s: %s", self.root, exc)

    def close(self) -> None:
        """Write session.json a last time; later actions are not recorded. Idempotent."""
        if not self._closed:
            self._write_session()
            self._closed = True

    # ---------------------------------------------------------------- captures
    def _capture(self, phone: Phone, current: str | None) -> str:
        front = phone.app.foreground_package
        kept: list[Node] = []
        dropped: list[Node] = []
        for win in screens.windows(phone.app):  # the settled model screen: no cold-start splash, no fault
            (kept if win.package == front else dropped).append(win)
        xml = render_xml(kept)
        if current is not None and self.keys[current] == xml:
            return current
        name = f"{len(self.names):02d}-{re.sub(r'[^A-Za-z0-9_]+', '-', phone.app.screen).strip('-')}"
        path = self.root / name
        path.mkdir(mode=0o700)
        png = png_bytes(render_image(kept))
        pkg, act = phone.model_focus()
        meta: dict[str, Any] = {
            "capture_format": CAPTURE_FORMAT,
            "label": phone.app.screen,
            "device": phone.serial,
            "captured_at": _utc_now(),
            "app_version_name": phone.cfg.app.version_name,
            "app_version_code": phone.cfg.app.version_code,
            "activity": f"{pkg}/{act}",
            "pack_id": None,
            # the model knows what is on top: its windows are listed topmost first
            "window_z_order": list(range(len(kept))),
            "dump_sha256": hashlib.sha256(xml.encode("utf-8")).hexdigest(),
            "screenshot_sha256": hashlib.sha256(png).hexdigest(),
            "scrubbed": {
                "dropped_packages": sorted({w.package for w in dropped}),
                "dropped_nodes": sum(1 for w in dropped for _ in w.walk()),
                "blanked_rows": 0,
                "blacked_out": [],
            },
        }
        (path / "dump.xml").write_bytes(xml.encode("utf-8"))
        (path / "screenshot.png").write_bytes(png)
        (path / "meta.json").write_text(json.dumps(meta, ensure_ascii=False, indent=2) + "\n", "utf-8")
        self.names.append(name)
        self.keys[name] = xml
        return name

    # ---------------------------------------------------------------- steps
    def _add_step(self, before: str, action: dict[str, Any], after: str) -> None:
        # a deep link works from any screen: recorded from "*" unless that URL already led elsewhere
        sources = ["*", before] if action["kind"] == "open_url" else [before]
        for source in sources:
            known = [s for s in self.steps if s["from"] == source and _same_action(s["action"], action)]
            if not known:
                self.steps.append({"from": source, "action": action, "to": after})
                return
            if known[0]["to"] == after:
                return
        self.conflicts.append({"from": before, "action": action, "to": after})
        log.warning(
            "session recorder: %s on %s led to %s, a recorded step says otherwise (kept the first)",
            action["kind"],
            before,
            after,
        )

    def _write_session(self) -> None:
        data = {"session_format": SESSION_FORMAT, "app": self.app, "start": self.start, "steps": self.steps}
        tmp = self.root / (SESSION_FILE + ".tmp")
        tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", "utf-8")
        os.replace(tmp, self.root / SESSION_FILE)
