"""Selector packs: load, validate, compile and match (design §7.4).

A pack is JSON validated by ``shared/schemas/selector_pack.json`` (``pack_format`` 2) and bound to one
Pinduoduo ``versionName`` + ``versionCode``. It declares one or more **layouts** (design §7.6, issue 15
§1): where the SKU options and the quantity stepper live (``sku_panel`` — a separate sheet confirmed
with a pack control, then the confirm page — or ``confirm_order`` — inline on the order sheet that
holds the submit control), the **buy paths** on the product page (``single`` required, ``group``
optional; the agent setting picks one) and the **payment** row reader with the modes that hand off to
an external app. The screen that holds the submit control is ``confirm_order`` on every layout.
Selectors match on NFKC-normalized text/desc (regex full-match),
class (regex full-match), resource-id (exact), boolean flags and structure (the parent / some ancestor matching a
selector, a descendant matching / not matching a selector, and ``common_ancestor``: the NEAREST ancestor that
also holds a node matching ``with`` — the two nodes' nearest common ancestor — matches ``is``). Real trees
nest deeper than a description suggests and their depth changes between releases (issue 27), so a pack
names relations that hold at any depth; ``parent`` is for facts a capture shows to be one level. Every
top-level selector names the evidence bundles that justified it; the loader checks each name exists in
the pack's ``evidence``.

Load-time safety (the boundaries stay in code; a pack can only narrow them): every selector the flow
may TAP (buy paths, the layout's confirm control, quantity controls, dismissals) must name a text,
desc or resource-id, and none of its text/desc regexes may match a payment-denylist word or a submit
text (:data:`TAP_PROBES`); an unknown layout or screen name is refused by the schema; a layout needs
readers for the screens it uses; handoff payment modes may not name 先用后付/免密/余额 modes.

Evidence: each entry names its capture files (dump, screenshot, meta) by a path relative to the pack
file's directory and their SHA-256; :func:`load_pack` re-hashes them (:mod:`.evidence`). Which pack
serves a version (shipped vs the operator pack dir): :mod:`cmbuyer.agent.pack.resolve`.

Errors: :class:`~cmbuyer.agent.errors.PackError` (reason ``NO_SELECTOR_PACK``) for a missing, invalid
or mismatched pack — the agent then refuses to claim. Its text is ONE line, ``<JSON path>: <problem>``
(jsonschema's notation, e.g. ``$.layouts[0].id``), prefixed with the file name by :func:`load_pack`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from cmbuyer.agent.errors import PackError
from cmbuyer.agent.pack import evidence
from cmbuyer.agent.screens import safety
from cmbuyer.agent.screens.dump import Dump, Node
from cmbuyer.agent.screens.text import normalize
from cmbuyer.schemas import SchemaError, explain, validate
from cmbuyer.schemas.files import FileTooLarge, read_regular
from cmbuyer.schemas.strictjson import StrictJSONError, loads_strict, shape_problem
from cmbuyer.schemas.text import normalize_sku

MAX_PACK_BYTES = 1024 * 1024
# Checked on the text before parsing (issue 33): the shipped packs nest 7 deep and hold < 1,000 values.
MAX_PACK_DEPTH = 32
MAX_PACK_VALUES = 50_000
PACK_FORMAT = 2
BUY_PATHS = ("single", "group")
# Strings no tap selector may match (full-match of its text/desc regex): each payment-denylist word
# alone and inside typical labels, and the submit texts. A selector that matches any of them could
# aim a tap at a control the code refuses, so the pack is refused at load.
TAP_PROBES: tuple[str, ...] = (
    *safety.PAYMENT_DENYLIST,
    *(f"{w} ¥59" for w in safety.PAYMENT_DENYLIST),
    *(f"使用#{w}，更换支付方式" for w in ("微信支付", "支付宝", "多多支付", "先用后付")),
    "继续支付，仅¥59",
    "，仅¥59",
    "提交订单",
    "提交订单 ¥29.90",
    "提交订单¥29.9",
    "0元下单 ¥29.9",
    "免密支付",
    "用多多支付减7.53元",
)
# Handoff modes a pack may declare: these words mean the tap itself may pay (phone-facts).
UNSAFE_MODE_WORDS = ("先用后付", "免密", "余额", "0元")


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
        both run exactly these tests, so an explanation (screens/explain.py) cannot disagree with a
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
        """Matching app-package nodes in document order (scoped: design §7.3). Worked out once per dump
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
    selector: Selector
    regex: re.Pattern[str]


