"""Settings: one frozen object built once from ``CMBUYER_*`` variables (README.md "Configuration").

Sources, later wins: built-in defaults < ``<data dir>/cmbuyer.env`` (written by ``cmbuyer-server
init``) < the real environment. Every setting is one row of :data:`SETTINGS_TABLE` (attribute,
variable, default, bounds, meaning): the :class:`Settings` defaults, the parsing in
:func:`load_settings` and the README's settings table (:func:`settings_markdown`, checked by
tests/server/test_config.py) all come from it. Every value is validated here; a bad one
raises :class:`SettingsError` whose message is one line naming the variable and never echoing a secret.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path
from typing import Any

from cmbuyer.schemas import MONEY_RE
from cmbuyer.schemas.text import has_control_chars, normalize_sku
from cmbuyer.server.domain.errors import SettingsError
from cmbuyer.server.domain.evidence_limits import (
    SPEC_EVIDENCE_MAX_BYTES,
    SPEC_EVIDENCE_MAX_PIXELS,
    SPEC_EVIDENCE_MAX_SIDE,
    EvidenceLimits,
)
from cmbuyer.server.domain.supervision import DEFAULT_SUPERVISED_ORDERS

ENV_FILE_NAME = "cmbuyer.env"
DEFAULT_DATA_DIR = Path("var")
_HEX64 = re.compile(r"[0-9a-f]{64}", re.ASCII)
_INT = re.compile(r"[0-9]{1,12}", re.ASCII)  # every setting also has its own range
_VERSION_NAME = re.compile(r"[0-9A-Za-z._-]{1,32}", re.ASCII)
_HOST = re.compile(r"[0-9A-Za-z.:\[\]-]{1,253}", re.ASCII)
MiB = 1024 * 1024

# The Pinduoduo versions of the shipped selector packs (agent/packs/*.json: the simulator's two layouts,
# sku sheet and order sheet); test_config.py keeps this equal to the packs' version names.
DEFAULT_APP_VERSIONS = ("8.17.0", "8.22.0")
# Modes that hand the payment to another app where a person must confirm.
DEFAULT_PAYMENT_MODES = ("微信支付", "支付宝")
PAYMENT_MODE_MAX = 32  # common.json "payment_mode" maxLength


class Secret:
    """32 secret bytes that never show themselves in ``repr``/``str``/logs."""

    __slots__ = ("_value",)

    def __init__(self, value: bytes) -> None:
        self._value = value

    def reveal(self) -> bytes:
        """The raw key bytes; call only where the key is used (HMAC), never to print."""
        return self._value

    def __repr__(self) -> str:
        return "Secret(***)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


# -- the settings table ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One setting: the :class:`Settings` attribute ``name``, its variable ``env``, its ``default`` (typed
    as the attribute), ``doc`` (the README's meaning column), ``parse`` (raw text → value, raises
    :class:`SettingsError`; None for the data dir and DB path, which :func:`load_settings` reads itself),
    inclusive integer bounds ``low``/``high``, ``shown`` (the README's default cell when the default is
    not a value one could write, e.g. ``(init)`` for a secret) and ``blank_is_default`` (False: an empty
    value is parsed, not defaulted).
    """

    name: str
    env: str
    default: Any
    doc: str
    parse: Callable[[str, Setting], Any] | None = None
    low: int | None = None
    high: int | None = None
    shown: str | None = None
    blank_is_default: bool = True

    def read(self, env: Mapping[str, str]) -> Any:
        """The value from ``env`` (absent, or empty when ``blank_is_default``: the default)."""
        raw = env.get(self.env)
        if raw is None or (raw == "" and self.blank_is_default) or self.parse is None:
            return self.default
        return self.parse(raw, self)


def _int(raw: str, row: Setting) -> int:
    assert row.low is not None and row.high is not None
    if not _INT.fullmatch(raw) or not row.low <= int(raw) <= row.high:
        raise SettingsError(f"{row.env} 必须是 {row.low} 到 {row.high} 的整数")
    return int(raw)


def _bool(raw: str, row: Setting) -> bool:
    if raw not in ("0", "1", "true", "false"):
        raise SettingsError(f"{row.env} 只能是 0、1、true、false 之一")
    return raw in ("1", "true")


def _secret(raw: str, row: Setting) -> Secret:
    if not _HEX64.fullmatch(raw):
        raise SettingsError(f"{row.env} 必须正好是 64 个小写十六进制字符（32 个随机字节）")
    return Secret(bytes.fromhex(raw))


