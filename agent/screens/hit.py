"""What a finger at one point of the screen would hit, read from a dump (docs/agent.md
"The last moment before the tap").

Used once, right before the submit tap: the topmost node at the tap point must be the submit control
or a node inside it. The dump does not state z-order directly, so the rule is built from what it does
state, and anything it cannot decide is an obstruction (fail closed):

- **Across windows.** Every window is a top-level child of ``<hierarchy>``. Their order in the file is
  not their z-order: uiautomator collects the window roots in a hash set, and the two real captures in
  tests/agent/fixtures/real_structures list the same three windows in two different orders; every root
  has ``drawing-order="0"``. So a node of *another* window whose bounds hold the point — a dialog window,
  a toast, another app's floating window, the status bar — means "cannot tell which is on top": no tap.
- **Within a window.** A parent is drawn before its children; two nodes on different branches are
  ordered by the ``drawing-order`` of their two ancestors that are siblings under their lowest common
  ancestor (later = on top; Android gives each child of a parent its own place). Document order is
  *not* a drawing order (a raised child may come first in the file), so a missing or equal
  ``drawing-order`` at that point is "cannot tell".

Bounds are what uiautomator reports (``[l,t][r,b]``, right/bottom exclusive); a node whose bounds do not
hold the point is not hit, whatever its children report.
"""

from __future__ import annotations

from dataclasses import dataclass

from cmbuyer.agent.screens.dump import Dump, Node


@dataclass(frozen=True)
class HitVerdict:
    """``clear`` when the target (or a node inside it) is the topmost node at the point; else
    ``why`` says what covers it or why the order cannot be told (short English, no screen text) and
    ``cover`` is the node found over it (None when the order could not be told at all)."""

    clear: bool
    why: str = ""
    cover: Node | None = None


def _path(node: Node) -> list[Node]:
    """Root → node."""
    return [*reversed(list(node.ancestors())), node]


def drawn_after(a: Node, b: Node) -> bool | None:
    """True when ``a`` is drawn after (over) ``b``, False when before, None when the dump cannot tell
    (different windows, or no distinct ``drawing-order`` on the siblings where their branches part)."""
    if a is b:
        return False
    pa, pb = _path(a), _path(b)
    if pa[0] is not pb[0]:
        return None  # two windows: their z-order is not in the dump
    i = 0
    while i < len(pa) and i < len(pb) and pa[i] is pb[i]:
        i += 1
    if i == len(pb):  # b is an ancestor of a: a parent is drawn before its children
        return True
    if i == len(pa):
        return False
    da, db = pa[i].drawing_order, pb[i].drawing_order
    if da is None or db is None or da == db:
        return None
    return da > db


def hit_test(dump: Dump, target: Node, point: tuple[int, int]) -> HitVerdict:
    """Is ``target`` (or a node inside it) the topmost node of ``dump`` at ``point``?

    Every node of every window whose bounds hold the point takes part. The answer is ``clear`` only
    when the point lies inside ``target`` and every node holding the point outside ``target``'s
    subtree is known to be drawn *under* some node of that subtree holding the point; any node known
    to be over it, or one whose order cannot be told, makes it not clear."""
    x, y = point
    if not target.bounds.contains(x, y):
        return HitVerdict(False, "the tap point lies outside the submit control")
    inside = {id(target), *(id(n) for n in target.descendants())}
    hits = [n for n in dump.nodes if n.bounds.contains(x, y)]
    own = [n for n in hits if id(n) in inside]
    for node in hits:
        if id(node) in inside:
            continue
        orders = [drawn_after(mine, node) for mine in own]
        if any(o is True for o in orders):
            continue
        if node.window() is not target.window():
            return HitVerdict(False, f"another window ({node.package or 'no package'}) at the tap point", node)
        if any(o is None for o in orders):
            return HitVerdict(False, "drawing order at the tap point cannot be told", node)
        return HitVerdict(False, "a node is drawn over the submit control", node)
    return HitVerdict(True)
