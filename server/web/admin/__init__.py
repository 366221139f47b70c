"""The admin web pages (docs/admin.md "Routes", "Identity and sessions").

Server-rendered Jinja2 (autoescaped), local CSS/JS only under ``/static``, one module per route
group: :mod:`.auth` (login/logout), :mod:`.tasks` (table, create, start, detail, actions),
:mod:`.evidence`, :mod:`.devices`. :func:`setup` registers everything plus the security headers that
every non-device response carries. Device routes (``/api/``) are left untouched: the admin cookie
grants nothing there and device Bearer credentials grant nothing here.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from pathlib import Path

import jinja2
from aiohttp import web

from cmbuyer.schemas.sku import options_from_text
from cmbuyer.server.display import labels
from cmbuyer.server.display.task_export import sku_label
from cmbuyer.server.display.times import audit_value, beijing_time
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import refusal
from cmbuyer.server.domain.reports import NO_TAP_REASONS
from cmbuyer.server.domain.states import TaskState
from cmbuyer.server.web.admin import auth, devices, evidence, held, sku_form, supervision, task_io, tasks
from cmbuyer.server.web.admin.render import JINJA, refuse
from cmbuyer.server.web.edge import identity_only

_SERVER_DIR = Path(__file__).resolve().parents[2]
TEMPLATES_DIR = _SERVER_DIR / "templates"
STATIC_DIR = _SERVER_DIR / "static"

# No inline script or style anywhere, so 'self' is enough; frame-ancestors 'none' forbids framing.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self';"
    " form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    # same-origin (not no-referrer): with no-referrer browsers send "Origin: null" on our own form
    # posts, which the CSRF origin check must refuse.
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=(), payment=()",
}


def make_environment() -> jinja2.Environment:
    """The Jinja2 environment: autoescape on for every template, undefined names are errors."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["bjt"] = beijing_time
    env.filters["audit_value"] = audit_value
    # SKU options: stored canonical text → "规格=3层100抽 / 数量=6包"; the form's rows
    env.filters["sku_label"] = sku_label
    env.globals.update(
        sku_pairs=options_from_text, sku_rows=sku_form.form_rows, sku_dimensions=sku_form.known_dimensions
    )
    env.globals["state_label"] = lambda s: (
        labels.TASK_STATE_LABELS.get(TaskState(s), s) if s in TaskState.__members__ else s
    )
    # Chinese display labels (display/labels.py); unknown codes fall back to the code itself.
    env.globals.update({name: functools.partial(labels.label, table) for name, table in labels.TEMPLATE_LABELS.items()})
    env.globals.update(reason_label=labels.reason_label, glossary=labels.GLOSSARY, no_tap_reasons=NO_TAP_REASONS)
    return env


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    if request.path.startswith("/api/"):
        return
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)


ENCODING_REFUSAL = refusal(
    Code.UNSUPPORTED_MEDIA_TYPE, "不接受压缩或编码过的请求体（Content-Encoding 只能是 identity）"
)


@web.middleware
async def _identity_bodies(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """The edge's Content-Encoding rule for every non-device route (login included), decided before
    the session lookup and before any body byte; device routes apply it after authentication."""
    if not request.path.startswith("/api/") and not identity_only(request.raw_headers):
        return refuse(request, ENCODING_REFUSAL)
    return await handler(request)


async def _home(request: web.Request) -> web.StreamResponse:
    raise web.HTTPSeeOther("/tasks")


def setup(app: web.Application) -> None:
    """Register the admin routes, static files and security headers (the session sweep is a periodic job of
    :mod:`cmbuyer.server.lifecycle`)."""
    app[JINJA] = make_environment()
    app.on_response_prepare.append(_security_headers)
    app.middlewares.append(_identity_bodies)
    app.router.add_get("/", _home, name="admin-home")
    auth.setup(app)
    task_io.setup(app)  # before tasks: /tasks/import and /tasks/export are not /tasks/{task_id}
    tasks.setup(app)
    evidence.setup(app)
    devices.setup(app)
    held.setup(app)
    supervision.setup(app)
    app.router.add_static("/static", STATIC_DIR, name="admin-static")
