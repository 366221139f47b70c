"""One language for what an operator reads: Chinese, with codes, option names and paths as they are.

:func:`english_messages` reads a module's source (``ast``, nothing imported or run) and names every string
literal in operator-facing text that has English words but no Chinese: the arguments of the calls that print,
log or raise a message (:data:`OUTPUT_CALLS`), and anywhere in the module a literal with two English words in
a row (a wording kept in a variable before it is printed). Machine-readable text is left alone by the rules of
:func:`_english_words`: reason and error codes (``INTERNAL_ERROR``, ``invalid_request``), option and setting
names (``--credentials-file``, ``CMBUYER_SERVER_URL``), file names, URLs, JSON keys (dict keys and subscripts
are not walked) and the technical words of :data:`TECH_WORDS` (``adb``, ``TLS``, ``SQLite`` …).
:func:`has_chinese` is the test for help lines (``tests/cli_help.py``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]")

# calls whose string arguments a person reads: printed lines, progress/log lines, the messages of the
# exceptions a CLI prints as its one error line, doctor's check details
OUTPUT_CALLS = frozenset(
    {
        "print",
        "progress",
        "emit",
        "write",
        "CliError",
        "SettingsError",
        "CredentialsError",
        "CaptureError",
        "PackError",
        "ValueError",
        "ArgumentTypeError",
        "AlreadyRunning",
        "check",
        "_error",
        "_report",
        "append",
        "info",
        "warning",
        "error",
        "exception",
    }
)
# method calls whose string arguments are keys or formats, not text
_KEY_CALLS = frozenset(
    {
        "get",
        "pop",
        "join",
        "startswith",
        "endswith",
        "replace",
        "split",
        "partition",
        "strftime",
        "getattr",
        "setdefault",
    }
)
# words of the trade an operator types or reads in both languages
TECH_WORDS = frozenset(
    w.lower()
    for w in (
        "adb",
        "uiautomator2",
        "cmbuyer",
        "cmbuyer-server",
        "cmbuyer-agent",
        "TLS",
        "HTTPS",
        "HTTP",
        "URL",
        "PEM",
        "CA",
        "JSON",
        "SQLite",
        "UUIDv4",
        "WAL",
        "Litestream",
        "txid",
        "chmod",
        "systemd",
        "Environment",
        "VACUUM",
        "INTO",
        "stdin",
        "stdout",
        "stderr",
        "quick_check",
        "integrity_check",
        "Pinduoduo",
        "pragmas",
        "KEY",
        "VALUE",
        "NAME",
        "CODE",
        "FILE",
        "DIR",
        "SECONDS",
        "TASK_ID",
        "xlsx",
        "csv",
        "run",
        "doctor",
        "init",
        "serve",
        "device",
        "add",
        "tls",
        "journal",
        "inspect",
        "capture",
        "dry-run",
        "pack",
        "test",
        "accept",
        "verify",
        "meta",
        "dump",
        "png",
        "xml",
        "ok",
    )
)
_WORD = re.compile(r"(?<![\w$<{/.\-])[A-Za-z][a-z]+(?:'[a-z]+)?(?![\w/.\-=(])")
_TWO_WORDS = re.compile(r"[A-Za-z]{2,}[ ,;]+[A-Za-z]{2,}")


# English words a Chinese line may carry (a command's word, a unit) before it counts as an English line
MIXED_LIMIT = 3


def has_chinese(text: str) -> bool:
    """True when ``text`` holds a CJK character (or full-width punctuation)."""
    return bool(CJK.search(text))


def _english_words(text: str) -> list[str]:
    """The words of ``text`` that read as English prose: lowercase or capitalized words of two letters or more
    that are not part of an option, path, placeholder, code (``ALL_CAPS``, ``snake_case``) or :data:`TECH_WORDS`."""
    return [w for w in _WORD.findall(text) if w.lower() not in TECH_WORDS and not w.isupper()]


def _pieces(node: ast.AST) -> Iterator[ast.Constant | ast.JoinedStr]:
    """The string literals inside ``node`` a person reads (not dict keys, subscripts or key-like arguments)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node
        return
    if isinstance(node, ast.JoinedStr):
        yield node
        return
    if isinstance(node, ast.Dict):
        for value in node.values:
            yield from _pieces(value)
        return
    if isinstance(node, ast.Subscript):
        yield from _pieces(node.value)
        return
    if isinstance(node, ast.Compare):  # `mode == "on"` is a test, not text
        return
    if isinstance(node, ast.Call):
        name = _call_name(node)
        if name in _KEY_CALLS:
            if isinstance(node.func, ast.Attribute):
                yield from _pieces(node.func.value)
            return
        if name == "dumps":  # json.dumps: its dict's values are the text
            for arg in node.args:
                yield from _pieces(arg)
            return
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.keyword) and child.arg in ("file", "ensure_ascii", "flush", "indent", "sort_keys"):
            continue
        yield from _pieces(child)


def _text(node: ast.Constant | ast.JoinedStr) -> str:
    if isinstance(node, ast.Constant):
        return str(node.value)
    return "".join(str(v.value) if isinstance(v, ast.Constant) else "{}" for v in node.values)


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _docstrings(tree: ast.Module) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def english_messages(path: Path, codes: Iterable[str] = (), *, everywhere: bool = True) -> list[str]:
    """``"<file>:<line>: <text>"`` for every operator-facing literal of ``path`` with English words and no
    Chinese (empty = one language). ``codes``: literals that are machine names printed beside their Chinese
    label (doctor's check names), allowed as they are. Help texts (``help=``) are left to the ``--help`` test."""
    allowed = set(codes)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in ("help", "description", "metavar", "choices", "dest"):
            skip.update(id(n) for n in ast.walk(node.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):  # an f-string is judged whole, not by its parts
            skip.update(id(v) for v in node.values)
    found: dict[int, str] = {}

    def offend(piece: ast.Constant | ast.JoinedStr) -> None:
        if id(piece) in skip:
            return
        text = _text(piece)
        # an English sentence with one Chinese word in it (a button's name) is still English
        if (not has_chinese(text) or len(_english_words(text)) >= MIXED_LIMIT) and text not in allowed:
            found[id(piece)] = f"{path.name}:{piece.lineno}: {text}"

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) in OUTPUT_CALLS:
            args = node.args[2:] if _call_name(node) == "_report" else node.args
            for arg in [*args, *(k.value for k in node.keywords)]:
                for piece in _pieces(arg):
                    if _english_words(_text(piece)):
                        offend(piece)
        elif everywhere and isinstance(node, ast.Constant | ast.JoinedStr) and _TWO_WORDS.search(_text(node)):
            if len(_english_words(_text(node))) >= (MIXED_LIMIT if has_chinese(_text(node)) else 1):
                offend(node)
    return sorted(found.values(), key=lambda line: int(line.split(":")[1]))
