"""Capability isolation (docs/architecture.md "Agent"), checked on the
static import graph and on call sites, with ast over agent/*.py."""

from __future__ import annotations

import ast
from decimal import Decimal
from pathlib import Path

AGENT = Path(__file__).resolve().parents[2] / "agent"


def _module(path: Path) -> str:
    rel = path.relative_to(AGENT).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(["cmbuyer.agent", *parts])


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in AGENT.rglob("*.py"):
        mod = _module(path)
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                deps.add(node.module)
                deps.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        graph[mod] = {d for d in deps if d.startswith("cmbuyer.agent")}
    return graph


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        mod = todo.pop()
        for dep in graph.get(mod, ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_only_allowed_modules_import_permit_and_submit() -> None:
    graph = _graph()
    permit_importers = {m for m, deps in graph.items() if "cmbuyer.agent.permit" in deps}
    assert permit_importers <= {
        "cmbuyer.agent.client",
        "cmbuyer.agent.ports",
        "cmbuyer.agent.submit",
        "cmbuyer.agent.flow",
    }
    submit_importers = {m for m, deps in graph.items() if "cmbuyer.agent.submit" in deps}
    assert submit_importers == {"cmbuyer.agent.flow"}


def test_readers_and_capabilities_cannot_reach_permit_or_submit() -> None:
    graph = _graph()
    forbidden = {"cmbuyer.agent.permit", "cmbuyer.agent.submit", "cmbuyer.agent.client", "cmbuyer.agent.flow"}
    for mod in graph:
        if mod.startswith(("cmbuyer.agent.screens", "cmbuyer.agent.phone")) or mod in (
            "cmbuyer.agent.capabilities",
            "cmbuyer.agent.gates",
            "cmbuyer.agent.journal",
        ):
            assert not (_reach(graph, mod) & forbidden), mod


DRY_RUN_MODULES = ("cmbuyer.agent.dryrun", "cmbuyer.agent.prefence", "cmbuyer.agent.capture")


def test_dry_run_cannot_reach_a_permit_a_fence_or_the_submit_tap() -> None:
    """The dry run (and the engine and capture code it runs) has no way to a permit: it reaches none of
    the modules that hold one or talk to the server, and never names the fence or the submit tap."""
    graph = _graph()
    forbidden = {
        "cmbuyer.agent.permit",
        "cmbuyer.agent.submit",
        "cmbuyer.agent.client",
        "cmbuyer.agent.ports",
        "cmbuyer.agent.flow",
        "cmbuyer.agent.runner",
        "cmbuyer.agent.outbox",
        "cmbuyer.agent.recovery",
        "cmbuyer.agent.confirm",
    }
    for mod in DRY_RUN_MODULES:
        assert mod in graph, mod
        assert not (_reach(graph, mod) & forbidden), (mod, _reach(graph, mod) & forbidden)
        path = AGENT / f"{mod.rsplit('.', 1)[-1]}.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute | ast.Name):
                name = node.attr if isinstance(node, ast.Attribute) else node.id
                assert name not in (
                    "create_submission_fence",
                    "submit_tap_once",
                    "submit_order_once",
                    "SubmissionPermit",
                    "ResultSink",
                ), (mod, name)


def test_only_submit_calls_the_submit_tap_and_only_adapter_taps() -> None:
    for path in AGENT.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        mod = _module(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "submit_tap_once":
                assert mod in ("cmbuyer.agent.submit", "cmbuyer.agent.phone.adapter"), mod
            if isinstance(node, ast.Constant) and node.value == "input" and mod != "cmbuyer.agent.phone.adapter":
                raise AssertionError(f"{mod} builds an input tap command")
            if isinstance(node, ast.Attribute) and node.attr in ("click", "long_click", "watcher"):
                raise AssertionError(f"{mod} uses uiautomator2 {node.attr}")


def test_permit_cannot_be_forged_or_built_from_a_replay() -> None:
    import pytest

    from cmbuyer.agent.permit import PermitRefused, SubmissionPermit, _from_fence_response
    from tests.agent.fakes import make_purchase, read_proof

    proof = read_proof(make_purchase().task, Decimal("12.88"))
    with pytest.raises(TypeError):
        SubmissionPermit(object(), submission_id="x", attempt_id="y", task_id="z", proof=proof)
    body = {
        "submission_id": "f3c9f507-7473-4fa6-8d71-8786c34c6301",
        "status": "FENCED",
        "click_permitted": False,
        "reconciliation_required": True,
        "submit_text": "提交订单",
    }
    with pytest.raises(PermitRefused):
        _from_fence_response(body, attempt_id="a", task_id="t", proof=proof)
    first = dict(body, click_permitted=True, reconciliation_required=False)
    permit = _from_fence_response(first, attempt_id="a", task_id="t", proof=proof)
    assert permit.submission_id == body["submission_id"] and permit.proof is proof
    with pytest.raises(AttributeError):
        permit._submission_id = "other"  # type: ignore[misc]
