"""GET /evidence/{asset_id} access rules (docs/admin.md "Evidence")."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from cmbuyer.server.tx.common import new_id

from .conftest import AdminClient
from .seed import png_bytes


@pytest.fixture
def asset(make_task: Any, make_device: Any, seed: Any) -> tuple[str, bytes, str]:
    task = make_task(start=True)
    device = make_device()
    attempt = seed.claim(task.id, device.device_id)
    data = png_bytes()
    return seed.evidence(task.id, attempt, device.device_id, data), data, task.id


async def test_evidence_served_with_safe_headers(admin_client: AdminClient, asset: Any) -> None:
    asset_id, data, _ = asset
    resp = await admin_client.client.get(f"/evidence/{asset_id}")
    assert resp.status == 200
    assert await resp.read() == data
    assert resp.headers["Content-Type"] == "image/png"
    assert resp.headers["Content-Length"] == str(len(data))
    assert resp.headers["Cache-Control"] == "no-store"
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    assert resp.headers["Content-Disposition"] == 'inline; filename="evidence.png"'
    sha = hashlib.sha256(data).hexdigest()
    assert sha not in str(resp.headers) and "evidence/" not in resp.headers["Content-Disposition"]


async def test_evidence_401_before_any_lookup(server_client: Any, asset: Any, monkeypatch: Any) -> None:
    from cmbuyer.server.store.queries import admin as admin_queries

    looked_up: list[str] = []
    real = admin_queries.evidence_file_ref
    monkeypatch.setattr(admin_queries, "evidence_file_ref", lambda c, a: looked_up.append(a) or real(c, a))
    asset_id, _, _ = asset
    bodies = set()
    for target in (asset_id, new_id(), "malformed"):
        resp = await server_client.get(f"/evidence/{target}")
        assert resp.status == 401
        bodies.add(await resp.read())
    assert bodies == {b""}  # existing, missing and malformed are indistinguishable
    assert looked_up == []


async def test_evidence_404_cases(
    admin_client: AdminClient, make_task: Any, make_device: Any, seed: Any, settings: Any
) -> None:
    get = admin_client.client.get
    for target in (new_id(), "not-a-uuid", new_id().upper(), "..%2F..%2Fcmbuyer.env"):
        resp = await get(f"/evidence/{target}")
        assert resp.status == 404 and await resp.read() == b""
    task = make_task(start=True)
    device = make_device()
    attempt = seed.claim(task.id, device.device_id)
    missing_file = seed.evidence(task.id, attempt, device.device_id, png_bytes((1, 2, 3)), write_file=False)
    resp = await get(f"/evidence/{missing_file}")
    assert resp.status == 404 and await resp.read() == b""
    data = png_bytes((9, 9, 9))
    tampered = seed.evidence(task.id, attempt, device.device_id, data)
    sha = hashlib.sha256(data).hexdigest()
    (settings.evidence_dir / sha[:2] / sha[2:4] / f"{sha}.png").write_bytes(b"<html>" + data[6:])
    resp = await get(f"/evidence/{tampered}")
    assert resp.status == 404 and await resp.read() == b""


async def test_detail_page_thumbnails_link_to_evidence(admin_client: AdminClient, asset: Any) -> None:
    asset_id, _, task_id = asset
    html = await (await admin_client.client.get(f"/tasks/{task_id}")).text()
    assert f'<img src="/evidence/{asset_id}"' in html
