"""Static checks (docs/api.md "Device API I"): this issue adds only heartbeat, claim-next and renew; the claim layer has
no event, fence, submit, payment or page-automation capability, and its answers carry no action script,
selector, coordinates or click permission."""

from __future__ import annotations

import re
from pathlib import Path

from aiohttp import web

from cmbuyer.server import lifecycle
from cmbuyer.server.web.device_api import claims, heartbeat

ROOT = Path(__file__).resolve().parents[3]
MODULES = [
    "server/web/device_api/claims.py",
    "server/web/device_api/heartbeat.py",
    "server/services/claim_next.py",
    "server/services/renew_lease.py",
    "server/services/heartbeat.py",
    "server/services/claim_secret.py",
    "server/tx/device_tx.py",
    "server/domain/claims.py",
    "server/domain/lease.py",
    # the claim layer's SQL (once store/claims.py, now in the aggregates it reads/writes)
    "server/store/devices.py",
    "server/store/device_requests.py",
    "server/store/authorizations.py",
    "server/store/attempts.py",
]
FORBIDDEN = re.compile(
    r"click_permitted|uiautomator|adbutils|xpath|selector|coordinat|payment|pay_|提交订单|支付", re.IGNORECASE
)


def test_routes_of_this_group() -> None:
    app = web.Application()
    from cmbuyer.server.config import Settings
    from cmbuyer.server.web.keys import SETTINGS

    app[SETTINGS] = Settings(data_dir=Path("x"), db_path=Path("x/db"))
    heartbeat.setup(app)
    claims.setup(app)
    routes = sorted((r.method, r.resource.canonical) for r in app.router.routes() if r.resource is not None)
    assert routes == [
        ("POST", "/api/v1/devices/heartbeat"),
        ("POST", "/api/v1/tasks/claim-next"),
        ("POST", "/api/v1/tasks/{task_id}/lease/renew"),
    ]
    # the claim-token secret check is a start-up step of the lifecycle, run before recovery and serving
    steps = lifecycle.STARTUP_STEPS
    assert lifecycle.check_claim_secret in steps
    assert steps.index(lifecycle.check_claim_secret) < steps.index(lifecycle.recover)


def test_no_forbidden_capability_in_the_claim_layer() -> None:
    for rel in MODULES:
        text = (ROOT / rel).read_text(encoding="utf-8")
        assert FORBIDDEN.search(text) is None, rel
