"""Selector packs: load, validate, compile and match (design §7.4).

A pack is JSON validated by ``shared/schemas/selector_pack.json`` and bound to one Pinduoduo
``versionName`` + ``versionCode``. Selectors match on NFKC-normalized text/desc (regex full-match),
class (regex full-match), resource-id (exact), boolean flags and structure (the parent / some ancestor matching a
selector, a descendant matching / not matching a selector). Every top-level selector names the
evidence bundles that justified it; the loader checks each name exists in the pack's ``evidence``.

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
from cmbuyer.agent.screens.dump import Dump, Node
from cmbuyer.agent.screens.text import normalize
from cmbuyer.schemas import SchemaError, validate
from cmbuyer.schemas.strictjson import StrictJSONError, loads_strict

MAX_PACK_BYTES = 1024 * 1024


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
                            ("enabled", self.enabled)):
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
class PanelReader:
    dimension_header: Selector | None = None
    group_terminators: tuple[Selector, ...] = ()
    option_tile: Selector | None = None
    unit_price: MoneyReader | None = None
    amount: MoneyReader | None = None
    quantity: Selector | None = None
    sku_label: Selector | None = None
    goods_id: tuple[Selector, re.Pattern[str]] | None = None


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
class Pack:
    """A loaded, validated, compiled selector pack."""

    id: str
    package: str
    version_name: str
    version_code: int
    recognition_order: tuple[str, ...]
    screens: dict[str, ScreenRule]
    controls: dict[str, Selector]
    readers: dict[str, PanelReader]
    dimension_roles: dict[str, tuple[str, ...]]
    dismissals: tuple[Dismissal, ...]
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)
    # the optional read-only confirmation after the tap (screens/after_submit.py); None = none
    after_submit: Any = field(repr=False, compare=False, default=None)

    def matches_version(self, version_name: str, version_code: int) -> bool:
        return self.version_name == version_name and self.version_code == version_code


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
    return PanelReader(
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
    screens = {
        name: ScreenRule(
            all=tuple(_selector(s, f"screens/{name}/all", ev) for s in rule["all"]),
            none=tuple(_selector(s, f"screens/{name}/none", ev) for s in rule.get("none", [])),
        )
        for name, rule in data["screens"].items()
    }
    controls = {k: _selector(v, f"controls/{k}", ev) for k, v in data["controls"].items()}
    readers = {k: _panel(v, f"readers/{k}", ev) for k, v in data["readers"].items()}
    return Pack(
        id=data["id"],
        package=data["app"]["package"],
        version_name=data["app"]["version_name"],
        version_code=data["app"]["version_code"],
        recognition_order=tuple(data["recognition_order"]),
        screens=screens,
        controls=controls,
        readers=readers,
        dimension_roles={k: tuple(normalize(x) for x in v) for k, v in data["dimension_roles"].items()},
        dismissals=tuple(
            Dismissal(d["id"], _selector(d["when"], f"dismissals/{d['id']}/when", ev),
                      _selector(d["tap"], f"dismissals/{d['id']}/tap", ev))
            for d in data["dismissals"]
        ),
        raw=data,
        after_submit=_after_submit(data.get("after_submit"), ev),
    )


def _after_submit(spec: dict[str, Any] | None, ev: set[str]) -> Any:
    from cmbuyer.agent.screens.after_submit import compile_after_submit  # it builds on this module

    return compile_after_submit(spec, ev)


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
