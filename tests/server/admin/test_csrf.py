"""CSRF and same-origin checks on every unsafe admin route, no state change on GET, and the
security headers of every page."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from cmbuyer.server.tx.common import new_id

from .conftest import ADMIN_PASSWORD, ADMIN_USER, FOREIGN_ORIGINS, AdminClient, csrf_from


def unsafe_routes(task_id: str, sid: str, device_id: str) -> list[tuple[str, dict[str, Any]]]:
    """Every unsafe admin route with a body that would succeed given a valid token."""
    return [
        (
            "/tasks",
            {
                "create_key": new_id(),
                "title": "x",
                "product_url": "https://mobile.yangkeduo.com/goods.html?goods_id=1",
                "sku_color": "a",
                "sku_size": "b",
                "quantity": "1",
                "max_total_price": "1.00",
            },
        ),
        ("/tasks/start-purchases", {"start_key": new_id(), "task": f"{task_id}:1"}),
        (f"/tasks/{task_id}/reset-to-draft", {"expected_task_version": "1"}),
        (f"/tasks/{task_id}/cancel", {"expected_task_version": "1"}),
        (f"/tasks/{task_id}/mark-paid", {"expected_task_version": "1"}),
        (f"/order-submissions/{sid}/reconcile", {"outcome": "created", "note": "n", "expected_task_version": "1"}),
        (f"/devices/{device_id}/revoke", {"confirm": "revoke"}),
        (f"/approvals/{new_id()}/approve", {}),  # supervision; real subjects: test_supervision_routes
        (f"/approvals/{new_id()}/reject", {}),
        (f"/order-submissions/{sid}/supervision-verdict", {"verdict": "right"}),
        (f"/devices/{device_id}/resupervise", {}),
        # tasks in and out; the multipart upload has its own test (test_import.py)
        (
            f"/tasks/{task_id}/edit",
            {
                "expected_task_version": "1",
                "title": "x",
                "product_url": "https://mobile.yangkeduo.com/goods.html?goods_id=1",
                "sku_color": "a",
                "sku_size": "",
                "quantity": "1",
                "max_total_price": "1",
            },
        ),
        ("/tasks/bulk-cancel", {"task": f"{task_id}:1"}),
        ("/tasks/bulk-mark-paid", {"task": f"{task_id}:1"}),
        ("/tasks/import/confirm", {"token": "x"}),
        ("/logout", {}),
    ]


CASES = [
    "missing",
    "wrong",
    "other_session",
    "query_string",
    "origin_null",
    "cross_origin",
    "cross_site_fetch",
    "same_site_fetch",
    "two_tokens",
]


async def other_session_token(server_client: Any) -> str:
    """A valid CSRF token of a *different* session of the same admin (a second browser)."""
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as other:
        page = await other.get(server_client.make_url("/login"))
        resp = await other.post(
            server_client.make_url("/login"),
            allow_redirects=False,
            data={"username": ADMIN_USER, "password": ADMIN_PASSWORD, "csrf_token": csrf_from(await page.text())},
        )
        assert resp.status == 303
        return csrf_from(await (await other.get(server_client.make_url("/tasks"))).text())


@pytest.mark.parametrize("case", CASES)
async def test_unsafe_routes_refuse_bad_csrf_or_origin(
    admin_client: AdminClient, make_task: Any, make_device: Any, sync_conn: Any, case: str
) -> None:
    task = make_task()
    device = make_device()
    other = await other_session_token(admin_client.client) if case == "other_session" else ""
    before = sync_conn.execute("SELECT count(*) FROM audit_log").fetchone()[0]
    for path, data in unsafe_routes(task.id, new_id(), device.device_id):
        fields = list(data.items())
        headers: dict[str, str] = dict(FOREIGN_ORIGINS.get(case, {}))
        url = path
        token = admin_client.csrf
        if case == "missing":
            token = ""
        elif case == "wrong":
            token = "f" * 64
        elif case == "other_session":
            token = other
        elif case == "query_string":
            url = f"{path}?csrf_token={admin_client.csrf}"
            token = ""
        elif case == "two_tokens":
            headers["X-CSRF-Token"] = "e" * 64
        if token:
            fields.append(("csrf_token", token))
        resp = await admin_client.client.post(url, data=fields, headers=headers, allow_redirects=False)
        assert resp.status == 403, (path, case, resp.status)
        # and as JSON with the header
        json_headers = dict(headers)
        if token and case != "two_tokens":
            json_headers["X-CSRF-Token"] = token
        resp = await admin_client.client.post(
            url, json={k: v for k, v in data.items()}, headers=json_headers, allow_redirects=False
        )
        assert resp.status == 403, (path, case, "json", resp.status)
        body = await resp.json()
        assert body["error"]["code"] in ("csrf_failed", "cross_site_request")
    # nothing was written: no audit rows, task untouched, device active, still logged in
    assert sync_conn.execute("SELECT count(*) FROM audit_log").fetchone()[0] == before
    assert sync_conn.execute("SELECT state, version FROM tasks WHERE id = ?", (task.id,)).fetchone()[:] == ("DRAFT", 1)
    assert sync_conn.execute("SELECT state FROM devices WHERE id = ?", (device.device_id,)).fetchone()[0] == "ACTIVE"
    assert (await admin_client.client.get("/tasks")).status == 200


async def test_same_origin_headers_with_token_are_accepted(admin_client: AdminClient, make_task: Any) -> None:
    task = make_task()
    origin = str(admin_client.client.make_url("/")).rstrip("/")
    resp = await admin_client.post_form(
        f"/tasks/{task.id}/cancel",
        {"expected_task_version": "1"},
        headers={"Origin": origin, "Sec-Fetch-Site": "same-origin"},
    )
    assert resp.status == 303


async def test_unauthenticated_unsafe_request_is_401_before_csrf(server_client: Any, make_task: Any) -> None:
    task = make_task()
    resp = await server_client.post(
        f"/tasks/{task.id}/cancel", data={"expected_task_version": "1"}, headers={"Origin": "null"}
    )
    assert resp.status == 401


@pytest.mark.parametrize("suffix", ["reset-to-draft", "cancel", "mark-paid"])
async def test_state_changes_never_on_get(
    admin_client: AdminClient, make_task: Any, sync_conn: Any, suffix: str
) -> None:
    task = make_task(start=True)
    resp = await admin_client.client.get(
        f"/tasks/{task.id}/{suffix}?expected_task_version=2&csrf_token={admin_client.csrf}"
    )
    assert resp.status == 405
    for path in ("/logout", "/tasks/start-purchases", f"/order-submissions/{new_id()}/reconcile"):
        # (GET /tasks/start-purchases is the detail route with a non-UUID id: 404)
        assert (await admin_client.client.get(path)).status in (404, 405)
    assert sync_conn.execute("SELECT state FROM tasks WHERE id = ?", (task.id,)).fetchone()[0] == "PENDING"


async def test_wrong_content_type_is_415(admin_client: AdminClient, make_task: Any) -> None:
    task = make_task()
    resp = await admin_client.client.post(
        f"/tasks/{task.id}/cancel",
        data=b"expected_task_version=1",
        headers={"Content-Type": "text/plain", "X-CSRF-Token": admin_client.csrf},
    )
    assert resp.status == 415


async def test_oversized_body_is_413(admin_client: AdminClient) -> None:
    resp = await admin_client.client.post(
        "/tasks",
        data=b"a=" + b"x" * 300_000,
        headers={"Content-Type": "application/x-www-form-urlencoded", "X-CSRF-Token": admin_client.csrf},
    )
    assert resp.status == 413


@pytest.mark.parametrize(
    "path", ["/login", "/tasks", "/devices", "/static/admin.css", "/tasks/{task}", "/nonexistent-admin-page"]
)
async def test_security_headers_on_every_page(admin_client: AdminClient, make_task: Any, path: str) -> None:
    task = make_task()
    resp = await admin_client.client.get(path.format(task=task.id))
    csp = resp.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    assert resp.headers["Referrer-Policy"] == "same-origin"
    assert resp.headers["X-Frame-Options"] == "DENY"


async def test_pages_have_no_inline_script_or_style(admin_client: AdminClient, make_task: Any) -> None:
    task = make_task(start=True)
    for path in ("/login", "/tasks", f"/tasks/{task.id}", "/devices"):
        html = await (await admin_client.client.get(path)).text()
        assert "<script>" not in html and "<style" not in html and " style=" not in html and "onclick" not in html
        assert "http://" not in html.replace('href="https://mobile.yangkeduo.com', "")  # no CDN / remote asset
