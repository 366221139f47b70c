"""The access log and the login lines (server/web/access_log.py, server/web/admin/auth.py): one
line per request with the route template, status, milliseconds and who — never a path id, a query string,
a header value, a cookie or a password — and, in JSON mode, the same facts as fields."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from cmbuyer.server.logs import JsonFormatter, RedactingFilter
from cmbuyer.server.tx.common import new_id
from tests.server.admin.conftest import ADMIN_PASSWORD, ADMIN_USER, login
from tests.server.claims.conftest import HEARTBEAT, heartbeat_body, post


def _lines(caplog: pytest.LogCaptureFixture, logger: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == logger]


async def test_access_lines_name_the_route_template_and_who(
    server_client: Any, make_device: Any, admin: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    dev = make_device()
    assert (await post(server_client, HEARTBEAT + "?token=leak-me", dev, heartbeat_body(dev.device_id)))[0] == 200
    task_id = new_id()
    wrong = await server_client.post(
        f"/api/v1/tasks/{task_id}/events", data=b"{}", headers={"Authorization": "Bearer " + "ab" * 32}
    )
    assert wrong.status == 401
    assert (await server_client.get("/no/such/path?password=leak-me")).status == 404
    assert (await login(server_client, ADMIN_USER, ADMIN_PASSWORD)).status == 303
    assert (await server_client.get(f"/tasks/{task_id}")).status == 404

    records = _lines(caplog, "cmbuyer.access")
    text = [r.getMessage() for r in records]
    # the idle polls of a healthy phone are DEBUG, everything else INFO
    assert [r.levelno for r in records[:3]] == [logging.DEBUG, logging.INFO, logging.INFO]
    assert text[0].startswith("POST /api/v1/devices/heartbeat 200 ") and text[0].endswith(f"device={dev.device_id[:8]}")
    assert text[1].startswith("POST /api/v1/tasks/{task_id}/events 401 ") and text[1].endswith(" -")
    assert text[2].startswith("GET - 404 ")
    assert any(t.startswith("GET /tasks/{task_id} 404 ") and t.endswith(f"admin={ADMIN_USER}") for t in text)
    # ours only: the test harness's server keeps aiohttp's own access log, which `serve` turns off
    ours = [r for r in caplog.records if r.name.startswith("cmbuyer.")]
    everything = "\n".join(r.getMessage() + json.dumps(getattr(r, "fields", {})) for r in ours)
    for secret in ("leak-me", dev.token, "ab" * 32, dev.device_id, task_id, ADMIN_PASSWORD):
        assert secret not in everything

    # JSON mode: the same facts as fields, through the real filter and formatter
    record = records[0]
    RedactingFilter().filter(record)
    line = json.loads(JsonFormatter().format(record))
    assert {k: line[k] for k in ("logger", "method", "route", "status", "device")} == {
        "logger": "cmbuyer.access",
        "method": "POST",
        "route": "/api/v1/devices/heartbeat",
        "status": 200,
        "device": dev.device_id[:8],
    }
    assert isinstance(line["ms"], float) and line["ts"].endswith("Z")


async def test_logins_failures_and_lockouts_are_logged_without_passwords(
    server_client: Any, admin: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    typed_password_as_name = "hunter2-typed-in-the-name-field"
    assert (await login(server_client, typed_password_as_name, "x" * 12)).status == 401
    assert (await login(server_client, ADMIN_USER, "wrong-password-1")).status == 401
    assert (await login(server_client, ADMIN_USER, ADMIN_PASSWORD)).status == 303
    lines = [r.getMessage() for r in _lines(caplog, "cmbuyer.auth")]
    assert lines[0].startswith("登录失败：未知的用户名，来自 ")
    assert lines[1].startswith(f"登录失败：用户 '{ADMIN_USER}'，来自 ")
    assert lines[2].startswith(f"登录：用户 '{ADMIN_USER}'，来自 ")
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (typed_password_as_name, "wrong-password-1", ADMIN_PASSWORD):
        assert secret not in logged
    for _ in range(30):  # until the throttle answers 429 (its limits: services/admin_sessions.py)
        if (await login(server_client, ADMIN_USER, "wrong-password-2")).status == 429:
            break
    else:
        raise AssertionError("no lockout")
    assert any(r.getMessage().startswith("登录限流：来自 ") for r in _lines(caplog, "cmbuyer.auth"))
