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
selector, a descendant matching / not matching a selector). Every top-level selector names the
evidence bundles that justified it; the loader checks each name exists in the pack's ``evidence``.

Load-time safety (the boundaries stay in code; a pack can only narrow them): every selector the flow
may TAP (buy paths, the layout's confirm control, quantity controls, dismissals) must name a text,
desc or resource-id, and none of its text/desc regexes may match a payment-denylist word or a submit
text (:data:`TAP_PROBES`); an unknown layout or screen name is refused by the schema; a layout needs
readers for the screens it uses; handoff payment modes may not name 先用后付/免密/余额 modes.

Errors: :class:`~cmbuyer.agent.errors.PackError` (reason ``NO_SELECTOR_PACK``) for a missing, invalid
or mismatched pack — the agent then refuses to claim.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from cmbuyer.agent.errors import PackError
from cmbuyer.agent.screens import safety
from cmbuyer.agent.screens.dump import Dump, Node
from cmbuyer.agent.screens.text import normalize
from cmbuyer.schemas import SchemaError, validate
from cmbuyer.schemas.strictjson import StrictJSONError, loads_strict

MAX_PACK_BYTES = 1024 * 1024
PACK_FORMAT = 2
BUY_PATHS = ("single", "group")
# Strings no tap selector may match (full-match of its text/desc regex): each payment-denylist word
# alone and inside typical labels, and the submit texts. A selector that matches any of them could
# aim a tap at a control the code refuses, so the pack is refused at load.
TAP_PROBES: tuple[str, ...] = (
    *safety.PAYMENT_DENYLIST,
    *(f"{w} ¥59" for w in safety.PAYMENT_DENYLIST),
    *(f"使用#{w}，更换支付方式" for w in ("微信支付", "支付宝", "多多支付", "先用后付")),
    "继续支付，仅¥59", "，仅¥59", "提交订单", "提交订单 ¥29.90", "提交订单¥29.9", "0元下单 ¥29.9",
    "免密支付", "用多多支付减7.53元",
)
# Handoff modes a pack may declare: these words mean the tap itself may pay (phone-facts).
UNSAFE_MODE_WORDS = ("先用后付", "免密", "余额", "0元")


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
    evidence: tuple[str, ...] = ()

    def matches(self, node: Node) -> bool:
        if self.text is not None and self.text.fullmatch(normalize(node.text)) is None:
            return False
        if self.desc is not None and self.desc.fullmatch(normalize(node.desc)) is None:
            return False
        if self.cls is not None and self.cls.fullmatch(node.cls) is None:
            return False
        if self.resource_id is not None and node.resource_id != self.resource_id:
            return False
        for flag, value in (("clickable", self.clickable), ("selected", self.selected),
                            ("enabled", self.enabled), ("scrollable", self.scrollable)):
            if value is not None and getattr(node, flag) != value:
                return False
        if self.parent is not None and (node.parent is None or not self.parent.matches(node.parent)):
            return False
        if self.ancestor is not None and not any(self.ancestor.matches(a) for a in node.ancestors()):
            return False
        if self.has_descendant is not None and not any(
                self.has_descendant.matches(d) for d in node.descendants()):
            return False
        return not (self.not_has_descendant is not None and any(
            self.not_has_descendant.matches(d) for d in node.descendants()))

    def find(self, dump: Dump) -> list[Node]:
        """Matching app-package nodes in document order (scoped: design §7.3)."""
        return [n for n in dump.app_nodes() if self.matches(n)]


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
    dimension_roles: dict[str, tuple[str, ...]]
    dismissals: tuple[Dismissal, ...]
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)
    # the optional read-only confirmation after the tap (screens/after_submit.py); None = none
    after_submit: Any = field(repr=False, compare=False, default=None)
    # rows with personal data that captures scrub (pack key privacy.rows; agent/capture.py)
    privacy_rows: tuple[Selector, ...] = field(repr=False, compare=False, default=())

    def matches_version(self, version_name: str, version_code: int) -> bool:
        return self.version_name == version_name and self.version_code == version_code

    def layout_on(self, screen: str) -> Layout | None:
        """The layout whose options live on ``screen`` (the flow's recognition of the layout)."""
        return next((layout for layout in self.layouts if layout.options_screen == screen), None)

    def role_of(self, header: str) -> str | None:
        """The task role (``color``/``size``) a dimension header carries, or None (unmapped)."""
        return next((role for role, names in self.dimension_roles.items() if header in names), None)


def _regex(source: str, where: str, group: str | None = None) -> re.Pattern[str]:
    try:
        pattern = re.compile(source)
    except re.error as exc:
        raise PackError(f"bad regex at {where}") from exc
    if group is not None and group not in pattern.groupindex:
        raise PackError(f"regex at {where} lacks the named group {group}")
    return pattern


