"""``GET /metrics`` in the Prometheus text format (prometheus-client), off unless
``CMBUYER_METRICS=1`` — then the route does not exist (404).

Who may read it: with ``CMBUYER_METRICS_TOKEN`` set, only a request with ``Authorization: Bearer <that
token>`` (compared in constant time) — behind a reverse proxy every request comes from the proxy's
loopback address, so then only the token counts; without a token, only a **direct** loopback peer: a
loopback address and no forwarding header (``Forwarded``, ``X-Forwarded-*``, ``X-Real-IP``). Anything else
gets ``403``. The page names devices and counts, never a token, an id or a task's contents.

What it shows (docs/operations.md "Metrics" lists them with example alerts):

- counters from the rows (:mod:`cmbuyer.server.store.queries.metrics`): ``cmbuyer_claims_total``,
  ``cmbuyer_fences_total``, ``cmbuyer_results_total{observation}``, ``cmbuyer_failures_total{reason_code}``,
  ``cmbuyer_evidence_bytes_total`` / ``cmbuyer_evidence_files_total``;
- gauges: ``cmbuyer_tasks{state}``, ``cmbuyer_devices{state}`` (``ready``, ``busy``, … from the heartbeat,
  or ``lost`` once it is stale, ``paused``, ``never`` (no heartbeat yet), ``revoked``) and
  ``cmbuyer_device_heartbeat_age_seconds{device}`` per active device;
- ``cmbuyer_http_request_duration_seconds{method,route}``: a latency histogram per route template, fed by
  the access middleware (:mod:`cmbuyer.server.web.access_log`).
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from aiohttp import web
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cmbuyer.server.clock import from_wire
from cmbuyer.server.domain import lease
from cmbuyer.server.domain.states import DeviceState
from cmbuyer.server.store.queries import metrics as metrics_queries
from cmbuyer.server.web.access_log import OBSERVERS
from cmbuyer.server.web.keys import CLOCK, DB, SETTINGS

METRICS_PATH = "/metrics"
# The classic text format every Prometheus reads (our names are plain ASCII, so generate_latest writes exactly
# it); newer prometheus-client releases label the same bytes 1.0.0, which older servers do not know.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
FORWARDING_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-IP")


@dataclass(eq=False)  # identity hash: the registry keys its collectors by the object
class _Rows(Collector):
    """Turns the latest :class:`~cmbuyer.server.store.queries.metrics.Snapshot` into metric families (set by
    the handler right before rendering, on the event loop: one scrape at a time renders it)."""

    snapshot: metrics_queries.Snapshot = field(default_factory=metrics_queries.Snapshot)
    device_states: dict[str, int] = field(default_factory=dict)
    ages: dict[str, float] = field(default_factory=dict)

    def collect(self) -> Iterator[Metric]:
        s = self.snapshot
        yield CounterMetricFamily("cmbuyer_claims", "new claims (attempts) ever made", value=s.claims)
        yield CounterMetricFamily("cmbuyer_fences", "submission fences ever granted", value=s.fences)
        yield _by_label(
            CounterMetricFamily,
            "cmbuyer_results",
            "order submissions by the observation their result reported",
            "observation",
            s.results,
        )
        yield _by_label(
            CounterMetricFamily,
            "cmbuyer_failures",
            "attempts a device failed before the fence, by reason code",
            "reason_code",
            s.failures,
        )
        yield CounterMetricFamily("cmbuyer_evidence_bytes", "bytes of evidence stored", value=s.evidence_bytes)
        yield CounterMetricFamily("cmbuyer_evidence_files", "evidence files stored", value=s.evidence_files)
        yield _by_label(GaugeMetricFamily, "cmbuyer_tasks", "tasks now, by state", "state", s.tasks)
        yield _by_label(GaugeMetricFamily, "cmbuyer_devices", "devices now, by state", "state", self.device_states)
        yield _by_label(
            GaugeMetricFamily,
            "cmbuyer_device_heartbeat_age_seconds",
            "seconds since an active device's last heartbeat",
            "device",
            self.ages,
        )


def _by_label(
    kind: type[CounterMetricFamily] | type[GaugeMetricFamily],
    name: str,
    documentation: str,
    label: str,
    values: Mapping[str, float],
) -> Metric:
    """A metric family with one sample per key of ``values`` (sorted), the key as the value of ``label``."""
    family = kind(name, documentation, labels=[label])
    for key, n in sorted(values.items()):
        family.add_metric([key], n)
    return family


def device_state(row: metrics_queries.DeviceRow, now: datetime, interval: int, factor: int) -> str:
    """The ``state`` label of one device: ``revoked``, ``paused``, ``never`` (no heartbeat), ``lost`` (stale
    heartbeat), else the reported state in lower case."""
    if row.state != DeviceState.ACTIVE:
        return "revoked"
    if row.paused:
        return "paused"
    if row.last_heartbeat_at is None:
        return "never"
    if not lease.heartbeat_fresh(row.last_heartbeat_at, now, interval, factor):
        return "lost"
    return (row.reported_state or "unknown").lower()


@dataclass
class Metrics:
    """The app's metrics: its own registry (never the process-global one), the rows collector and the
    request-latency histogram."""

    registry: CollectorRegistry
    rows: _Rows
    latency: Histogram

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """One request's latency (the access middleware calls it for every request)."""
        self.latency.labels(method, route).observe(seconds)