def _host(raw: str, row: Setting) -> str:
    if not _HOST.fullmatch(raw):
        raise SettingsError(f"{row.env} 必须是 IP 地址或主机名")
    return raw


def _money(raw: str, row: Setting) -> Decimal:
    try:
        value = Decimal(raw) if MONEY_RE.fullmatch(raw) else None
    except InvalidOperation:
        value = None
    if value is None or value <= 0:
        raise SettingsError(f"{row.env} 必须是规范的金额，如 {row.default}")
    return value


def _versions(raw: str, row: Setting) -> tuple[str, ...]:
    """Comma-separated version names; an empty value allows no version at all."""
    versions = tuple(v.strip() for v in raw.split(",") if v.strip())
    if not all(_VERSION_NAME.fullmatch(v) for v in versions):
        raise SettingsError(f"{row.env} 必须是逗号分隔的版本名，如 {row.default[0]}")
    return versions


def _payment_modes(raw: str, row: Setting) -> tuple[str, ...]:
    """Comma-separated mode names as the payment row shows them, stored NFKC (the fence compares the NFKC
    form of what was read). An empty list is refused rather than read as "refuse every fence": a server
    that can never permit a tap is a setting mistake, said at start-up."""
    # NFKC first, so a full-width comma (微信支付，支付宝) separates too
    modes = tuple(m.strip() for m in normalize_sku(raw).split(",") if m.strip())
    if not modes or not all(len(m) <= PAYMENT_MODE_MAX and not has_control_chars(m) for m in modes):
        raise SettingsError(
            f"{row.env} 必须是逗号分隔的支付方式名称，如 {','.join(row.default)}（每个最多 {PAYMENT_MODE_MAX} 个字符）"
        )
    return modes


def _path(raw: str, row: Setting) -> Path:
    """A file path (existence and contents are checked where the file is used: ``serve`` for TLS files)."""
    if has_control_chars(raw) or len(raw) > 4096:
        raise SettingsError(f"{row.env} 必须是文件路径")
    return Path(raw)


def _networks(raw: str, row: Setting) -> tuple[IPv4Network | IPv6Network, ...]:
    """Comma-separated IP addresses or networks (``10.0.0.5``, ``10.0.0.0/24``); empty: none."""
    try:
        return tuple(ip_network(part.strip(), strict=False) for part in raw.split(",") if part.strip())
    except ValueError:
        raise SettingsError(f"{row.env} 必须是逗号分隔的 IP 地址或网段，如 10.0.0.5") from None


def _replica_url(raw: str, row: Setting) -> str:
    """A Litestream replica URL: ``file:///absolute/path`` (tested) or ``s3://bucket/path`` (documented)."""
    if not re.fullmatch(r"(file:///|s3://)[!-~]{1,1000}", raw, re.ASCII):
        raise SettingsError(f"{row.env} 必须是副本地址，如 file:///mnt/backup/cmbuyer 或 s3://bucket/db")
    return raw


def _log_format(raw: str, row: Setting) -> str:
    if raw not in ("text", "json"):
        raise SettingsError(f"{row.env} 只能是 text 或 json")
    return raw


def _log_level(raw: str, row: Setting) -> str:
    level = raw.upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise SettingsError(f"{row.env} 只能是 DEBUG、INFO、WARNING 或 ERROR")
    return level


def _ranged(name: str, env: str, default: int, low: int, high: int, doc: str, shown: str | None = None) -> Setting:
    return Setting(name, env, default, doc, _int, low, high, shown)


