"""Outbox: the flow's events and gate screenshots, sent to the server in order on one background
thread, so the phone never waits for an HTTP round trip or a PNG encoding before the fence.

Rules (docs/architecture.md "Agent"):
- Jobs run one at a time, in the order they were queued (consecutive event jobs go as one batch,
  at most 20 events, the schema's limit). Each request keeps its journaled idempotency key and the
  client's bounded retries, exactly as when it was sent inline.
- The first failure is kept and every later job is dropped. The flow sees it at its next step
  (:meth:`raise_if_failed`) — before the fence, "server down → stop" still holds.
- :meth:`drain` waits until everything queued has been acknowledged by the server and raises the
  first failure. The flow drains before asking for the fence, so the fence is only requested once
  the events (the task version the fence names comes from their answers) and the three gate
  screenshots are stored.
- The asset id the server gave each uploaded kind is kept (:meth:`asset_id`): a supervised attempt
  names its gate-3 screenshot in the approval request (agent/approval.py).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from cmbuyer.agent.model import AssetRef, Claim, ScreenshotAsset, TaskEvent
from cmbuyer.agent.ports import ResultSink

log = logging.getLogger(__name__)
MAX_EVENTS_PER_BATCH = 20


@dataclass
class _Job:
    events: list[TaskEvent] | None = None
    upload: Callable[[], AssetRef] | None = None
    kind: str | None = None  # evidence kind of an upload


class Outbox:
    def __init__(self, sink: ResultSink, claim: Claim) -> None:
        self._sink = sink
        self._claim = claim
        self._queue: deque[_Job] = deque()
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self._error: BaseException | None = None
        self._assets: dict[str, str] = {}  # evidence kind -> asset id of its last acknowledged upload
        self._thread = threading.Thread(target=self._run, name="outbox", daemon=True)
        self._thread.start()

    # --- producer side (the flow's thread) ------------------------------------------------------
    def events(self, events: list[TaskEvent]) -> None:
        self._put(_Job(events=list(events)))

    def upload(self, kind: str, png: Callable[[], bytes], captured_at: str) -> None:
        """Queue an evidence upload; ``png()`` is called on the outbox thread (the encoding)."""
        claim, sink = self._claim, self._sink
        self._put(
            _Job(upload=lambda: sink.upload_screenshot(claim, ScreenshotAsset(kind, png(), captured_at)), kind=kind)
        )

    def _put(self, job: _Job) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError("outbox closed")
            self._queue.append(job)
            self._cond.notify_all()

    @property
    def error(self) -> BaseException | None:
        with self._cond:
            return self._error

    def raise_if_failed(self) -> None:
        error = self.error
        if error is not None:
            raise error

    def asset_id(self, kind: str) -> str | None:
        """The asset id the server returned for the last acknowledged upload of ``kind`` (None if none
        was acknowledged yet); call after :meth:`drain` to be sure it is there."""
        with self._cond:
            return self._assets.get(kind)

    def drain(self, timeout: float | None = None) -> None:
        """Wait until every queued job is done; raise the first failure (or TimeoutError)."""
        with self._cond:
            if not self._cond.wait_for(lambda: not self._queue and not self._busy, timeout):
                raise TimeoutError("outbox did not drain")
            if self._error is not None:
                raise self._error

    def close(self, timeout: float = 120.0, *, drop: bool = False) -> BaseException | None:
        """Let the queued jobs finish (or be dropped after a failure), stop the thread and return
        the first failure, if any. Nothing can be queued afterwards. ``drop=True`` (the agent is
        stopping now): forget what was not sent yet and do not wait."""
        with self._cond:
            self._closed = True
            if drop:
                self._queue.clear()
            self._cond.notify_all()
        if drop:
            return self.error
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("outbox still sending after %.0fs; continuing without it", timeout)
        return self.error

    # --- the outbox thread ----------------------------------------------------------------------
    def _take(self) -> _Job | None:
        with self._cond:
            self._cond.wait_for(lambda: self._queue or self._closed)
            if not self._queue:
                return None
            job = self._queue.popleft()
            if job.events is not None:  # batch the event jobs queued right behind it
                while (
                    self._queue
                    and self._queue[0].events is not None
                    and len(job.events) + len(self._queue[0].events or []) <= MAX_EVENTS_PER_BATCH
                ):
                    job.events.extend(self._queue.popleft().events or [])
            self._busy = True
            return job

    def _run(self) -> None:
        while True:
            job = self._take()
            if job is None:
                return
            try:
                if self.error is None:
                    if job.events is not None:
                        self._sink.append_events(self._claim, job.events)
                    elif job.upload is not None:
                        ref = job.upload()
                        if job.kind is not None:
                            with self._cond:
                                self._assets[job.kind] = ref.asset_id
            except BaseException as exc:  # handed to the flow's thread
                with self._cond:
                    if self._error is None:
                        self._error = exc
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
