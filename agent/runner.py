"""Daemon loop (design §7.1): recovery → heartbeat → claim-next → flow, one phone per process.

SIGTERM/SIGINT: the first signal asks the flow to stop after the current step (the flow checks
between steps; between the fence request and the reported result it finishes — never stops between
permit and tap); a second signal exits immediately unless inside that window, where it exits right
after the result is journaled.
"""

from __future__ import annotations

import logging
import signal
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

from cmbuyer.agent.client import HttpDeviceApi
from cmbuyer.agent.errors import AgentError, AppVersionNotAllowed, ClaimRequiresManual, PackError
from cmbuyer.agent.flow import PurchaseFlow
from cmbuyer.agent.journal import Journal
from cmbuyer.agent.lease import LeaseKeeper
from cmbuyer.agent.model import Session
from cmbuyer.agent.phone.adapter import PhoneAdapter
from cmbuyer.agent.recovery import recover
from cmbuyer.agent.screens.pack import Pack, pack_for_version

log = logging.getLogger(__name__)


class StopNow(BaseException):
    """Second signal outside the critical window."""


@dataclass
class RunnerConfig:
    serial: str
    poll_seconds: float = 5.0
    once: bool = False  # run at most one task (tests, manual runs)


class Runner:
    def __init__(self, cfg: RunnerConfig, phone: PhoneAdapter, api: HttpDeviceApi, journal: Journal,
                 progress: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.phone = phone
        self.api = api
        self.journal = journal
        self.progress = progress
        self.stop = threading.Event()
        self.session = Session(str(uuid.uuid4()))
        self._flow: PurchaseFlow | None = None
        self._signals = 0

    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        self.stop.set()
        if self._signals >= 2:
            flow = self._flow
            if flow is not None and flow.in_critical_section.is_set():
                self.progress("second signal inside the submit window: exiting right after it")
                return
            raise StopNow()
        self.progress("stop requested: finishing the current step")

    def _pack(self) -> tuple[Pack | None, str, str | None, int | None]:
        version = self.phone.app_version()
        if version is None:
            return None, "APP_MISSING", None, None
        try:
            return pack_for_version(version.name, version.code), "READY", version.name, version.code
        except PackError:
            return None, "NO_PACK", version.name, version.code

    def run(self) -> int:
        for note in recover(self.journal, self.api):
            self.progress(f"recovery: {note}")
        android = self.phone.android_release()
        while not self.stop.is_set():
            pack, state, vname, vcode = self._pack()
            hold = self.journal.hold()
            if hold:
                state = "NEEDS_PERSON"
            hb = self.api.heartbeat(adb_serial=self.cfg.serial, android_release=android,
                                    pdd_version=vname, pdd_version_code=vcode, state=state)
            interval = float(hb.get("heartbeat_interval_seconds", self.cfg.poll_seconds))
            if not hb["app_version_allowed"]:
                self.progress("server does not allow this app version: not claiming")
            elif pack is None:
                self.progress(f"no selector pack for app version {vname} ({vcode}): not claiming")
            else:
                ran = self._claim_and_run(pack)
                if ran and self.cfg.once:
                    return 0
            if self.cfg.once and (pack is None or not hb["app_version_allowed"]):
                return 3
            self.stop.wait(min(interval, self.cfg.poll_seconds))
        return 0

    def _claim_and_run(self, pack: Pack) -> bool:
        try:
            purchase = self.api.claim_next(self.session)
        except ClaimRequiresManual:
            self.progress("server: claim requires a person (claim_requires_manual)")
            return False
        except AppVersionNotAllowed:
            self.progress("server: app version not allowed")
            return False
        except AgentError as exc:
            self.progress(f"claim-next failed: {exc.reason_code}")
            return False
        if purchase is None:
            return False
        c = purchase.claim
        t = purchase.task
        self.journal.record_claim(
            attempt_id=c.attempt_id, task_id=c.task_id, task_version=c.task_version,
            authorization_id=c.authorization_id, claim_generation=c.claim_generation,
            claim_token=c.claim_token, session_id=c.session_id, lease_expires_at=c.lease_expires_at,
            authorization_expires_at=c.authorization_expires_at,
            task={"goods_id": t.goods_id, "sku_color": t.sku_color, "sku_size": t.sku_size,
                  "quantity": t.quantity, "max_total_price": str(t.max_total_price)})
        self.api.forget_claim_request(self.session)
        self.progress(f"claimed task {t.id} (attempt {c.attempt_id})")
        lease = LeaseKeeper(self.api, c, purchase.server_now,
                            on_renewed=lambda cl: self.journal.update_lease(cl.attempt_id,
                                                                             cl.lease_expires_at)).start()
        flow = PurchaseFlow(phone=self.phone, pack=pack, sink=self.api, journal=self.journal,
                            stop=self.stop, lease=lease, progress=self.progress)
        self._flow = flow
        try:
            result = flow.run(purchase)
        finally:
            lease.stop()
            self._flow = None
        self.progress(f"task {t.id}: {result.outcome} {result.reason_code or ''}".rstrip())
        if self._signals >= 2:
            raise StopNow()
        return True