# In the README's order. Evidence limits may only be tightened: their upper bound is the protocol's value.
SETTINGS_TABLE: tuple[Setting, ...] = (
    Setting(
        "data_dir",
        "CMBUYER_DATA_DIR",
        DEFAULT_DATA_DIR,
        "data dir (DB, env file, evidence); also `--data-dir`",
        shown="`./var`",
    ),
    Setting("db_path", "CMBUYER_DB_PATH", None, "SQLite database file", shown="`<data dir>/cmbuyer.sqlite3`"),
    Setting("host", "CMBUYER_HOST", "127.0.0.1", "bind address (`serve --host`)", _host),
    _ranged("port", "CMBUYER_PORT", 8080, 0, 65535, "bind port (`serve --port`)"),
    Setting(
        "claim_token_secret",
        "CMBUYER_CLAIM_TOKEN_SECRET",
        None,
        "64 lowercase hex; HMAC key of claim tokens",
        _secret,
        shown="(init)",
    ),
    Setting(
        "session_secret",
        "CMBUYER_SESSION_SECRET",
        None,
        "64 lowercase hex, different from the claim-token secret; admin sessions / CSRF",
        _secret,
        shown="(init)",
    ),
    _ranged(
        "claim_lease_ttl",
        "CMBUYER_CLAIM_LEASE_TTL",
        120,
        1,
        86400,
        "claim lease, seconds; strictly shorter than the authorization TTL",
    ),
    _ranged(
        "authorization_ttl",
        "CMBUYER_AUTHORIZATION_TTL",
        3600,
        2,
        30 * 86400,
        "one-time authorization lifetime, seconds",
    ),
    _ranged("max_quantity", "CMBUYER_MAX_QUANTITY", 99, 1, 999, "largest quantity a task may ask for"),
    Setting(
        "max_total_price",
        "CMBUYER_MAX_TOTAL_PRICE",
        Decimal("5000.00"),
        "largest max total price a task may carry (CNY, a canonical amount)",
        _money,
    ),
    Setting(
        "allowed_app_versions",
        "CMBUYER_ALLOWED_APP_VERSIONS",
        DEFAULT_APP_VERSIONS,
        "comma-separated Pinduoduo versionNames agents may work on (default: the shipped selector packs'"
        " versions; empty: none)",
        _versions,
        blank_is_default=False,
    ),
    Setting(
        "allowed_payment_modes",
        "CMBUYER_ALLOWED_PAYMENT_MODES",
        DEFAULT_PAYMENT_MODES,
        "payment modes the fence accepts as read beside the submit control (exact, after NFKC; a full-width"
        " comma separates too); anything else is refused with `payment_mode_not_allowed`. Only list modes"
        " that hand the payment to another app where a person must confirm",
        _payment_modes,
    ),
    _ranged(
        "heartbeat_interval",
        "CMBUYER_HEARTBEAT_INTERVAL",
        10,
        1,
        3600,
        "seconds between agent heartbeats; a heartbeat older than interval × stale factor blocks claims",
    ),
    _ranged("heartbeat_stale_factor", "CMBUYER_HEARTBEAT_STALE_FACTOR", 3, 1, 100, "see `CMBUYER_HEARTBEAT_INTERVAL`"),
    _ranged(
        "evidence_max_bytes",
        "CMBUYER_EVIDENCE_MAX_BYTES",
        SPEC_EVIDENCE_MAX_BYTES,
        1024,
        SPEC_EVIDENCE_MAX_BYTES,
        "largest evidence PNG, bytes (may only be tightened)",
    ),
    _ranged(
        "evidence_max_side",
        "CMBUYER_EVIDENCE_MAX_SIDE",
        SPEC_EVIDENCE_MAX_SIDE,
        16,
        SPEC_EVIDENCE_MAX_SIDE,
        "largest evidence width and height, pixels (may only be tightened)",
    ),
    _ranged(
        "evidence_max_pixels",
        "CMBUYER_EVIDENCE_MAX_PIXELS",
        SPEC_EVIDENCE_MAX_PIXELS,
        256,
        SPEC_EVIDENCE_MAX_PIXELS,
        "largest evidence width × height (may only be tightened)",
    ),
    _ranged(
        "evidence_per_attempt", "CMBUYER_EVIDENCE_PER_ATTEMPT", 32, 1, 10_000, "evidence files one attempt may store"
    ),
    # Per-attempt budgets: one open claim must not be able to fill the disk or the events table.
    _ranged(
        "evidence_bytes_per_attempt",
        "CMBUYER_EVIDENCE_BYTES_PER_ATTEMPT",
        128 * MiB,
        1024,
        4 * 1024**3,
        "evidence bytes one attempt may store (at least `CMBUYER_EVIDENCE_MAX_BYTES`)",
    ),
    _ranged("events_per_attempt", "CMBUYER_EVENTS_PER_ATTEMPT", 1000, 20, 1_000_000, "events one attempt may store"),
    _ranged("sweep_interval", "CMBUYER_SWEEP_INTERVAL", 5, 1, 3600, "seconds between expiry/recovery sweeps"),
    _ranged(
        "session_idle_ttl",
        "CMBUYER_SESSION_IDLE_TTL",
        1800,
        60,
        86400,
        "admin session idle expiry, seconds (at most the absolute TTL)",
    ),
    _ranged(
        "session_absolute_ttl",
        "CMBUYER_SESSION_ABSOLUTE_TTL",
        43200,
        60,
        30 * 86400,
        "admin session absolute expiry, seconds",
    ),
    Setting(
        "cookie_secure",
        "CMBUYER_COOKIE_SECURE",
        False,
        "set `1` behind an HTTPS proxy (adds `Secure` to the session cookie; automatic when `serve` has TLS);"
        " `0`, `1`, `false` or `true`",
        _bool,
    ),
    Setting(
        "tls_cert",
        "CMBUYER_TLS_CERT",
        None,
        "PEM certificate chain `serve` presents (`serve --tls-cert`; written by `cmbuyer-server tls init`);"
        " with `CMBUYER_TLS_KEY` the server speaks only HTTPS (TLS 1.2+)",
        _path,
        shown="(none)",
    ),
    Setting(
        "tls_key",
        "CMBUYER_TLS_KEY",
        None,
        "PEM private key of `CMBUYER_TLS_CERT` (`serve --tls-key`)",
        _path,
        shown="(none)",
    ),
    Setting(
        "trusted_proxies",
        "CMBUYER_TRUSTED_PROXIES",
        (),
        "comma-separated addresses/networks of reverse proxies; only from these peers is `X-Forwarded-For`"
        " read (`serve --behind-proxy` needs at least one)",
        _networks,
        shown="(none)",
    ),
    Setting(
        "replica_url",
        "CMBUYER_REPLICA_URL",
        None,
        "where `cmbuyer-server replicate` streams the database (Litestream): `file:///path` on another disk"
        " or `s3://bucket/path`; when set, the server leaves WAL checkpoints to Litestream",
        _replica_url,
        shown="(none)",
    ),
    _ranged(
        "replica_sync_interval",
        "CMBUYER_REPLICA_SYNC_INTERVAL",
        1,
        1,
        3600,
        "seconds between Litestream's uploads: about this much committed work can be lost with the host",
    ),
    _ranged(
        "pending_connections_max",
        "CMBUYER_PENDING_CONNECTIONS_MAX",
        512,
        8,
        1_000_000,
        'connections not yet authenticated, in total (docs/api.md "The HTTP edge")',
    ),
    _ranged(
        "pending_connections_per_address",
        "CMBUYER_PENDING_CONNECTIONS_PER_ADDRESS",
        64,
        1,
        1_000_000,
        "connections not yet authenticated, per client address",
    ),
    _ranged(
        "pending_connection_timeout",
        "CMBUYER_PENDING_CONNECTION_TIMEOUT",
        15,
        1,
        3600,
        "seconds a connection may stay unauthenticated",
    ),
    _ranged(
        "device_connections_max",
        "CMBUYER_DEVICE_CONNECTIONS_MAX",
        8,
        1,
        1000,
        "open connections one device (one token) may hold; a new one closes its least recently used",
    ),
    Setting("log_format", "CMBUYER_LOG_FORMAT", "text", "`text`, or `json` for JSON lines", _log_format),
    Setting("log_level", "CMBUYER_LOG_LEVEL", "INFO", "`DEBUG`, `INFO`, `WARNING` or `ERROR`", _log_level),
    Setting(
        "metrics",
        "CMBUYER_METRICS",
        False,
        '`1` serves `GET /metrics` (Prometheus text; docs/operations.md "Metrics"), else it is 404;'
        " `0`, `1`, `false` or `true`",
        _bool,
    ),
    Setting(
        "metrics_token",
        "CMBUYER_METRICS_TOKEN",
        None,
        "64 lowercase hex; when set, `/metrics` needs `Authorization: Bearer <it>` (behind a reverse proxy);"
        " unset: only a direct loopback peer without forwarding headers",
        _secret,
        shown="(unset)",
    ),
    _ranged(
        "supervised_orders",
        "CMBUYER_SUPERVISED_ORDERS",
        DEFAULT_SUPERVISED_ORDERS,
        0,
        1000,
        "orders a device–pack pair must have confirmed right before it buys without a person's approval; `0` = off",
    ),
    _ranged(
        "import_max_rows",
        "CMBUYER_IMPORT_MAX_ROWS",
        5000,
        1,
        100_000,
        'data rows one task spreadsheet may hold (import, docs/admin.md "Import"); a larger file is refused whole',
    ),
    _ranged(
        "import_max_bytes",
        "CMBUYER_IMPORT_MAX_BYTES",
        5 * MiB,
        1024,
        64 * MiB,
        "largest task spreadsheet file, bytes; an .xlsx may inflate to at most 8 × this (zip-bomb bound)",
    ),
)
SETTINGS_BY_NAME: dict[str, Setting] = {row.name: row for row in SETTINGS_TABLE}
# The settings `cmbuyer-server init` writes into a new env file with their defaults (for an operator to edit).
ENV_FILE_SETTINGS = ("claim_lease_ttl", "authorization_ttl", "allowed_app_versions")


