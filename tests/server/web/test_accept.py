"""Malformed Accept headers: the drawer parses quality values defensively — a
malformed weight makes its media range count as absent (406 when nothing else accepts HTML) — and
no route answers 5xx for any Accept value. Before the fix ``text/html;q=.`` on the drawer was a 500."""

from __future__ import annotations

from typing import Any

import pytest

from tests.server.claims.conftest import HEARTBEAT, heartbeat_body, post

DRAWER = {"X-CMBuyer-View": "drawer", "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}


@pytest.mark.parametrize(
    ("accept", "status"),
    [
        ("text/html;q=.", 406),
        ("text/html;q=1e9", 406),
        ("text/html;q=2", 406),
        ("text/html;q=-1", 406),
        ("text/html;q=", 406),
        ("text/html;q=0.", 406),
        ("text/html;q=1;q=1", 406),
        ("text/html;q=0.0001", 406),
        (",,, ;q=1, ;", 406),
        ("", 406),
        ("text/html;q=0.5", 200),
        ("text/html;Q=1.000", 200),
        ("text/html;charset=utf-8;charset=utf-8", 200),
        ("text/html;level=1;q=1", 200),
        ("application/json, text/html;q=0.5", 200),
        ("text/html;q=.5", 406),
        ("text/html;q=., text/html;q=0.3", 200),
        ("text/html, ", 200),
    ],
)
async def test_drawer_accept_quality_values(admin_client: Any, make_task: Any, accept: str, status: int) -> None:
    task = make_task()
    resp = await admin_client.client.get(f"/tasks/{task.id}", headers={**DRAWER, "Accept": accept})
    assert resp.status == status, await resp.text()


MALFORMED = [
    "text/html;q=.",
    "text/html;q=1e9",
    "*/*;q=NaN",
    ";;;",
    "text/html;q=1;q=0",
    "a/b;c",
    "text/html;charset=utf-8;charset=utf-8",
    ",",
    "text/html;q=" + "9" * 5000,
]


@pytest.mark.parametrize("accept", MALFORMED)
async def test_no_route_answers_5xx_for_a_malformed_accept(
    admin_client: Any, make_task: Any, make_device: Any, accept: str
) -> None:
    task = make_task()
    client = admin_client.client
    for path, extra in (
        ("/tasks", {}),
        ("/tasks", {"X-CMBuyer-View": "rows", **DRAWER}),
        (f"/tasks/{task.id}", {}),
        (f"/tasks/{task.id}", DRAWER),
        ("/login", {}),
        ("/healthz", {}),
        ("/devices", {}),
    ):
        resp = await client.get(path, headers={**extra, "Accept": accept}, allow_redirects=False)
        assert resp.status < 500, (path, extra, resp.status)
    dev = make_device()
    status, _, _ = await post(client, HEARTBEAT, dev, heartbeat_body(dev.device_id), Accept=accept)
    assert status == 200
