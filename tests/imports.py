"""The static import graph of a source folder, read with ast (the layer tests of tests/server and
tests/agent share it, so "what a module imports" has one reading).

Every ``import``/``from … import`` statement counts wherever it stands — at module level, inside a
function (a deferred import) or under ``if TYPE_CHECKING:`` — because each is a dependency the
module's author chose. Relative imports are resolved against the importing module.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path


def module_name(folder: Path, path: Path, dotted: str) -> str:
    """The dotted name of the file ``path`` inside ``folder``, which is installed as ``dotted``:
    ``agent/screens/dump.py`` → ``cmbuyer.agent.screens.dump``; a package's ``__init__.py`` is the
    package's own name."""
    rel = path.relative_to(folder).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join([dotted, *parts])


def import_statements(tree: ast.AST, module: str, is_package: bool) -> list[list[str]]:
    """The absolute names each import statement of one module brings in, a list per statement (the
    module first, then ``module.name`` for each imported name); relative imports are resolved
    against ``module`` (a package's own name is its first level, a module's is its parent)."""
    statements: list[list[str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                drop = node.level - 1 if is_package else node.level
                anchor = anchor[: len(anchor) - drop] if drop else anchor
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            statements.append([base, *(f"{base}.{a.name}" for a in node.names)])
        elif isinstance(node, ast.Import):
            statements.extend([a.name] for a in node.names)
    return statements


@dataclass(frozen=True)
class Source:
    """One module of the folder: its dotted name, file and parsed tree."""

    name: str
    path: Path
    tree: ast.Module

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"


def sources(folder: Path, dotted: str) -> list[Source]:
    """Every ``*.py`` under ``folder`` (installed as ``dotted``), parsed, sorted by path."""
    return [
        Source(module_name(folder, path, dotted), path, ast.parse(path.read_text(encoding="utf-8")))
        for path in sorted(folder.rglob("*.py"))
    ]


def _owner(name: str, modules: set[str]) -> str | None:
    """The module ``name`` lives in: the longest dotted prefix of ``name`` that is a module of the
    folder (``cmbuyer.agent.screens.dump.Dump`` → ``cmbuyer.agent.screens.dump``), or None."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def graph(folder: Path, dotted: str, found: list[Source] | None = None) -> dict[str, set[str]]:
    """Module → the modules of the same folder it imports (by name or by importing a name from
    them), every import statement counted (see the module docstring); a module never lists itself.
    ``found``: the folder's :func:`sources` when the caller has read them already."""
    found = sources(folder, dotted) if found is None else found
    modules = {s.name for s in found}
    out: dict[str, set[str]] = {}
    for source in found:
        deps: set[str] = set()
        for base, *names in import_statements(source.tree, source.name, source.is_package):
            # ``from pkg import sub`` depends on the submodule; the package itself only when a name
            # is not a module (it is then defined in, or re-exported by, the package's __init__)
            owners = {_owner(name, modules) for name in names}
            if not names or any(name not in modules for name in names):
                owners.add(_owner(base, modules))
            deps.update(o for o in owners if o is not None and o != source.name)
        out[source.name] = deps
    return out


def reach(edges: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports directly or through others (not ``start`` itself unless a
    circle leads back to it)."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for dep in edges.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of a graph: its strongly connected components of more than one module
    (Tarjan's algorithm, iterative), each sorted, the list sorted; empty when the graph is acyclic."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(edges.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                dep = todo.pop()
                if dep not in index:
                    index[dep] = low[dep] = len(index)
                    stack.append(dep)
                    on_stack.add(dep)
                    work.append((dep, sorted(edges.get(dep, ()))))
                elif dep in on_stack:
                    low[node] = min(low[node], index[dep])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def write_tree(folder: Path, files: dict[str, str]) -> Path:
    """A synthetic source folder for the layer tests' breaches: each ``{relative path: text}`` written
    under ``folder``, with an ``__init__.py`` in ``folder`` and in every folder below it. Returns
    ``folder``."""
    for rel, text in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in [path.parent, *path.parent.parents]:
            (parent / "__init__.py").touch()
            if parent == folder:
                break
        path.write_text(text, encoding="utf-8")
    return folder