@dataclass(frozen=True)
class TileName:
    """Where an option tile's name is read (phone-facts "The order sheet"): ``sources`` in order,
    the first that yields a non-empty value wins — ``desc`` (the tile's content-desc), ``name_child``
    (the one descendant ``name_child`` selects, e.g. id ``tv_content``), ``text`` (the tile's own
    text), ``only_text_child`` (the single descendant carrying text)."""

    sources: tuple[str, ...] = ("text", "only_text_child")
    name_child: Selector | None = None


@dataclass(frozen=True)
class PanelReader:
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
    all: tuple[Selector, ...]
    none: tuple[Selector, ...] = ()

    def matches(self, dump: Dump) -> bool:
        return all(s.find(dump) for s in self.all) and not any(s.find(dump) for s in self.none)


@dataclass(frozen=True)
class Dismissal:
    id: str
    when: Selector
    tap: Selector


@dataclass(frozen=True)
class Layout:
    """One screen sequence (design §7.6). ``options_screen``/``quantity_screen`` are ``sku_panel`` or
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
    # header synonyms (issue 34): groups of option-group header texts that name one dimension (NFKC)
    dimension_aliases: tuple[tuple[str, ...], ...]
    dismissals: tuple[Dismissal, ...]
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)
    # the optional read-only confirmation after the tap (screens/after_submit.py); None = none
    after_submit: Any = field(repr=False, compare=False, default=None)
    # rows with personal data that captures scrub (pack key privacy.rows; agent/capture.py)
    privacy_rows: tuple[Selector, ...] = field(repr=False, compare=False, default=())
    # the recipient block captures scrub by structure (pack key address_block; agent/capture.py)
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


def _regex(source: str, where: str, group: str | None = None) -> re.Pattern[str]:
    try:
        pattern = re.compile(source)
    except re.error as exc:
        raise PackError(f"{_jp(where)}: bad regex ({exc})") from exc
    if group is not None and group not in pattern.groupindex:
        raise PackError(f"{_jp(where)}: the regex lacks the named group '{group}'")
    return pattern


def _jp(where: str) -> str:
    """``layouts/sku_sheet/to_confirm`` → ``$.layouts.sku_sheet.to_confirm`` (the JSON path an error names;
    list members are named by their id where they have one)."""
    return evidence.json_path([int(p) if p.isdigit() else p for p in where.split("/")])


def _selector(spec: dict[str, Any], where: str, evidence_ids: set[str]) -> Selector:
    for ref in spec.get("evidence", []):
        if ref not in evidence_ids:
            raise PackError(f"{_jp(where)}.evidence: unknown evidence id '{ref}'")

    def sub(key: str) -> Selector | None:
        return _selector(spec[key], f"{where}/{key}", evidence_ids) if key in spec else None

    return Selector(
        text=_regex(spec["text"], f"{where}/text") if "text" in spec else None,
        desc=_regex(spec["desc"], f"{where}/desc") if "desc" in spec else None,
        cls=_regex(spec["class"], f"{where}/class") if "class" in spec else None,
        resource_id=spec.get("resource_id"),
        clickable=spec.get("clickable"),
        selected=spec.get("selected"),
        enabled=spec.get("enabled"),
        scrollable=spec.get("scrollable"),
        parent=sub("parent"),
        ancestor=sub("ancestor"),
        has_descendant=sub("has_descendant"),
        not_has_descendant=sub("not_has_descendant"),
        common_ancestor=_common_ancestor(spec.get("common_ancestor"), f"{where}/common_ancestor", evidence_ids),
        evidence=tuple(spec.get("evidence", [])),
    )


def _common_ancestor(spec: dict[str, Any] | None, where: str, evidence_ids: set[str]) -> CommonAncestor | None:
    if spec is None:
        return None
    is_ = _selector(spec["is"], f"{where}/is", evidence_ids) if "is" in spec else None
    return CommonAncestor(_selector(spec["with"], f"{where}/with", evidence_ids), is_)


def _money(spec: dict[str, Any], where: str, ev: set[str]) -> MoneyReader:
    return MoneyReader(
        _selector(spec["selector"], f"{where}/selector", ev), _regex(spec["regex"], f"{where}/regex", "amount")
    )


def _panel(spec: dict[str, Any], where: str, ev: set[str]) -> PanelReader:
    def sel(key: str) -> Selector | None:
        return _selector(spec[key], f"{where}/{key}", ev) if key in spec else None

    goods = spec.get("goods_id")
    tile = spec.get("tile_name")
    tile_name = (
        TileName()
        if tile is None
        else TileName(
            tuple(tile["sources"]),
            _selector(tile["name_child"], f"{where}/tile_name/name_child", ev) if "name_child" in tile else None,
        )
    )
    if "name_child" in tile_name.sources and tile_name.name_child is None:
        raise PackError(f"{_jp(where)}.tile_name: uses name_child without a name_child selector")
    return PanelReader(
        tile_name=tile_name,
        dimension_header=sel("dimension_header"),
        group_terminators=tuple(
            _selector(t, f"{where}/group_terminators/{i}", ev) for i, t in enumerate(spec.get("group_terminators", []))
        ),
        option_tile=sel("option_tile"),
        unit_price=_money(spec["unit_price"], f"{where}/unit_price", ev) if "unit_price" in spec else None,
        amount=_money(spec["amount"], f"{where}/amount", ev) if "amount" in spec else None,
        quantity=sel("quantity"),
        sku_label=sel("sku_label"),
        goods_id=(
            _selector(goods["selector"], f"{where}/goods_id", ev),
            _regex(goods["regex"], f"{where}/goods_id/regex", "goods_id"),
        )
        if goods
        else None,
    )


def _probe_hit(pattern: re.Pattern[str] | None) -> str | None:
    if pattern is None:
        return None
    for probe in TAP_PROBES:
        if pattern.fullmatch(normalize(probe)) is not None:
            return probe
    return None


def check_tap_selector(selector: Selector, where: str) -> None:
    """Refuse a tap selector that could aim at a control the code refuses (payment denylist or submit
    text) or that names no text/desc/resource-id at all (it would match any clickable node)."""
    if selector.text is None and selector.desc is None and selector.resource_id is None:
        raise PackError(f"{_jp(where)}: a tap selector must name a text, desc or resource_id")
    check_tap_words(selector, where)


def check_tap_words(selector: Selector, where: str) -> None:
    """Refuse a tap selector whose text/desc pattern could match, or even spells, a payment-denylist
    word or the submit text (PackError). The runtime denylist still checks every tap."""
    for pattern in (selector.text, selector.desc):
        if _probe_hit(pattern) is not None or _literal_hit(pattern) is not None:
            raise PackError(f"{_jp(where)}: a tap selector could match a payment or submit control")


# Words a tap selector may not even spell: probes cannot enumerate every variant a regex accepts
# (``确认支付¥.*``, ``去支付[0-9]+``), but such a pattern names the word in its source.
_TAP_SOURCE_WORDS: tuple[str, ...] = (*safety.PAYMENT_DENYLIST, "提交订单", "0元下单")


def _literal_hit(pattern: re.Pattern[str] | None) -> str | None:
    if pattern is None:
        return None
    source = normalize(pattern.pattern)
    return next((w for w in _TAP_SOURCE_WORDS if w in source), None)


def _layouts(data: dict[str, Any], ev: set[str], readers: dict[str, PanelReader]) -> tuple[Layout, ...]:
    out: list[Layout] = []
    seen_screens: set[str] = set()
    for spec in data["layouts"]:
        lid, options, quantity = spec["id"], spec["options_screen"], spec["quantity_screen"]
        where = f"layouts/{lid}"
        if any(layout.id == lid for layout in out):
            raise PackError(f"{_jp(where)}: layout declared twice")
        if options == "confirm_order" and quantity != "confirm_order":
            raise PackError(f"{_jp(where)}: quantity cannot come before the options' screen")
        to_confirm = _selector(spec["to_confirm"], f"{where}/to_confirm", ev) if "to_confirm" in spec else None
        if (options == "sku_panel") != (to_confirm is not None):
            raise PackError(f"{_jp(where)}: to_confirm is required exactly when the options sit on the sku_panel")
        if options in seen_screens:  # recognition picks the layout by its options screen
            raise PackError(f"{_jp(where)}: another layout already has its options on {options}")
        seen_screens.add(options)
        for screen in {options, quantity, "confirm_order"}:
            if screen not in data["screens"]:
                raise PackError(f"{_jp(where)}: uses the screen {screen}, which the pack does not recognize")
            if screen not in readers:
                raise PackError(f"{_jp(where)}: needs a reader for {screen}")
        if readers[options].dimension_header is None or readers[options].option_tile is None:
            raise PackError(f"{_jp(where)}: the {options} reader lacks dimension_header/option_tile")
        if readers[quantity].quantity is None:
            raise PackError(f"{_jp(where)}: the {quantity} reader lacks quantity")
        confirm = readers["confirm_order"]
        if (
            confirm.amount is None
            or confirm.unit_price is None
            or confirm.quantity is None
            or confirm.dimension_header is None
            or confirm.option_tile is None
        ):
            raise PackError(f"{_jp(where)}: the confirm_order reader must read options, unit price, quantity, amount")
        if to_confirm is not None:
            check_tap_selector(to_confirm, f"{where}/to_confirm")
        out.append(Layout(lid, options, quantity, to_confirm))
    return tuple(out)


def _payment(spec: dict[str, Any], ev: set[str]) -> PaymentSpec:
    modes = tuple(normalize(m) for m in spec["handoff_modes"])
    for mode in modes:
        if any(word in mode for word in UNSAFE_MODE_WORDS):
            raise PackError(f"$.payment.handoff_modes: {mode!r} can pay without a person")
    return PaymentSpec(
        _selector(spec["row"], "payment/row", ev), _regex(spec["mode_regex"], "payment/mode_regex", "mode"), modes
    )


def compile_pack(data: Any) -> Pack:
    """Validate ``data`` against the pack schema and compile it. Raises PackError."""
    try:
        validate("selector_pack", data)
    except SchemaError as exc:
        where = explain("selector_pack", data)
        if where is None:  # validate and explain disagree: still a refusal
            raise PackError(f"$: does not match the pack schema ({exc})") from exc
        raise PackError(f"{where[0]}: {_one_line(where[1], 160)}") from None
    ev = set(data["evidence"])
    for screen in data["recognition_order"]:
        if screen not in data["screens"]:
            raise PackError(f"$.recognition_order: names the undefined screen {screen}")
    for screen in data["screens"]:
        if screen not in data["recognition_order"]:
            raise PackError(f"$.recognition_order: the screen {screen} is missing")
    screens = {
        name: ScreenRule(
            all=tuple(_selector(s, f"screens/{name}/all/{i}", ev) for i, s in enumerate(rule["all"])),
            none=tuple(_selector(s, f"screens/{name}/none/{i}", ev) for i, s in enumerate(rule.get("none", []))),
        )
        for name, rule in data["screens"].items()
    }
    controls = {k: _selector(v, f"controls/{k}", ev) for k, v in data["controls"].items()}
    for name, selector in controls.items():
        if name != "submit":
            check_tap_selector(selector, f"controls/{name}")
    readers = {k: _panel(v, f"readers/{k}", ev) for k, v in data["readers"].items()}
    buy_paths = {k: _selector(v, f"buy_paths/{k}", ev) for k, v in data["buy_paths"].items()}
    for name, selector in buy_paths.items():
        check_tap_selector(selector, f"buy_paths/{name}")
    dismissals = tuple(
        Dismissal(
            d["id"],
            _selector(d["when"], f"dismissals/{d['id']}/when", ev),
            _selector(d["tap"], f"dismissals/{d['id']}/tap", ev),
        )
        for d in data["dismissals"]
    )
    for rule in dismissals:
        check_tap_selector(rule.tap, f"dismissals/{rule.id}/tap")
    return Pack(
        id=data["id"],
        package=data["app"]["package"],
        version_name=data["app"]["version_name"],
        version_code=data["app"]["version_code"],
        recognition_order=tuple(data["recognition_order"]),
        screens=screens,
        controls=controls,
        layouts=_layouts(data, ev, readers),
        buy_paths=buy_paths,
        payment=_payment(data["payment"], ev),
        readers=readers,
        dimension_aliases=_aliases(data["dimension_aliases"]),
        dismissals=dismissals,
        raw=data,
        after_submit=_after_submit(data.get("after_submit"), ev),
        privacy_rows=_privacy_rows(data.get("privacy"), ev),
        address_block=_address_block(data.get("address_block"), ev),
    )


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


def _address_block(spec: dict[str, Any] | None, ev: set[str]) -> AddressBlock | None:
    if spec is None:
        return None
    blocks = tuple(_selector(b, f"address_block/blocks/{i}", ev) for i, b in enumerate(spec["blocks"]))
    return AddressBlock(blocks, frozenset(spec["screens"]))


def _privacy_rows(spec: dict[str, Any] | None, ev: set[str]) -> tuple[Selector, ...]:
    """The optional ``privacy.rows`` selectors (address / recipient rows); never tapped, only scrubbed."""
    if spec is None:
        return ()
    return tuple(_selector(row, f"privacy/rows/{i}", ev) for i, row in enumerate(spec["rows"]))


def _after_submit(spec: dict[str, Any] | None, ev: set[str]) -> Any:
    from cmbuyer.agent.screens.after_submit import compile_after_submit  # it builds on this module

    return compile_after_submit(spec, ev)


def _aliases(spec: list[list[str]]) -> tuple[tuple[str, ...], ...]:
    """The alias groups, NFKC; one header text may sit in one group only (else a header would name two
    dimensions)."""
    out = tuple(tuple(dict.fromkeys(normalize_sku(h) for h in group)) for group in spec)
    seen: set[str] = set()
    for i, group in enumerate(out):
        for header in group:
            if header in seen:
                raise PackError(f"$.dimension_aliases[{i}]: the header {header!r} is in two groups")
            seen.add(header)
    return out


def parse_pack_text(text: str | bytes) -> Pack:
    """Parse and compile one pack's bytes (no evidence check: there is no directory to read it from).
    Raises PackError ``$…: <problem>``."""
    return compile_pack(parse_pack_json(text))


def parse_pack_json(text: str | bytes) -> Any:
    """Strict JSON of a pack file (no duplicate keys, NaN or bad UTF-8; at most MAX_PACK_BYTES, nested
    at most MAX_PACK_DEPTH deep, at most MAX_PACK_VALUES values — both checked before parsing).
    Raises PackError ``$: <problem>``."""
    if len(text) > MAX_PACK_BYTES:
        raise PackError(f"$: pack file larger than {MAX_PACK_BYTES} bytes")
    problem = pack_shape_problem(text)
    if problem is not None:
        raise PackError(f"$: {problem}")
    try:
        return loads_strict(text, allow_floats=True)
    except StrictJSONError as exc:
        raise PackError(f"$: not valid strict JSON ({_one_line(_syntax_error_at(text) or str(exc))})") from exc


def pack_shape_problem(text: str | bytes) -> str | None:
    """Why a pack file's text is too deep or holds too many values to be parsed, or None
    (:func:`cmbuyer.schemas.strictjson.shape_problem` with the pack limits)."""
    return shape_problem(text, max_depth=MAX_PACK_DEPTH, max_values=MAX_PACK_VALUES)


def _syntax_error_at(text: str | bytes) -> str | None:
    """Where a hand-edited pack stops being JSON (``Expecting ',' delimiter at line 12 column 5``) —
    the strict decoder only says "not strict JSON" —, or None when the text is plain JSON and a strict
    rule failed (duplicate key, NaN, byte order mark: the strict decoder's own words say which)."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    except (ValueError, RecursionError):  # bad UTF-8 (UnicodeDecodeError is a ValueError), nesting
        return None
    return None


def load_pack(path: str | Path, *, verify_evidence: bool = True) -> Pack:
    """Load, validate and compile the pack file ``path`` and (unless ``verify_evidence`` is False:
    pack authoring tools only) re-hash its evidence files, relative to the file's directory.

    Raises PackError with ONE line ``<file name>: <JSON path>: <problem>``, e.g.
    ``pdd-9.0.0.json: $.layouts[0].id: 'foo' is not one of ['sku_sheet', 'order_sheet']``."""
    return load_pack_file(Path(path), verify_evidence=verify_evidence)[1]


def load_pack_file(path: Path, *, verify_evidence: bool = True) -> tuple[Any, Pack]:
    """:func:`load_pack` that also returns the parsed JSON (the evidence entries, for callers that
    cache on the evidence files' stats). Raises PackError as :func:`load_pack`."""
    try:
        raw = read_regular(path, MAX_PACK_BYTES)
    except FileTooLarge:
        raise PackError(f"{path.name}: $: pack file larger than {MAX_PACK_BYTES} bytes") from None
    except OSError as exc:
        raise PackError(f"{path.name}: $: cannot read the file ({exc.strerror or exc.__class__.__name__})") from exc
    try:
        data = parse_pack_json(raw)
        pack = compile_pack(data)
        if verify_evidence:
            evidence.verify_evidence(data, path.parent)
    except PackError as exc:
        raise PackError(f"{path.name}: {exc}") from None
    return data, pack


def _one_line(text: str, limit: int = 240) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def shipped_pack_dir() -> Path:
    """The directory of the packs inside the installed package (``cmbuyer/agent/packs``)."""
    root = resources.files("cmbuyer.agent.packs")
    if not isinstance(root, Path):  # a zipped install: packs and their evidence must be plain files
        raise PackError("$: the shipped packs are not plain files (zipped install?)")
    return root


def shipped_packs() -> list[Pack]:
    """Every pack under ``cmbuyer/agent/packs/*.json`` (evidence verified), sorted by file name, through
    the operator-dir loader's per-file cache (no re-hashing on every call). A broken shipped pack
    raises PackError (a release defect)."""
    from cmbuyer.agent.pack.resolve import scan  # packdir builds on this module

    found = scan(None, check_permissions=False).shipped
    broken = next((f.error for f in found if f.error is not None), None)
    if broken is not None:
        raise PackError(broken)
    return [f.pack for f in found if f.pack is not None]


def pack_for_version(version_name: str, version_code: int, extra_dir: Path | None = None) -> Pack:
    """The one pack for exactly this version, shipped or in the operator pack dir ``extra_dir``
    (without the permission check). Kept for callers of the older API; see
    :func:`cmbuyer.agent.pack.resolve.resolve_pack`. Raises PackError."""
    from cmbuyer.agent.pack.resolve import resolve_pack  # packdir builds on this module

    return resolve_pack(version_name, version_code, extra_dir, check_permissions=False)
