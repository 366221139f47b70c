"""The device API (docs/api.md "Device API I", "Device API II"), one module per URL resource: every route authenticates
first (device_auth), reads its body with the strict reader (jsonbody) and runs one use-case transaction.

- :mod:`.heartbeat` — ``/devices/heartbeat``;
- :mod:`.claims` — ``/tasks/claim-next``, ``/tasks/{id}/lease/renew``;
- :mod:`.task_reports` — ``/tasks/{id}/events``, ``/tasks/{id}/evidence``;
- :mod:`.attempts` — ``/purchase-attempts/{aid}/fail``;
- :mod:`.submissions` — ``/purchase-attempts/{aid}/submission-fence``, ``/order-submissions/{sid}/result``;
- :mod:`.supervision` — ``/purchase-attempts/{aid}/approval`` and ``…/approval/status``;
- :mod:`.screens` — ``/devices/screen`` (the answer to 查看当前屏幕);
- :mod:`.common` — the request helpers they share and the state built from the settings.

No route module registers start-up checks or periodic jobs: :mod:`cmbuyer.server.lifecycle` lists them.
"""

from __future__ import annotations

from aiohttp import web


def setup(app: web.Application) -> None:
    """Build the device API's state from the settings and register every device route group."""
    from cmbuyer.server.web.device_api import (
        attempts,
        claims,
        common,
        heartbeat,
        screens,
        submissions,
        supervision,
        task_reports,
    )

    common.setup_state(app)
    heartbeat.setup(app)
    claims.setup(app)
    task_reports.setup(app)
    attempts.setup(app)
    submissions.setup(app)
    supervision.setup(app)
    screens.setup(app)
