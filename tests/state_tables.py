"""The generated transition tables of docs/state-machines.md: one renderer and one check for both the
server's tables (tests/server/domain/test_state_machines_doc.py) and the agent journal's
(tests/agent/test_journal_states_doc.py). Each block sits between its own begin/end markers; with
``CMBUYER_REGEN_DOCS=1`` the check rewrites the block instead of comparing it."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "state-machines.md"

# (title, {(from, use_case): to}) per state machine, in the order the doc shows them
Machines = Sequence[tuple[str, Mapping[tuple[str, str], str]]]


def render(begin: str, end: str, machines: Machines, causes: Mapping[str, str]) -> str:
    """The markdown block: ``begin``, one ``| from | use-case | to | caused by |`` table per machine, ``end``.
    ``KeyError`` for a use-case without a cause (the tests check that first, with a clearer message)."""
    lines = [begin, ""]
    for title, table in machines:
        lines += [f"### {title}", "", "| from | use-case | to | caused by |", "|---|---|---|---|"]
        for (src, use_case), dst in table.items():
            lines.append(f"| `{src}` | `{use_case}` | `{dst}` | {causes[use_case]} |")
        lines.append("")
    lines.append(end)
    return "\n".join(lines)


def used_use_cases(machines: Machines) -> set[str]:
    """Every use-case named in ``machines``' tables."""
    return {use_case for _, table in machines for (_, use_case) in table}


def assert_doc_block(begin: str, end: str, rendered: str, regen_hint: str) -> None:
    """docs/state-machines.md holds ``rendered`` between ``begin`` and ``end`` (both present); with
    ``CMBUYER_REGEN_DOCS=1`` the block is rewritten first. ``regen_hint``: the command that regenerates it."""
    text = DOC.read_text(encoding="utf-8")
    assert begin in text and end in text, f"docs/state-machines.md lacks the markers {begin} … {end}"
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    expected = head + rendered + tail
    if os.environ.get("CMBUYER_REGEN_DOCS") == "1":
        DOC.write_text(expected, encoding="utf-8")
        text = expected
    assert text == expected, f"docs/state-machines.md is stale: regenerate ({regen_hint})"
