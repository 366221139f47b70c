"""The code cites only what a reader of this repository can open: docs/ and public URLs.

A docstring or comment that names a document kept outside the repository (the founding handouts —
"design §4", "spec 002", "phone-facts", "bad-inputs", the ``../shared/`` folder) or the issue a rule came
from ("issue 17") sends a newcomer to a text they do not have; the rule belongs in docs/ (in our own
words) and the history in git (docs/architecture.md, its opening). This test scans every
tracked file of the code folders for such citations and proves on synthetic text that each pattern of
its table fires and that docs/ and URL citations pass.

Tests are held to the same rule as product code: a test's docstring says what it proves and cites the
docs/ page of the rule it checks, not the issue that asked for it. ``Found:`` markers on regression
tests stay (they name a defect, not a document). ``docs/`` itself and ``migrations/`` (checksummed,
never edited) are outside the scan.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

SELF = Path(__file__).resolve()
ROOT = SELF.parents[1]
# the code folders; docs/ is what the code cites, migrations/ never changes once applied
SCANNED = ("server", "shared", "phonesim", "agent", "bench", "demo", "tests")
SUFFIXES = {".py", ".html", ".css", ".js", ".json", ".yaml", ".yml", ".xml", ".md", ".toml", ".txt", ".cfg"}
TOP_FILES = ("pyproject.toml", "setup.py", "Makefile")

# what a citation of an outside document looks like: (name, pattern)
CITATIONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("an issue number", re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)),
    ("the design handout", re.compile(r"\bdesign(?:\.md)?\s*§|\bdesign\.md\b", re.IGNORECASE)),
    ("a founding spec", re.compile(r"\bspec\s*0\d\d\b", re.IGNORECASE)),
    ("the phone-facts handout", re.compile(r"\bphone-facts\b", re.IGNORECASE)),
    ("the bad-inputs handout", re.compile(r"\bbad-inputs\b", re.IGNORECASE)),
    ("the handout folder", re.compile(r"\.\./shared/|\breal-structures/")),
    # a bare section sign points into a document not named: RFC sections are allowed below
    ("a section of an unnamed document", re.compile(r"§")),
)
# cut out before matching: public URLs and sections of public standards
ALLOWED = re.compile(r"https?://\S+|\bRFC\s*\d+\s*§\s*[\d.]+")


def citations(text: str) -> list[tuple[int, str, str]]:
    """``(line number, pattern name, matched text)`` for every citation of an outside document in
    ``text``; URLs and RFC sections are not citations of that kind."""
    found: list[tuple[int, str, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        cleaned = ALLOWED.sub(" ", line)
        for name, pattern in CITATIONS:
            found.extend((number, name, m.group(0)) for m in pattern.finditer(cleaned))
    return found


def _tracked() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "--", *SCANNED, *TOP_FILES], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if out.returncode != 0:  # not a git checkout (an unpacked sdist): every file on disk instead
        return sorted(
            str(p.relative_to(ROOT)) for folder in SCANNED for p in (ROOT / folder).rglob("*") if p.is_file()
        ) + [f for f in TOP_FILES if (ROOT / f).is_file()]
    return out.stdout.splitlines()


def _scanned_files() -> list[Path]:
    files = []
    for rel in _tracked():
        path = ROOT / rel
        if path == SELF or not path.is_file():
            continue
        if path.suffix in SUFFIXES or rel in TOP_FILES:
            files.append(path)
    return files


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ('"""Lease keeper (issue 17): renew early."""', "an issue number"),
        ("# Issues 16 and 17 asked for this", "an issue number"),
        ("    # the fence body (design §4/§7.1)", "the design handout"),
        ("see design.md for the loop", "the design handout"),
        ("(spec 002 §三, generalized)", "a founding spec"),
        ("the colour/size fields of Spec 000", "a founding spec"),
        ('"""Deep link to the product page (phone-facts)."""', "the phone-facts handout"),
        ("# the whole header table of bad-inputs.md", "the bad-inputs handout"),
        ('"""Bad-input table (../shared/bad-inputs.md "Device headers")"""', "the handout folder"),
        ("<!-- copied from real-structures/order_sheet -->", "the handout folder"),
        ('(docs/agent.md "The run loop", §7.6)', "a section of an unnamed document"),
    ],
)
def test_each_pattern_finds_its_citation(text: str, name: str) -> None:
    assert name in {found_name for _, found_name, _ in citations(text)}


@pytest.mark.parametrize(
    "text",
    [
        '"""Lease keeper (docs/agent.md "The run loop"): renew on the agent\'s own clock."""',
        '# docs/architecture.md "Safety rules" 5: the first statement re-checks the device',
        "# see https://github.com/openatx/uiautomator2/issues/1023 for the reconnect bug",
        '"""The RFC 9110 §12.4.2 weight of one media range."""',
        "# the design of the writer keeps one connection (a plain word, not a document)",
        "tissue 12 and specification 2 are no citations either",
    ],
)
def test_docs_urls_and_plain_words_are_allowed(text: str) -> None:
    assert citations(text) == []


def test_a_synthetic_module_is_caught_line_by_line() -> None:
    module = '"""A reader.\n\nRules (design §7.3, phone-facts):\n"""\n\nX = 1  # issue 29 reuse\n'
    assert [(line, name) for line, name, _ in citations(module)] == [
        (3, "the design handout"),
        (3, "the phone-facts handout"),
        (3, "a section of an unnamed document"),
        (6, "an issue number"),
    ]


def test_the_code_cites_no_document_outside_the_repository() -> None:
    files = _scanned_files()
    assert len(files) > 300  # the scan really walks the tree
    problems = [
        f"{path.relative_to(ROOT)}:{line}: {name} ({text!r})"
        for path in files
        for line, name, text in citations(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert problems == [], "cite docs/ (or drop the history):\n" + "\n".join(problems)