def _selector(spec: dict[str, Any], where: str, evidence_ids: set[str]) -> Selector:
    for ref in spec.get("evidence", []):
        if ref not in evidence_ids:
            raise PackError(f"unknown evidence id at {where}")

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
        evidence=tuple(spec.get("evidence", [])),
    )


def _money(spec: dict[str, Any], where: str, ev: set[str]) -> MoneyReader:
    return MoneyReader(_selector(spec["selector"], f"{where}/selector", ev),
                       _regex(spec["regex"], f"{where}/regex", "amount"))


def _panel(spec: dict[str, Any], where: str, ev: set[str]) -> PanelReader:
    def sel(key: str) -> Selector | None:
        return _selector(spec[key], f"{where}/{key}", ev) if key in spec else None

    goods = spec.get("goods_id")
    tile = spec.get("tile_name")
    tile_name = TileName() if tile is None else TileName(
        tuple(tile["sources"]),
        _selector(tile["name_child"], f"{where}/tile_name/name_child", ev) if "name_child" in tile else None)
    if "name_child" in tile_name.sources and tile_name.name_child is None:
        raise PackError(f"{where}/tile_name uses name_child without a name_child selector")
    return PanelReader(
        tile_name=tile_name,
        dimension_header=sel("dimension_header"),
        group_terminators=tuple(_selector(t, f"{where}/group_terminators", ev)
                                for t in spec.get("group_terminators", [])),
        option_tile=sel("option_tile"),
        unit_price=_money(spec["unit_price"], f"{where}/unit_price", ev) if "unit_price" in spec else None,
        amount=_money(spec["amount"], f"{where}/amount", ev) if "amount" in spec else None,
        quantity=sel("quantity"),
        sku_label=sel("sku_label"),
        goods_id=(_selector(goods["selector"], f"{where}/goods_id", ev),
                  _regex(goods["regex"], f"{where}/goods_id/regex", "goods_id")) if goods else None,
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
        raise PackError(f"tap selector at {where} names no text, desc or resource_id")
    check_tap_words(selector, where)


def check_tap_words(selector: Selector, where: str) -> None:
    """Refuse a tap selector whose text/desc pattern could match, or even spells, a payment-denylist
    word or the submit text (PackError). The runtime denylist still checks every tap."""
    for pattern in (selector.text, selector.desc):
        if _probe_hit(pattern) is not None or _literal_hit(pattern) is not None:
            raise PackError(f"tap selector at {where} could match a payment or submit control")


# Words a tap selector may not even spell: probes cannot enumerate every variant a regex accepts
# (``确认支付¥.*``, ``去支付[0-9]+``), but such a pattern names the word in its source.
_TAP_SOURCE_WORDS: tuple[str, ...] = (*safety.PAYMENT_DENYLIST, "提交订单", "0元下单")


def _literal_hit(pattern: re.Pattern[str] | None) -> str | None:
    if pattern is None:
        return None
    source = normalize(pattern.pattern)
    return next((w for w in _TAP_SOURCE_WORDS if w in source), None)


def _layouts(data: dict[str, Any], ev: set[str], readers: dict[str, PanelReader]) -> tuple[Layout, ...]:
    out = []
    seen_screens: set[str] = set()
    for spec in data["layouts"]:
        lid, options, quantity = spec["id"], spec["options_screen"], spec["quantity_screen"]
        where = f"layouts/{lid}"
        if any(layout.id == lid for layout in out):
            raise PackError(f"{where} declared twice")
        if options == "confirm_order" and quantity != "confirm_order":
            raise PackError(f"{where}: quantity cannot come before the options' screen")
        to_confirm = _selector(spec["to_confirm"], f"{where}/to_confirm", ev) if "to_confirm" in spec else None
        if (options == "sku_panel") != (to_confirm is not None):
            raise PackError(f"{where}: to_confirm is required exactly when the options sit on the sku_panel")
        if options in seen_screens:  # recognition picks the layout by its options screen
            raise PackError(f"{where}: another layout already has its options on {options}")
        seen_screens.add(options)
        for screen in {options, quantity, "confirm_order"}:
            if screen not in data["screens"]:
                raise PackError(f"{where} uses the screen {screen}, which the pack does not recognize")
            if screen not in readers:
                raise PackError(f"{where} needs a reader for {screen}")
        if readers[options].dimension_header is None or readers[options].option_tile is None:
            raise PackError(f"{where}: the {options} reader lacks dimension_header/option_tile")
        if readers[quantity].quantity is None:
            raise PackError(f"{where}: the {quantity} reader lacks quantity")
        confirm = readers["confirm_order"]
        if confirm.amount is None or confirm.unit_price is None or confirm.quantity is None \
                or confirm.dimension_header is None or confirm.option_tile is None:
            raise PackError(f"{where}: the confirm_order reader must read options, unit price, quantity, amount")
        if to_confirm is not None:
            check_tap_selector(to_confirm, f"{where}/to_confirm")
        out.append(Layout(lid, options, quantity, to_confirm))
    return tuple(out)


def _payment(spec: dict[str, Any], ev: set[str]) -> PaymentSpec:
    modes = tuple(normalize(m) for m in spec["handoff_modes"])
    for mode in modes:
        if any(word in mode for word in UNSAFE_MODE_WORDS):
            raise PackError("payment/handoff_modes names a mode that can pay without a person")
    return PaymentSpec(_selector(spec["row"], "payment/row", ev),
                       _regex(spec["mode_regex"], "payment/mode_regex", "mode"), modes)


def compile_pack(data: Any) -> Pack:
    """Validate ``data`` against the pack schema and compile it. Raises PackError."""
    try:
        validate("selector_pack", data)
    except SchemaError as exc:
        raise PackError(f"pack does not match its schema ({exc})") from exc
    ev = set(data["evidence"])
    for screen in data["recognition_order"]:
        if screen not in data["screens"]:
            raise PackError(f"recognition_order names an undefined screen {screen}")
    for screen in data["screens"]:
        if screen not in data["recognition_order"]:
            raise PackError(f"screen {screen} is missing from recognition_order")
    screens = {
        name: ScreenRule(
            all=tuple(_selector(s, f"screens/{name}/all", ev) for s in rule["all"]),
            none=tuple(_selector(s, f"screens/{name}/none", ev) for s in rule.get("none", [])),
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
        Dismissal(d["id"], _selector(d["when"], f"dismissals/{d['id']}/when", ev),
                  _selector(d["tap"], f"dismissals/{d['id']}/tap", ev))
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
        dimension_roles=_roles(data["dimension_roles"]),
        dismissals=dismissals,
        raw=data,
        after_submit=_after_submit(data.get("after_submit"), ev),
        privacy_rows=_privacy_rows(data.get("privacy"), ev),
    )


def _privacy_rows(spec: dict[str, Any] | None, ev: set[str]) -> tuple[Selector, ...]:
    """The optional ``privacy.rows`` selectors (address / recipient rows); never tapped, only scrubbed."""
    if spec is None:
        return ()
    return tuple(_selector(row, f"privacy/rows/{i}", ev) for i, row in enumerate(spec["rows"]))


def _after_submit(spec: dict[str, Any] | None, ev: set[str]) -> Any:
    from cmbuyer.agent.screens.after_submit import compile_after_submit  # it builds on this module

    return compile_after_submit(spec, ev)


def _roles(spec: dict[str, list[str]]) -> dict[str, tuple[str, ...]]:
    """Header text → role map, inverted per role; one header text may carry one role only."""
    out = {role: tuple(normalize(h) for h in headers) for role, headers in spec.items()}
    seen: set[str] = set()
    for headers in out.values():
        for header in headers:
            if header in seen:
                raise PackError("a dimension header is mapped to two roles")
            seen.add(header)
    return out


def parse_pack_text(text: str | bytes) -> Pack:
    if len(text) > MAX_PACK_BYTES:
        raise PackError("pack file too large")
    try:
        data = loads_strict(text, allow_floats=True)
    except StrictJSONError as exc:
        raise PackError("pack is not valid strict JSON (duplicate keys, NaN, bad UTF-8 …)") from exc
    return compile_pack(data)


def load_pack(path: str | Path) -> Pack:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise PackError("cannot read pack file") from exc
    return parse_pack_text(raw)


def shipped_packs() -> list[Pack]:
    """Every pack under ``cmbuyer/agent/packs/*.json``, sorted by id. A broken shipped pack raises."""
    packs = []
    for entry in sorted(resources.files("cmbuyer.agent.packs").iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".json"):
            packs.append(parse_pack_text(entry.read_bytes()))
    return packs


def iter_pack_candidates(extra_dir: Path | None = None) -> Iterator[Pack]:
    """Shipped packs, then packs in ``extra_dir`` (operator-authored, e.g. $CMBUYER_AGENT_PACK_DIR)."""
    yield from shipped_packs()
    if extra_dir is not None and extra_dir.is_dir():
        for path in sorted(extra_dir.glob("*.json")):
            yield load_pack(path)


def pack_for_version(version_name: str, version_code: int, extra_dir: Path | None = None) -> Pack:
    """The one pack for exactly this version. None → PackError; two → PackError (ambiguous)."""
    found = [p for p in iter_pack_candidates(extra_dir) if p.matches_version(version_name, version_code)]
    if not found:
        raise PackError(f"no selector pack for app version {version_name} ({version_code})")
    if len(found) > 1:
        raise PackError("more than one selector pack for this app version")
    return found[0]