METRICS = web.AppKey("metrics", Metrics)


def allowed(request: web.Request) -> bool:
    """The access rule of the module docstring."""
    token = request.app[SETTINGS].metrics_token
    if token is not None:
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        try:
            candidate = bytes.fromhex(presented.strip()) if scheme.lower() == "bearer" else b""
        except ValueError:
            candidate = b""
        return hmac.compare_digest(candidate, token.reveal())
    if any(name in request.headers for name in FORWARDING_HEADERS):
        return False
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    try:
        return isinstance(peer, tuple) and ipaddress.ip_address(peer[0]).is_loopback
    except ValueError:
        return False


async def metrics(request: web.Request) -> web.StreamResponse:
    """``GET /metrics`` → 200 Prometheus text; 403 for a caller the access rule refuses; 503 when the
    database cannot be read."""
    if not allowed(request):
        return web.Response(status=403, text="forbidden\n", headers={"Cache-Control": "no-store"})
    settings, now = request.app[SETTINGS], request.app[CLOCK].now()
    snapshot = await request.app[DB].read(metrics_queries.snapshot)
    m = request.app[METRICS]
    states: dict[str, int] = {}
    ages: dict[str, float] = {}
    for row in snapshot.devices:
        state = device_state(row, now, settings.heartbeat_interval, settings.heartbeat_stale_factor)
        states[state] = states.get(state, 0) + 1
        if row.state == DeviceState.ACTIVE and row.last_heartbeat_at is not None:
            ages[row.name] = round((now - from_wire(row.last_heartbeat_at)).total_seconds(), 3)
    m.rows.snapshot, m.rows.device_states, m.rows.ages = snapshot, states, ages
    return web.Response(
        body=generate_latest(m.registry), headers={"Content-Type": CONTENT_TYPE, "Cache-Control": "no-store"}
    )


def setup(app: web.Application) -> None:
    """Register ``GET /metrics`` and the latency observer when ``CMBUYER_METRICS=1``; else nothing (404)."""
    if not app[SETTINGS].metrics:
        return
    registry = CollectorRegistry(auto_describe=False)
    rows = _Rows()
    registry.register(rows)
    latency = Histogram(
        "cmbuyer_http_request_duration_seconds",
        "time to the response, by route template",
        ["method", "route"],
        registry=registry,
    )
    app[METRICS] = m = Metrics(registry, rows, latency)
    app[OBSERVERS].append(m.observe)
    app.router.add_get(METRICS_PATH, metrics, name="metrics")
