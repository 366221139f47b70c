"""Scenario files: loading, schema check, and the typed per-phone configuration.

A scenario is YAML or JSON (schema: ``assets/scenario.schema.json``). It describes the
catalogue (goods ids, titles, SKU matrix with prices and stock), the app version, the
outcome after submit, latency and faults; ``phones:`` overrides any of the per-phone
keys for one serial. :meth:`Scenario.for_phone` returns a fresh deep copy each time, so
two phones never share mutable state (a price change on one does not touch the other).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from .faults import validate_fault
from .prices import to_price

OUTCOMES = (
    "ORDER_CREATED",
    "PAYMENT_HANDOFF",
    "SECURITY_CHALLENGE",
    "BLANK",
    "EXTERNAL_CASHIER_ALIPAY",
    "EXTERNAL_CASHIER_WECHAT",
    "PAID",
)
LAYOUTS = ("sku_sheet", "order_sheet")
# docs/phonesim.md "The order-sheet layout": every public capture of newer versions shows the order sheet
ORDER_SHEET_FROM_VERSION_CODE = 82200


class ScenarioError(ValueError):
    """The scenario file or dict is invalid; the message names the offending path."""


@dataclass
class Sku:
    """One cell of the SKU matrix: option per dimension (dimension order), unit price in yuan, stock."""

    options: tuple[str, ...]
    price: Decimal
    stock: int


@dataclass
class Dimension:
    """One SKU dimension: header text, option names (raw, leading spaces kept) and tile shape.

    ``tiles`` is ``"text"`` (a clickable TextView per option) or ``"image"`` (a ViewGroup whose
    content-desc is the name, with image, 打开大图, stock badge and ``tv_content`` children);
    only the order-sheet layout draws image tiles.
    """

    name: str
    options: list[str]
    tiles: str = "text"


@dataclass
class Goods:
    """A product. ``skus`` maps the option tuple (dimension order) to its :class:`Sku`;
    combinations missing from the matrix are not sold (shown like stock 0)."""

    goods_id: str
    title: str
    dimensions: list[Dimension]
    skus: dict[tuple[str, ...], Sku]
    buy_buttons: list[str] = field(default_factory=lambda: ["单独购买", "发起拼单"])
    outcome: str | None = None
    available: bool = True
    promotion: Decimal = Decimal("7.53")
    # order-sheet layout only:
    default_options: list[str] | None = None  # preselected option per dimension (else first in-stock SKU)
    price_label: str = "auto"  # auto: 最后N件 ¥x when stock <= 10 | selling_out: 即将卖完 ¥x | plain: ¥x
    label_decoration: str = "bracket"  # 已选 label: bracket ([限定]x for 【限定】x) | hash (#x)

    def sku(self, selection: dict[str, str]) -> Sku | None:
        """The SKU for a complete selection ``{dimension name: option}``, else None."""
        key = tuple(selection.get(d.name, "") for d in self.dimensions)
        return self.skus.get(key)

    def default_selection(self) -> dict[str, str]:
        """The selection the order sheet opens with: ``default_options`` or the first in-stock SKU."""
        if self.default_options is not None:
            return dict(zip((d.name for d in self.dimensions), self.default_options, strict=True))
        for sku in self.skus.values():
            if sku.stock > 0:
                return dict(zip((d.name for d in self.dimensions), sku.options, strict=True))
        first = next(iter(self.skus.values()))
        return dict(zip((d.name for d in self.dimensions), first.options, strict=True))

    def option_stock(self, selection: dict[str, str], dim: str, option: str) -> int:
        """Units in stock for ``option`` of ``dim`` combined with the other dimensions' selections."""
        trial = {**selection, dim: option}
        return sum(
            s.stock
            for s in self.skus.values()
            if all(trial.get(d.name) in (None, s.options[i]) for i, d in enumerate(self.dimensions))
        )

    def prices(self) -> list[Decimal]:
        return sorted({s.price for s in self.skus.values()})

    def option_available(self, selection: dict[str, str], dim: str, option: str) -> bool:
        """True when some in-stock SKU has ``option`` for ``dim`` and agrees with the other selections."""
        trial = dict(selection)
        trial[dim] = option
        for sku in self.skus.values():
            if sku.stock <= 0:
                continue
            if all(trial.get(d.name) in (None, sku.options[i]) for i, d in enumerate(self.dimensions)):
                return True
        return False