def _default(name: str) -> Any:
    return SETTINGS_BY_NAME[name].default


@dataclass(frozen=True)
class Settings:
    """Validated configuration. Durations are integer seconds; sizes are bytes; money is ``Decimal`` (CNY).
    Every default is the one in :data:`SETTINGS_TABLE`.

    Invariants: ``claim_lease_ttl < authorization_ttl`` (README.md "Configuration");
    ``evidence_bytes_per_attempt >= evidence_max_bytes`` (one largest file always fits a fresh attempt).
    """

    data_dir: Path
    db_path: Path
    host: str = _default("host")
    port: int = _default("port")
    claim_token_secret: Secret | None = field(default=_default("claim_token_secret"), repr=True)
    session_secret: Secret | None = field(default=_default("session_secret"), repr=True)
    claim_lease_ttl: int = _default("claim_lease_ttl")
    authorization_ttl: int = _default("authorization_ttl")
    max_quantity: int = _default("max_quantity")
    max_total_price: Decimal = _default("max_total_price")  # noqa: RUF009  (a Decimal is immutable: safe to share)
    allowed_app_versions: tuple[str, ...] = _default("allowed_app_versions")
    # payment modes the fence accepts as read beside the submit control (NFKC, exact)
    allowed_payment_modes: tuple[str, ...] = _default("allowed_payment_modes")
    heartbeat_interval: int = _default("heartbeat_interval")
    heartbeat_stale_factor: int = _default("heartbeat_stale_factor")
    evidence_max_bytes: int = _default("evidence_max_bytes")
    evidence_max_side: int = _default("evidence_max_side")
    evidence_max_pixels: int = _default("evidence_max_pixels")
    evidence_per_attempt: int = _default("evidence_per_attempt")
    evidence_bytes_per_attempt: int = _default("evidence_bytes_per_attempt")
    events_per_attempt: int = _default("events_per_attempt")
    sweep_interval: int = _default("sweep_interval")
    session_idle_ttl: int = _default("session_idle_ttl")
    session_absolute_ttl: int = _default("session_absolute_ttl")
    cookie_secure: bool = _default("cookie_secure")
    tls_cert: Path | None = field(default=_default("tls_cert"))
    tls_key: Path | None = field(default=_default("tls_key"))
    trusted_proxies: tuple[IPv4Network | IPv6Network, ...] = _default("trusted_proxies")
    replica_url: str | None = _default("replica_url")
    replica_sync_interval: int = _default("replica_sync_interval")
    pending_connections_max: int = _default("pending_connections_max")
    pending_connections_per_address: int = _default("pending_connections_per_address")
    pending_connection_timeout: int = _default("pending_connection_timeout")
    device_connections_max: int = _default("device_connections_max")
    log_format: str = _default("log_format")
    log_level: str = _default("log_level")
    metrics: bool = _default("metrics")  # GET /metrics served
    metrics_token: Secret | None = field(default=_default("metrics_token"), repr=True)
    # confirmed-right orders a device–pack pair needs before it runs without a person's approval; 0 = off
    supervised_orders: int = _default("supervised_orders")
    # task spreadsheet import bounds
    import_max_rows: int = _default("import_max_rows")
    import_max_bytes: int = _default("import_max_bytes")

    @property
    def evidence_dir(self) -> Path:
        """Where evidence PNGs live (``ab/cd/<sha256>.png`` below it; docs/architecture.md "Server layers")."""
        return self.data_dir / "evidence"

    @property
    def tls(self) -> bool:
        """True when ``serve`` speaks HTTPS itself (both TLS files configured)."""
        return self.tls_cert is not None and self.tls_key is not None

    @property
    def secure_cookies(self) -> bool:
        """Whether cookies carry ``Secure``: under the server's own TLS always, behind a proxy when set."""
        return self.cookie_secure or self.tls

    @property
    def evidence_limits(self) -> EvidenceLimits:
        """The evidence limits (server/domain/evidence_limits.py) these settings configure."""
        return EvidenceLimits(self.evidence_max_bytes, self.evidence_max_side, self.evidence_max_pixels)

    def require_secrets(self) -> tuple[Secret, Secret]:
        """Return ``(claim_token_secret, session_secret)`` or raise :class:`SettingsError`."""
        if self.claim_token_secret is None:
            raise SettingsError("CMBUYER_CLAIM_TOKEN_SECRET 未设置（请运行 `cmbuyer-server init`）")
        if self.session_secret is None:
            raise SettingsError("CMBUYER_SESSION_SECRET 未设置（请运行 `cmbuyer-server init`）")
        return self.claim_token_secret, self.session_secret


