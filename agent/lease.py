"""Lease keeper (docs/agent.md "The run loop"): renew on the agent's own monotonic clock.

At claim time we learn ``lease_expires_at`` and ``server_now``; the lease ends, on our monotonic
clock, at ``t0 + (lease_expires_at - server_now)`` where ``t0`` is when the response arrived (a
conservative estimate: the request's travel time only shortens our view). A background thread
renews every ``TTL/3`` (never more often); a renewal that is refused (claim_not_current) or a lease
that runs out marks the lease LOST. The flow asks :meth:`ensure` before the fence: lost, or ending
sooner than ``margin`` seconds → stop before the fence (never tap on a dying lease).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from cmbuyer.agent.errors import AgentError, FlowStop, LeaseLost, ServerRejected
from cmbuyer.agent.model import Claim
from cmbuyer.agent.ports import TaskSource
from cmbuyer.schemas import parse_utc_time

log = logging.getLogger(__name__)


def lease_seconds(lease_expires_at: str, server_now: str) -> float:
    return (parse_utc_time(lease_expires_at) - parse_utc_time(server_now)).total_seconds()


class LeaseKeeper:
    def __init__(
        self,
        source: TaskSource,
        claim: Claim,
        server_now: str,
        *,
        on_renewed: Callable[[Claim], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self._clock = clock
        self.claim = claim
        now = self._clock()
        ttl = max(0.0, lease_seconds(claim.lease_expires_at, server_now))
        self.ttl = ttl
        self._ends_at: float = now + ttl
        self._lost = ttl <= 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._on_renewed = on_renewed
        self._thread: threading.Thread | None = None

    @property
    def interval(self) -> float:
        """Seconds between renewals: TTL/3 (docs/api.md "Conventions"), at least 0.2 s."""
        return max(0.2, self.ttl / 3)

    def remaining(self) -> float:
        with self._lock:
            return self._ends_at - self._clock()

    @property
    def lost(self) -> bool:
        with self._lock:
            return self._lost or self._ends_at <= self._clock()

    def ensure(self, margin: float) -> None:
        """Before the fence: raise LeaseLost / FlowStop(LEASE_TOO_SHORT)."""
        if self.lost:
            raise LeaseLost("lease lost before the fence")
        if self.remaining() < margin:
            raise FlowStop("lease ends before the fence could be used", "LEASE_TOO_SHORT")

    def renew_once(self) -> None:
        sent_at = self._clock()
        try:
            lease = self._source.renew_lease(self.claim)
        except ServerRejected as exc:
            log.warning("lease renewal refused: %s", exc.error)
            with self._lock:
                self._lost = True
            return
        except AgentError as exc:
            log.warning("lease renewal failed: %s", exc.reason_code)
            return  # keep trying until the lease actually runs out
        with self._lock:
            self.claim = replace(self.claim, lease_expires_at=lease.lease_expires_at)
            self._ends_at = sent_at + lease_seconds(lease.lease_expires_at, lease.server_now)
        if callable(self._on_renewed):
            self._on_renewed(self.claim)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if self.lost:
                return
            self.renew_once()

    def start(self) -> LeaseKeeper:
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