@dataclass
class AppVersion:
    package: str = "com.xunmeng.pinduoduo"
    version_name: str = "8.17.0"
    version_code: int = 81700

    def default_layout(self) -> str:
        """The layout this version shows when the scenario does not force one."""
        return "order_sheet" if self.version_code >= ORDER_SHEET_FROM_VERSION_CODE else "sku_sheet"


# published real-phone timings, seconds
REALISTIC = {"dump": 0.15, "tap": 0.04, "screenshot": 0.09, "app_start": 3.0, "rpc": 0.04, "shell": 0.02, "key": 0.04}


@dataclass
class Latency:
    """Seconds the phone takes per operation (added before answering)."""

    dump: float = 0.0
    tap: float = 0.0
    screenshot: float = 0.0
    app_start: float = 0.0
    rpc: float = 0.0
    shell: float = 0.0
    key: float = 0.0

    @classmethod
    def parse(cls, value: Any) -> Latency:
        """``"none"``, ``"realistic"`` (published real-phone timings) or a dict of seconds."""
        if value in (None, "none"):
            return cls()
        if value == "realistic":
            return cls(**REALISTIC)
        if isinstance(value, Latency):
            return copy.copy(value)
        return cls(**{k: float(v) for k, v in dict(value).items()})


@dataclass
class PhoneConfig:
    """Everything one simulated phone starts from (already a private deep copy)."""

    serial: str
    app: AppVersion
    catalogue: dict[str, Goods]
    outcome: str = "ORDER_CREATED"
    latency: Latency = field(default_factory=Latency)
    faults: list[dict[str, Any]] = field(default_factory=list)
    address: str | None = None
    order_success_popup: bool = False
    device: dict[str, Any] = field(default_factory=dict)
    start: dict[str, Any] = field(default_factory=dict)
    layout_override: str | None = None  # "sku_sheet" | "order_sheet"; None = follow the app version
    payment_mode: str = "wechat"  # one of names.PAYMENT_MODES (the order sheet's payment row)
    submit_text: str | None = None  # submit label prefix override (立即支付, 确认支付, 0元下单)
    service_banner: bool = False  # order sheet: #24小时发货#七天退换 banner with a 关闭 icon
    # the status bar's notification icons, one content-desc each (None: system_ui.DEFAULT_NOTIFICATIONS)
    notifications: list[str] | None = None

    @property
    def layout(self) -> str:
        """``sku_sheet`` (SKU sheet + 确定 + confirm page) or ``order_sheet`` (one sheet)."""
        return self.layout_override or self.app.default_layout()


@cache
def _validator() -> jsonschema.protocols.Validator:
    text = resources.files(__package__).joinpath("assets/scenario.schema.json").read_text("utf-8")
    schema = json.loads(text)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _parse_goods(raw: dict[str, Any]) -> Goods:
    gid = raw["goods_id"]
    dims = [Dimension(d["name"], list(d["options"]), d.get("tiles", "text")) for d in raw["dimensions"]]
    if len({d.name for d in dims}) != len(dims):
        raise ScenarioError(f"goods {gid}: duplicate dimension names")
    skus: dict[tuple[str, ...], Sku] = {}
    for i, s in enumerate(raw["skus"]):
        opts = tuple(s["options"])
        if len(opts) != len(dims):
            raise ScenarioError(f"goods {gid}: skus[{i}] has {len(opts)} options, expected {len(dims)}")
        for dim, opt in zip(dims, opts, strict=True):
            if opt not in dim.options:
                raise ScenarioError(f"goods {gid}: skus[{i}] option {opt!r} is not an option of {dim.name!r}")
        if opts in skus:
            raise ScenarioError(f"goods {gid}: skus[{i}] duplicates {list(opts)}")
        try:
            skus[opts] = Sku(opts, to_price(s["price"]), int(s["stock"]))
        except ArithmeticError as exc:
            raise ScenarioError(f"goods {gid}: skus[{i}] bad price {s['price']!r}") from exc
    default = raw.get("default_options")
    if default is not None:
        if len(default) != len(dims) or any(o not in d.options for o, d in zip(default, dims, strict=False)):
            raise ScenarioError(f"goods {gid}: default_options must name one option of each dimension")
        if tuple(default) not in skus:
            raise ScenarioError(f"goods {gid}: default_options {default} is not a SKU")
    return Goods(
        goods_id=gid,
        title=raw["title"],
        dimensions=dims,
        skus=skus,
        buy_buttons=list(raw.get("buy_buttons", ["单独购买", "发起拼单"])),
        outcome=raw.get("outcome"),
        available=raw.get("available", True),
        promotion=to_price(raw.get("promotion", "7.53")),
        default_options=list(default) if default is not None else None,
        price_label=raw.get("price_label", "auto"),
        label_decoration=raw.get("label_decoration", "bracket"),
    )