def read_env_file(path: Path) -> dict[str, str]:
    """Parse ``KEY=VALUE`` lines (``#`` comments, blank lines); raise SettingsError on a bad line."""
    values: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return values
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{path}：无法读取设置文件（{exc.__class__.__name__}）") from None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"CMBUYER_[A-Z0-9_]+", key.strip(), re.ASCII):
            raise SettingsError(f"{path}:{number}：应为 CMBUYER_NAME=value 的形式")
        values[key.strip()] = value.strip()
    return values


def _check_together(s: Settings) -> None:
    """The invariants that tie two settings together (see :class:`Settings`)."""
    if s.claim_lease_ttl >= s.authorization_ttl:
        raise SettingsError("CMBUYER_CLAIM_LEASE_TTL 必须严格小于 CMBUYER_AUTHORIZATION_TTL")
    if s.claim_token_secret is not None and s.claim_token_secret == s.session_secret:
        raise SettingsError("CMBUYER_SESSION_SECRET 必须与 CMBUYER_CLAIM_TOKEN_SECRET 不同")
    if s.evidence_bytes_per_attempt < s.evidence_max_bytes:
        raise SettingsError("CMBUYER_EVIDENCE_BYTES_PER_ATTEMPT 不能小于 CMBUYER_EVIDENCE_MAX_BYTES")
    if (s.tls_cert is None) != (s.tls_key is None):
        raise SettingsError("TLS 需要同时设置 CMBUYER_TLS_CERT 和 CMBUYER_TLS_KEY（或 --tls-cert 和 --tls-key）")
    if s.session_idle_ttl > s.session_absolute_ttl:
        raise SettingsError("CMBUYER_SESSION_IDLE_TTL 不能大于 CMBUYER_SESSION_ABSOLUTE_TTL")


