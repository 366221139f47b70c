"""The aiohttp internals the server patches are still there and still shaped as the patches expect.

aiohttp has no hook for its parser-error pages or for connection accounting, so the server wraps
private methods once per process: :func:`cmbuyer.server.web.hardening.harden_error_pages` wraps
``RequestHandler.handle_error`` and :func:`cmbuyer.server.web.edge.install_connection_guard` wraps
``Server.connection_made``/``connection_lost`` and switches off ``RequestHandler._lingering_time``.
pyproject.toml pins aiohttp below the next minor release; before raising that bound, this file must
pass against the new release (a renamed method or attribute would otherwise make a patch silently do
nothing, or fail on the first bad request).
"""

from __future__ import annotations

import ast
import inspect
import re
import tomllib
from pathlib import Path
from types import ModuleType

import aiohttp
from aiohttp import abc, http_exceptions, web, web_protocol, web_server

from cmbuyer.server.web.edge import install_connection_guard
from cmbuyer.server.web.hardening import harden_error_pages

PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"


def _params(module: ModuleType, cls: str, method: str) -> list[tuple[str, object]]:
    """``(name, default)`` of ``cls.method`` as aiohttp's source defines it (read from the module's
    source, so the server's wrappers installed by other tests in this process do not hide it)."""
    tree = ast.parse(inspect.getsource(module))
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    fn = next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == method)
    names = [a.arg for a in fn.args.args]
    defaults: list[object] = [inspect.Parameter.empty] * (len(names) - len(fn.args.defaults))
    defaults += [ast.literal_eval(d) for d in fn.args.defaults]
    return list(zip(names, defaults, strict=True))


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"[0-9]+", text)[:3])


def test_installed_aiohttp_is_inside_the_pinned_range() -> None:
    deps = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["dependencies"]
    spec = next(d for d in deps if d.startswith("aiohttp"))
    m = re.fullmatch(r"aiohttp>=([0-9.]+),<([0-9.]+)", spec)
    assert m is not None, f"aiohttp needs an upper bound in pyproject.toml, found {spec!r}"
    assert _version(m.group(1)) <= _version(aiohttp.__version__) < _version(m.group(2))


def test_handle_error_keeps_the_wrapped_signature() -> None:
    assert _params(web_protocol, "RequestHandler", "handle_error") == [
        ("self", inspect.Parameter.empty),
        ("request", inspect.Parameter.empty),
        ("status", 500),
        ("exc", None),
        ("message", None),
    ]
    # the wrapper answers only while nothing was written: it reads the writer's byte count
    assert "output_size" in abc.AbstractStreamWriter.__annotations__
    assert issubclass(http_exceptions.ContentEncodingError, http_exceptions.PayloadEncodingError)


def test_server_connection_callbacks_keep_their_signatures_and_callers() -> None:
    assert [n for n, _ in _params(web_server, "Server", "connection_made")] == ["self", "handler", "transport"]
    assert _params(web_server, "Server", "connection_lost")[1:] == [
        ("handler", inspect.Parameter.empty),
        ("exc", None),
    ]
    # the protocol reports itself to its manager (the Server) on both ends of a connection
    assert "self._manager.connection_made(self," in inspect.getsource(web_protocol.RequestHandler.connection_made)
    assert "self._manager.connection_lost(self," in inspect.getsource(web_protocol.RequestHandler.connection_lost)


def test_lingering_time_is_the_attribute_the_close_path_reads() -> None:
    assert "_lingering_time" in web_protocol.RequestHandler.__slots__
    assert "self._lingering_time" in inspect.getsource(web_protocol.RequestHandler.start)


def test_request_in_progress_is_the_flag_the_handler_keeps() -> None:
    """The per-device cap (server/web/edge.py) closes a connection that carries a request gracefully."""
    assert "_request_in_progress" in web_protocol.RequestHandler.__slots__
    source = inspect.getsource(web_protocol.RequestHandler)
    assert "self._request_in_progress = True" in source and "self._request_in_progress = False" in source


async def test_the_server_names_the_application_through_its_request_handler() -> None:
    # edge._guard_of finds the application as ``server.request_handler.__self__``
    app = web.Application()
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        assert runner.server is not None
        assert runner.server.request_handler.__self__ is app
    finally:
        await runner.cleanup()


def test_the_patches_install_once_on_these_internals() -> None:
    harden_error_pages()
    install_connection_guard()
    assert getattr(web_protocol.RequestHandler.handle_error, "_cmbuyer_hardened", False)
    assert getattr(web_server.Server.connection_made, "_cmbuyer_guarded", False)
    wrapped = web_server.Server.connection_made
    install_connection_guard()
    assert web_server.Server.connection_made is wrapped