class Scenario:
    """A validated scenario. Build with :func:`load_scenario`."""

    def __init__(self, data: dict[str, Any]):
        errors = sorted(_validator().iter_errors(data), key=lambda e: list(e.absolute_path))
        if errors:
            err = errors[0]
            where = "/".join(str(p) for p in err.absolute_path) or "(root)"
            raise ScenarioError(f"scenario invalid at {where}: {err.message}")
        self.data = copy.deepcopy(data)
        self.name: str = data.get("name", "unnamed")
        ids = [g["goods_id"] for g in data["catalogue"]]
        if len(set(ids)) != len(ids):
            raise ScenarioError("duplicate goods_id in catalogue")
        for g in data["catalogue"]:
            _parse_goods(g)  # fail early, at load time
        for i, spec in enumerate(data.get("faults", [])):
            try:
                validate_fault(spec)
            except ValueError as exc:
                raise ScenarioError(f"faults/{i}: {exc}") from exc
        for serial, ph in data.get("phones", {}).items():
            for spec in ph.get("faults", []):
                try:
                    validate_fault(spec)
                except ValueError as exc:
                    raise ScenarioError(f"phones/{serial}/faults: {exc}") from exc
        start = data.get("start", {})
        if start.get("screen") == "product" and start.get("goods_id") not in ids:
            raise ScenarioError("start.goods_id must name a catalogue goods when start.screen is product")

    def for_phone(self, serial: str) -> PhoneConfig:
        """A fresh, private configuration for ``serial`` (top level merged with ``phones[serial]``)."""
        data = copy.deepcopy(self.data)
        over = data.get("phones", {}).get(serial, {})
        app = {**data.get("app", {}), **over.get("app", {})}
        return PhoneConfig(
            serial=serial,
            app=AppVersion(**app),
            catalogue={g["goods_id"]: _parse_goods(g) for g in data["catalogue"]},
            outcome=over.get("outcome", data.get("outcome", "ORDER_CREATED")),
            latency=Latency.parse(over.get("latency", data.get("latency"))),
            faults=[*data.get("faults", []), *over.get("faults", [])],
            address=over.get("address", data.get("address")),
            order_success_popup=bool(data.get("order_success_popup", False)),
            device=data.get("device", {}),
            start=data.get("start", {}),
            layout_override=over.get("layout", data.get("layout")),
            payment_mode=over.get("payment_mode", data.get("payment_mode", "wechat")),
            submit_text=over.get("submit_text", data.get("submit_text")),
            service_banner=bool(over.get("service_banner", data.get("service_banner", False))),
            notifications=over.get("notifications", data.get("notifications")),
        )


def builtin_scenario_path(name: str) -> Path | None:
    """Path of a scenario shipped in ``phonesim/scenarios`` (``"default"``, ``"order_sheet"``), or None."""
    if not name.replace("_", "").isalnum():
        return None
    entry = resources.files(__package__).joinpath(f"scenarios/{name}.yaml")
    return Path(str(entry)) if entry.is_file() else None


def load_scenario(source: Scenario | dict[str, Any] | str | Path | None = None) -> Scenario:
    """Load a scenario from a dict, a ``.yaml``/``.yml``/``.json`` path, a built-in scenario name
    (``"order_sheet"``; a name wins only when no such file exists) or None (the built-in default).

    Raises:
        ScenarioError: unreadable file, bad YAML/JSON, or schema/consistency violation.
    """
    if isinstance(source, Scenario):
        return source
    if source is None:
        text = resources.files(__package__).joinpath("scenarios/default.yaml").read_text("utf-8")
        return Scenario(yaml.safe_load(text))
    if isinstance(source, dict):
        return Scenario(source)
    path = Path(source)
    if isinstance(source, str) and not path.exists():
        path = builtin_scenario_path(source) or path
    try:
        text = path.read_text("utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise ScenarioError(f"cannot read scenario {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ScenarioError(f"scenario {path} must be a mapping at the top level")
    return Scenario(data)
