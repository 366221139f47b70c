"""The agent never sends a summary the server would refuse: ``wire_summary`` applies the server's own
rule (cmbuyer.schemas.summary), so a refused wording cannot lose an event or a fail report."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cmbuyer.agent.client import wire_summary
from cmbuyer.server.domain.errors import ValidationFailed
from cmbuyer.server.domain.reports import check_summary

FALLBACK = "步骤失败"


@pytest.mark.serial  # Hypothesis' default 200 ms deadline per example
@given(st.text(max_size=260))
def test_whatever_the_agent_sends_the_server_accepts(text: str) -> None:
    sent = wire_summary(text, FALLBACK)
    assert check_summary(sent) == sent


def test_known_refusals_are_replaced_and_plain_text_kept() -> None:
    for risky in ("claim_token leaked", "call 138 1234 5678", "<hierarchy/>", "x\u202eevil", "a" * 201):
        assert wire_summary(risky, FALLBACK) == FALLBACK
        try:
            check_summary(risky)
        except ValidationFailed:
            pass
        else:
            raise AssertionError(f"server accepted {risky!r}")
    assert wire_summary("价格 ¥12.88 超过上限", FALLBACK) == "价格 ¥12.88 超过上限"


def _agent_error_names() -> set[str]:
    """Names of every AgentError subclass in the agent package (their first argument is a summary)."""
    import importlib
    import pkgutil

    import cmbuyer.agent as agent_pkg
    from cmbuyer.agent.errors import AgentError

    for info in pkgutil.walk_packages(agent_pkg.__path__, "cmbuyer.agent."):
        importlib.import_module(info.name)
    names, todo = set(), [AgentError]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return names


def _literal(node: object) -> str | None:
    """A string literal's text; an f-string's with every placeholder as "x"; None for anything else."""
    import ast

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "x" for v in node.values)
    return None


def test_every_fixed_summary_in_the_agent_passes_the_shared_rule() -> None:
    """The agent's own wordings (stop reasons, event summaries, notes) are never replaced by the fallback:
    each literal passed as a summary passes the rule the server applies (one rule keeps agent and
    server on one rule, so a stricter rule must not make the agent's fixed phrases unusable)."""
    import ast
    from pathlib import Path

    import cmbuyer.agent as agent_pkg
    from cmbuyer.schemas.summary import summary_problem

    errors = _agent_error_names()
    found: dict[str, str] = {}
    for path in Path(agent_pkg.__path__[0]).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            callee = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            args: list[object] = []
            if callee in errors and node.args:
                args.append(node.args[0])
            if callee == "TaskEvent" and len(node.args) >= 4:
                args.append(node.args[3])
            args.extend(k.value for k in node.keywords if k.arg in ("summary", "note"))
            for arg in args:
                text = _literal(arg)
                if text:
                    found[text] = f"{path.name}:{node.lineno}"
    assert len(found) >= 30, found  # the scan really sees the agent's wordings
    refused = {
        text: where
        for text, where in found.items()
        if summary_problem(text) is not None and text not in NAMES_THE_DUMP_ROOT
    }
    assert not refused


# Older wordings of the dump parser (agent/screens/dump.py) that name the XML root and so hit the
# markup part of the rule; wire_summary sends their fixed fallback instead and the reason code
# (DUMP_INVALID / DUMP_EMPTY) carries the meaning. Left for the dump parser.
NAMES_THE_DUMP_ROOT = {"dump root is not <hierarchy>", "hierarchy has no nodes"}