def load_settings(data_dir: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Build :class:`Settings` for ``data_dir`` (default ``$CMBUYER_DATA_DIR`` or ``./var``).

    Reads ``<data_dir>/cmbuyer.env`` when present; ``environ`` (default ``os.environ``) overrides it.
    Raises :class:`SettingsError` (one line, names the variable) on any invalid value.
    """
    real = dict(os.environ if environ is None else environ)
    base = Path(data_dir if data_dir is not None else real.get("CMBUYER_DATA_DIR") or DEFAULT_DATA_DIR)
    env = {**read_env_file(base / ENV_FILE_NAME), **{k: v for k, v in real.items() if k.startswith("CMBUYER_")}}
    db_raw = env.get("CMBUYER_DB_PATH") or ""
    values = {row.name: row.read(env) for row in SETTINGS_TABLE if row.parse is not None}
    settings = Settings(data_dir=base, db_path=Path(db_raw) if db_raw else base / "cmbuyer.sqlite3", **values)
    _check_together(settings)
    return settings


def default_text(row: Setting) -> str:
    """``row.default`` as a variable's value is written (``8.17.0,8.22.0``, ``0`` for False)."""
    value = row.default
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        return ",".join(value)
    return "" if value is None else str(value)


def env_file_defaults() -> dict[str, str]:
    """``{variable: default text}`` of :data:`ENV_FILE_SETTINGS`, for a new ``cmbuyer.env``."""
    return {SETTINGS_BY_NAME[name].env: default_text(SETTINGS_BY_NAME[name]) for name in ENV_FILE_SETTINGS}


def settings_markdown() -> str:
    """The README's settings table (Markdown), one row per :data:`SETTINGS_TABLE` entry."""
    lines = ["| variable | default | allowed | meaning |", "|---|---|---|---|"]
    for row in SETTINGS_TABLE:
        default = row.shown if row.shown is not None else f"`{default_text(row)}`"
        if "bytes" in row.name and row.default % MiB == 0:
            default += f" ({row.default // MiB} MiB)"
        allowed = f"{row.low}–{row.high}" if row.low is not None else ""
        lines.append(f"| `{row.env}` | {default} | {allowed} | {row.doc} |")
    return "\n".join(lines) + "\n"
