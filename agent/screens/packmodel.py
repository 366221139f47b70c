"""A compiled selector pack: the screens, controls, layouts and readers it declares, and how its
selectors match a dump (pure: no I/O; compiled from a pack file by :mod:`cmbuyer.agent.pack.compile`).

Selectors match on NFKC-normalized text/desc (regex full-match), class (regex full-match), resource-id
(exact), boolean flags and structure: the parent / some ancestor matching a selector, a descendant
matching / not matching a selector, and ``common_ancestor`` — the NEAREST ancestor that also holds a
node matching ``with`` (the two nodes' nearest common ancestor) matches ``is``. Real trees nest deeper
than a description suggests and their depth changes between releases, so a pack names relations that
hold at any depth; ``parent`` is for facts a capture shows to be one level (docs/agent.md "Writing a
pack from a capture without depending on nesting depth").

A pack declares one or more **layouts** (docs/agent.md "Layouts"): where the SKU options and the
quantity stepper live (``sku_panel`` — a separate sheet confirmed with a pack control, then the confirm
page — or ``confirm_order`` — inline on the order sheet that holds the submit control), the **buy
paths** on the product page and the **payment** row reader. The screen that holds the submit control is
``confirm_order`` on every layout.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from cmbuyer.agent.screens.dump import Dump, Node
from cmbuyer.agent.screens.text import normalize
from cmbuyer.schemas.text import normalize_sku


def _flag_test(flag: str, value: bool) -> Callable[[Node], bool]:
    return lambda node: bool(getattr(node, flag) == value)


@dataclass(frozen=True)
class Selector:
    """A compiled selector; ``spec`` is the raw JSON (kept for evidence / error messages)."""

    text: re.Pattern[str] | None = None
    desc: re.Pattern[str] | None = None
    cls: re.Pattern[str] | None = None
    resource_id: str | None = None
    clickable: bool | None = None
    selected: bool | None = None
    enabled: bool | None = None
    scrollable: bool | None = None
    parent: Selector | None = None
    ancestor: Selector | None = None
    has_descendant: Selector | None = None
    not_has_descendant: Selector | None = None
    common_ancestor: CommonAncestor | None = None
    evidence: tuple[str, ...] = ()

    @cached_property
    def constraints(self) -> tuple[tuple[str, Callable[[Node], bool]], ...]:
        """The declared constraints in check order, each ``(name, test)``; ``name`` is the pack key
        (``text``, ``desc``, ``class``, ``resource_id``, a flag, ``parent``, ``ancestor``,
        ``has_descendant``, ``not_has_descendant``). :meth:`matches` and :meth:`failed_constraints`
        both run exactly these tests, so an explanation (authoring/explain.py) cannot disagree with a
        match."""
        checks: list[tuple[str, Callable[[Node], bool]]] = []
        text, desc, cls, rid = self.text, self.desc, self.cls, self.resource_id
        if text is not None:
            checks.append(("text", lambda n: text.fullmatch(normalize(n.text)) is not None))
        if desc is not None:
            checks.append(("desc", lambda n: desc.fullmatch(normalize(n.desc)) is not None))
        if cls is not None:
            checks.append(("class", lambda n: cls.fullmatch(n.cls) is not None))
        if rid is not None:
            checks.append(("resource_id", lambda n: n.resource_id == rid))
        for flag in ("clickable", "selected", "enabled", "scrollable"):
            value = getattr(self, flag)
            if value is not None:
                checks.append((flag, _flag_test(flag, value)))
        parent, ancestor, has, has_not = self.parent, self.ancestor, self.has_descendant, self.not_has_descendant
        if parent is not None:
            checks.append(("parent", lambda n: n.parent is not None and parent.matches(n.parent)))
        if ancestor is not None:
            checks.append(("ancestor", lambda n: any(ancestor.matches(a) for a in n.ancestors())))
        if has is not None:
            checks.append(("has_descendant", lambda n: any(has.matches(d) for d in n.descendants())))
        if has_not is not None:
            checks.append(("not_has_descendant", lambda n: not any(has_not.matches(d) for d in n.descendants())))
        common = self.common_ancestor
        if common is not None:  # last: the costliest test runs only on nodes that passed the others
            checks.append(("common_ancestor", common.holds))
        return tuple(checks)

    def matches(self, node: Node) -> bool:
        """True when ``node`` passes every constraint (stops at the first that fails)."""
        return all(test(node) for _, test in self.constraints)

    def failed_constraints(self, node: Node) -> list[str]:
        """Names of every constraint ``node`` fails (empty = it matches); the tracing hook for
        ``inspect --explain``, never used to decide anything."""
        return [name for name, test in self.constraints if not test(node)]

    def find(self, dump: Dump) -> list[Node]:
        """Matching app-package nodes in document order (only the app's own windows count). Worked out once per dump
        (:meth:`Dump.remember`): the two dumps of a stable read and every reader of the screen share it."""
        found = dump.remember(self, lambda: tuple(n for n in dump.app_nodes() if self.matches(n)))
        return list(found)


@dataclass(frozen=True)
class CommonAncestor:
    """The relation ``{"with": S, "is": T}``: the node's nearest ancestor that has a descendant matching
    ``S`` outside the node's own subtree (the nearest common ancestor of the node and an ``S`` node)
    exists and matches ``T`` (any ancestor when ``T`` is None). Example (real order sheet): the price
    TextView's nearest common ancestor with the ``商品主图`` image is the goods card however deep the
    price sits in it."""

    with_: Selector
    is_: Selector | None = None

    def nearest(self, node: Node) -> Node | None:
        """The node's nearest ancestor holding a ``with`` node outside the node's own subtree, or None.
        Each level looks only at the branches it adds (its other children's subtrees), so the walk
        costs the size of that ancestor's subtree, not depth × size."""
        below = node
        for anc in node.ancestors():
            for branch in anc.children:
                if branch is not below and any(self.with_.matches(n) for n in (branch, *branch.descendants())):
                    return anc
            below = anc
        return None

    def holds(self, node: Node) -> bool:
        anc = self.nearest(node)
        return anc is not None and (self.is_ is None or self.is_.matches(anc))


@dataclass(frozen=True)
class MoneyReader:
    """An amount on screen: the text of the node ``selector`` finds, matched by ``regex`` (its group
    ``amount`` is the money, read by :func:`cmbuyer.agent.screens.text.match_amount`)."""

    selector: Selector
    regex: re.Pattern[str]


@dataclass(frozen=True)
class TileName:
    """Where an option tile's name is read (docs/agent.md "Readers (the order sheet)"): ``sources`` in order,
    the first that yields a non-empty value wins — ``desc`` (the tile's content-desc), ``name_child``
    (the one descendant ``name_child`` selects, e.g. id ``tv_content``), ``text`` (the tile's own
    text), ``only_text_child`` (the single descendant carrying text)."""

    sources: tuple[str, ...] = ("text", "only_text_child")
    name_child: Selector | None = None


@dataclass(frozen=True)
class PanelReader:
    """How one screen's readings are found (pack key ``readers.<screen>``): option-group headers and the
    nodes that end a group, option tiles and their names, unit price, amount, quantity, the SKU label and
    the goods id; None where the screen does not show it."""

    dimension_header: Selector | None = None
    group_terminators: tuple[Selector, ...] = ()
    option_tile: Selector | None = None
    unit_price: MoneyReader | None = None
    amount: MoneyReader | None = None
    quantity: Selector | None = None
    sku_label: Selector | None = None
    goods_id: tuple[Selector, re.Pattern[str]] | None = None
    tile_name: TileName = TileName()


@dataclass(frozen=True)
class ScreenRule:
    """How a screen is recognized: every selector of ``all`` finds a node and none of ``none`` does."""

    all: tuple[Selector, ...]
    none: tuple[Selector, ...] = ()

    def matches(self, dump: Dump) -> bool:
        return all(s.find(dump) for s in self.all) and not any(s.find(dump) for s in self.none)


@dataclass(frozen=True)
class Dismissal:
    """A popup the flow may close: when ``when`` finds a node, ``tap`` is the control it taps (checked
    as every tap selector at load, and by the payment denylist at the tap)."""

    id: str
    when: Selector
    tap: Selector


@dataclass(frozen=True)
class Layout:
    """One screen sequence (docs/agent.md "Layouts"). ``options_screen``/``quantity_screen`` are ``sku_panel`` or
    ``confirm_order``; ``to_confirm`` is the control that leaves the SKU sheet (None when the options
    already sit on the screen with the submit control)."""

    id: str
    options_screen: str
    quantity_screen: str
    to_confirm: Selector | None = None


@dataclass(frozen=True)
class PaymentSpec:
    """The payment row beside the submit control: ``row`` selects it, ``mode_regex`` (group ``mode``)
    extracts the mode name from its NFKC text, ``handoff_modes`` are the modes that hand off to an
    external app where a person confirms (anything else is unsafe)."""

    row: Selector
    mode_regex: re.Pattern[str]
    handoff_modes: tuple[str, ...]


@dataclass(frozen=True)
class Pack:
    """A loaded, validated, compiled selector pack."""

    id: str
    package: str
    version_name: str
    version_code: int
    recognition_order: tuple[str, ...]
    screens: dict[str, ScreenRule]
    controls: dict[str, Selector]
    layouts: tuple[Layout, ...]
    buy_paths: dict[str, Selector]
    payment: PaymentSpec
    readers: dict[str, PanelReader]
    # header synonyms (docs/agent.md "SKU model"): groups of option-group header texts that name one dimension (NFKC)
    dimension_aliases: tuple[tuple[str, ...], ...]
    dismissals: tuple[Dismissal, ...]
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)
    # the optional read-only confirmation after the tap (screens/after_submit.py AfterSubmit); None = none
    after_submit: Any = field(repr=False, compare=False, default=None)
    # rows with personal data that captures scrub (pack key privacy.rows; authoring/capture.py)
    privacy_rows: tuple[Selector, ...] = field(repr=False, compare=False, default=())
    # the recipient block captures scrub by structure (pack key address_block; authoring/capture.py)
    address_block: AddressBlock | None = field(repr=False, compare=False, default=None)

    def matches_version(self, version_name: str, version_code: int) -> bool:
        return self.version_name == version_name and self.version_code == version_code

    def layout_on(self, screen: str) -> Layout | None:
        """The layout whose options live on ``screen`` (the flow's recognition of the layout)."""
        return next((layout for layout in self.layouts if layout.options_screen == screen), None)

    def aliases_of(self, name: str) -> tuple[str, ...]:
        """Every header text that names the same dimension as ``name`` (NFKC, :func:`normalize_sku`): its alias
        group, or just ``name`` when no group holds it."""
        name = normalize_sku(name)
        return next((group for group in self.dimension_aliases if name in group), (name,))

    def task_dimension(self, header: str, task_dimensions: Iterable[str]) -> str | None:
        """The task dimension (one of ``task_dimensions``, as given) that the sheet's ``header`` stands for
        (docs/agent.md "SKU model"): the one spelled exactly like the header, else the one spelled with a
        synonym from the header's alias group. None when none does, or when two do (ambiguous: fail
        closed, the caller stops)."""
        names = list(task_dimensions)
        exact = [d for d in names if normalize_sku(d) == normalize_sku(header)]
        if exact:
            return exact[0] if len(exact) == 1 else None
        group = self.aliases_of(header)
        synonyms = [d for d in names if normalize_sku(d) in group]
        return synonyms[0] if len(synonyms) == 1 else None


@dataclass(frozen=True)
class AddressBlock:
    """The pack's ``address_block``: ``blocks`` (one selector per layout) find the node holding the
    recipient's name, phone and address (captures blank its whole subtree and black out its bounds,
    whatever the texts look like); on every screen in ``screens`` one must be found, else a capture of
    that screen is refused."""

    blocks: tuple[Selector, ...]
    screens: frozenset[str]

    def find(self, dump: Dump) -> list[Node]:
        """Every node some block selector matches, in document order."""
        found = {n.order: n for selector in self.blocks for n in selector.find(dump)}
        return [found[k] for k in sorted(found)]

    def contains(self, node: Node) -> bool:
        """True when ``node`` is a block or lies inside one."""
        return any(selector.matches(n) for selector in self.blocks for n in (node, *node.ancestors()))
