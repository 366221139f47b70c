"""Pack files' text and JSON turned into a :class:`~cmbuyer.agent.screens.packmodel.Pack` (pure: no I/O).

A pack is JSON validated by ``shared/schemas/selector_pack.json`` (``pack_format`` 2) and bound to one
Pinduoduo ``versionName`` + ``versionCode`` (docs/agent.md "Authoring a pack"). Every top-level
selector names the evidence bundles that justified it; the compiler checks each name exists in the
pack's ``evidence`` (the files themselves are checked by :mod:`cmbuyer.agent.pack.evidence`).

Load-time safety (the boundaries stay in code; a pack can only narrow them): every selector the flow
may TAP (buy paths, the layout's confirm control, quantity controls, dismissals) must name a text,
desc or resource-id, and none of its text/desc regexes may match a payment-denylist word or a submit
text (:data:`TAP_PROBES`); an unknown layout or screen name is refused by the schema; a layout needs
readers for the screens it uses; handoff payment modes may not name 先用后付/免密/余额 modes.

Errors: :class:`~cmbuyer.agent.errors.PackError` (reason ``NO_SELECTOR_PACK``) for an invalid pack —
the agent then refuses to claim. Its text is ONE line, ``<JSON path>: <problem>`` (jsonschema's
notation, e.g. ``$.layouts[0].id``); :mod:`cmbuyer.agent.pack.files` prefixes the file name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from cmbuyer.agent.errors import PackError
from cmbuyer.agent.screens import safety
from cmbuyer.agent.screens.after_submit import DEEP_LINK_RE, AfterSubmit
from cmbuyer.agent.screens.packmodel import (
    AddressBlock,
    CommonAncestor,
    Dismissal,
    Layout,
    MoneyReader,
    Pack,
    PanelReader,
    PaymentSpec,
    ScreenRule,
    Selector,
    TileName,
)
from cmbuyer.agent.screens.text import normalize
from cmbuyer.schemas import SchemaError, explain, validate
from cmbuyer.schemas.strictjson import StrictJSONError, loads_strict, shape_problem
from cmbuyer.schemas.text import normalize_sku

MAX_PACK_BYTES = 1024 * 1024
# Checked on the text before parsing (a hostile file must not exhaust the parser): the shipped packs
# nest 7 deep and hold < 1,000 values.
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
# Handoff modes a pack may declare: these words mean the tap itself may pay (docs/agent.md "Payment safety").
UNSAFE_MODE_WORDS = ("先用后付", "免密", "余额", "0元")

# the member names jsonschema's ``json_path`` writes as ``.name`` (others as ``['name']``): one notation
# for every pack error, whether the schema, the compiler or the evidence check found it
_PLAIN_MEMBER = re.compile(r"[a-zA-Z][a-zA-Z0-9_]*", re.ASCII)


def json_path(parts: Sequence[str | int]) -> str:
    """``["evidence", "sim-product", "files"]`` → ``$.evidence['sim-product'].files`` (as jsonschema)."""
    out = "$"
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_MEMBER.fullmatch(part):
            out += f".{part}"
        else:
            out += "['" + part.replace("\\", "\\\\").replace("'", "\\'") + "']"
    return out


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
    return json_path([int(p) if p.isdigit() else p for p in where.split("/")])


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


def _after_submit(spec: dict[str, Any] | None, evidence_ids: set[str]) -> AfterSubmit | None:
    """Compile the (schema-validated) ``after_submit`` section; None when the pack has none. Raises
    PackError for a deep link outside :data:`~cmbuyer.agent.screens.after_submit.DEEP_LINK_RE` or
    regexes without their named groups."""
    if spec is None:
        return None
    conf = spec["confirmation"]
    link = conf["order_list_deep_link"]
    if DEEP_LINK_RE.fullmatch(link) is None:
        raise PackError("after_submit deep link is not a plain Pinduoduo page link")
    where = "after_submit/confirmation"
    leave = _selector(conf["retention_dialog"]["leave"], f"{where}/retention_dialog/leave", evidence_ids)
    # the one tap after the submit tap (an unlabeled close icon may be declared: words only)
    check_tap_words(leave, f"{where}/retention_dialog/leave")
    card = conf["order_card"]
    rule = conf["order_list"]
    return AfterSubmit(
        retention_dialog=_selector(conf["retention_dialog"]["when"], f"{where}/retention_dialog/when", evidence_ids),
        retention_leave=leave,
        order_list_link=link,
        order_list=ScreenRule(
            all=tuple(_selector(s, f"{where}/order_list/all", evidence_ids) for s in rule["all"]),
            none=tuple(_selector(s, f"{where}/order_list/none", evidence_ids) for s in rule.get("none", [])),
        ),
        order_card=_selector(card["selector"], f"{where}/order_card/selector", evidence_ids),
        card_title=_selector(card["title"], f"{where}/order_card/title", evidence_ids) if "title" in card else None,
        card_amount=_money(card["amount"], f"{where}/order_card/amount", evidence_ids),
        card_order_sn=(
            _selector(card["order_sn"]["selector"], f"{where}/order_card/order_sn", evidence_ids),
            _regex(card["order_sn"]["regex"], f"{where}/order_card/order_sn/regex", "order_sn"),
        ),
        card_pending=_selector(card["pending"], f"{where}/order_card/pending", evidence_ids),
    )


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


def _one_line(text: str, limit: int = 240) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
