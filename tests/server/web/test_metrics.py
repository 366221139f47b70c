"""``GET /metrics`` (server/web/metrics.py): 404 unless ``CMBUYER_METRICS=1``; then Prometheus
text with the row counters (claims, fences, results, failures), device states and heartbeat ages, and a
latency histogram per route — served to a direct loopback peer without forwarding headers, or, with
``CMBUYER_METRICS_TOKEN`` set, only with that bearer token."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from cmbuyer.server.app import create_app
from cmbuyer.server.config import Secret
from tests.server.submissions.helpers import (
    fenced_http,
    post_json,
    result_body,
    result_path,
)

TOKEN = "5e" * 32


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(sample name, sorted labels): value}`` of an exposition (parsed by prometheus-client's own parser)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_metrics_are_404_unless_switched_on(server_client: Any) -> None:
    assert (await server_client.get("/metrics")).status == 404


async def test_metrics_count_rows_devices_and_latency(
    aiohttp_client: Any, settings: Any, clock: Any, make_device: Any, make_task: Any
) -> None:
    client = await aiohttp_client(create_app(dataclasses.replace(settings, metrics=True), clock))
    claim, submission_id = await fenced_http(client, make_device, make_task)
    status, raw = await post_json(client, result_path(submission_id), claim.device, result_body(claim))
    assert status == 200, raw
    make_device("never-beat")
    clock.advance(31)  # the claiming phone's heartbeat is now older than 10 s × 3: lost

    resp = await client.get("/metrics")
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = await resp.text()
    got = samples(text)
    assert got[("cmbuyer_claims_total", ())] == 1
    assert got[("cmbuyer_fences_total", ())] == 1
    assert got[("cmbuyer_results_total", (("observation", "SUBMITTED"),))] == 1
    assert got[("cmbuyer_tasks", (("state", "WAITING_PAYMENT"),))] == 1
    assert got[("cmbuyer_devices", (("state", "lost"),))] == 1
    assert got[("cmbuyer_devices", (("state", "never"),))] == 1
    assert got[("cmbuyer_device_heartbeat_age_seconds", (("device", "phone"),))] == 31
    route = (("le", "+Inf"), ("method", "POST"), ("route", "/api/v1/purchase-attempts/{attempt_id}/submission-fence"))
    assert got[("cmbuyer_http_request_duration_seconds_bucket", route)] == 1
    assert claim.token not in text and claim.device.token not in text and claim.device.device_id not in text

    # behind a proxy: a forwarding header makes a loopback peer count for nothing
    assert (await client.get("/metrics", headers={"X-Forwarded-For": "203.0.113.9"})).status == 403
    assert (await client.get("/metrics", headers={"Forwarded": "for=203.0.113.9"})).status == 403


async def test_with_a_token_only_the_token_counts(aiohttp_client: Any, settings: Any, clock: Any) -> None:
    tokened = dataclasses.replace(settings, metrics=True, metrics_token=Secret(bytes.fromhex(TOKEN)))
    client = await aiohttp_client(create_app(tokened, clock))
    assert (await client.get("/metrics")).status == 403  # loopback alone is not enough any more
    assert (await client.get("/metrics", headers={"Authorization": "Bearer " + "00" * 32})).status == 403
    assert (await client.get("/metrics", headers={"Authorization": "Bearer not-hex"})).status == 403
    ok = await client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}", "X-Forwarded-For": "1.2.3.4"})
    assert ok.status == 200 and "cmbuyer_claims_total 0.0" in await ok.text()
    assert TOKEN not in json.dumps(dict(ok.headers))
