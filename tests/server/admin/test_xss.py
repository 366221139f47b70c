"""Stored fields with markup / template / URL payloads render inert everywhere."""

from __future__ import annotations

from typing import Any

from .conftest import AdminClient, add_admin

PAYLOADS = [
    "<script>alert(1)</script>",
    '" onfocus="alert(1)" autofocus="',
    "{{7*7}}",
    "javascript:alert(1)",
    "<img src=x onerror=alert(1)>",
    "'><svg/onload=alert(1)>",
]


def assert_inert(html: str) -> None:
    assert "<script>alert" not in html
    assert 'onfocus="alert' not in html
    assert "<img src=x" not in html and "<svg/onload" not in html
    assert ">49<" not in html and ">49 " not in html  # {{7*7}} was not evaluated
    assert 'href="javascript:' not in html and 'src="javascript:' not in html


async def test_payloads_in_every_stored_field_render_inert(
    admin_client: AdminClient, make_task: Any, make_device: Any, seed: Any, sync_conn: Any, clock: Any
) -> None:
    tasks = []
    for p in PAYLOADS:
        task = make_task(title=p[:200], color=p[:64], size=p[:64], start=True)
        device = make_device(p[:64])
        attempt = seed.claim(task.id, device.device_id)
        seed.events(task.id, attempt, [("OPEN_PRODUCT", "FAILED", "WRONG_GOODS", p)])
        seed.evidence(task.id, attempt, device.device_id)
        sid = seed.fence(task.id, attempt, device.device_id, observation="UNKNOWN")
        version = sync_conn.execute("SELECT version FROM tasks WHERE id = ?", (task.id,)).fetchone()[0]
        resp = await admin_client.post_json(
            f"/order-submissions/{sid}/reconcile", {"outcome": "created", "note": p, "expected_task_version": version}
        )
        assert resp.status == 200
        tasks.append(task)
    # an audit actor with markup in its name (usernames are restricted, but the page must not trust that)
    add_admin(sync_conn, clock, username="x")
    sync_conn.execute("BEGIN IMMEDIATE")
    sync_conn.execute(
        "INSERT INTO audit_log (at, actor_kind, actor_id, action, subject_kind, subject_id, detail_json)"
        " VALUES ('2026-08-04T09:00:00.000000Z', 'admin', ?, 'task.note', 'task', ?, ?)",
        (PAYLOADS[0], tasks[0].id, '{"k": "<script>alert(1)</script>"}'),
    )
    sync_conn.execute("COMMIT")
    client = admin_client.client
    pages = ["/tasks", "/devices", "/tasks?q=" + "script", "/tasks?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E"]
    pages += [f"/tasks/{t.id}" for t in tasks]
    for path in pages:
        resp = await client.get(path)
        assert resp.status == 200, path
        html = await resp.text()
        assert_inert(html)
    assert "{{7*7}}" in await (await client.get("/tasks")).text()  # shown literally
    html = await (await client.get(f"/tasks/{tasks[0].id}")).text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # shown as text, escaped
    drawer = await client.get(f"/tasks/{tasks[1].id}", headers={"X-CMBuyer-View": "drawer", "Accept": "text/html"})
    assert_inert(await drawer.text())
    assert "&#34; onfocus=&#34;alert(1)&#34;" in await drawer.text()


async def test_form_error_echo_is_escaped(admin_client: AdminClient) -> None:
    resp = await admin_client.post_form(
        "/tasks",
        {
            "create_key": "x",
            "title": PAYLOADS[1],
            "product_url": PAYLOADS[3],
            "sku_color": PAYLOADS[0],
            "sku_size": "M",
            "quantity": "1",
            "max_total_price": "1.00",
        },
    )
    assert resp.status == 400
    assert_inert(await resp.text())
