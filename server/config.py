"""Settings: one frozen object built once from ``CMBUYER_*`` variables (design §6).

Sources, later wins: built-in defaults < ``<data dir>/cmbuyer.env`` (written by ``cmbuyer-server
init``) < the real environment. Every value is validated here; a bad one raises
:class:`SettingsError` whose message is one line naming the variable and never echoing a secret.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path

from cmbuyer.schemas import MONEY_RE
from cmbuyer.schemas.text import has_control_chars, normalize_sku
from cmbuyer.server.domain.errors import SettingsError as SettingsError  # its home; importers keep this name

ENV_FILE_NAME = "cmbuyer.env"
DEFAULT_DATA_DIR = Path("var")
_HEX64 = re.compile(r"[0-9a-f]{64}", re.ASCII)
_INT = re.compile(r"[0-9]{1,12}", re.ASCII)  # every setting also has its own range
_VERSION_NAME = re.compile(r"[0-9A-Za-z._-]{1,32}", re.ASCII)
_HOST = re.compile(r"[0-9A-Za-z.:\[\]-]{1,253}", re.ASCII)

# Fixed by spec 002 (证据): a configured limit may be tighter, never looser.
SPEC_EVIDENCE_MAX_BYTES = 10 * 1024 * 1024
SPEC_EVIDENCE_MAX_SIDE = 8192
SPEC_EVIDENCE_MAX_PIXELS = 16_777_216

# The Pinduoduo versions the simulator's two layouts model (sku sheet; order sheet — issue 15).
DEFAULT_APP_VERSIONS = ("8.17.0", "8.22.0")
# Modes that hand the payment to another app where a person must confirm (issue 15 §6).
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


@dataclass(frozen=True)
class Settings:
    """Validated configuration. Durations are integer seconds; sizes are bytes; money is ``Decimal`` (CNY).

    Invariants: ``claim_lease_ttl < authorization_ttl`` (spec 000 §3);
    ``evidence_bytes_per_attempt >= evidence_max_bytes`` (one largest file always fits a fresh attempt).
    """

    data_dir: Path
    db_path: Path
    host: str = "127.0.0.1"
    port: int = 8080
    claim_token_secret: Secret | None = field(default=None, repr=True)
    session_secret: Secret | None = field(default=None, repr=True)
    claim_lease_ttl: int = 120
    authorization_ttl: int = 3600
    max_quantity: int = 99
    max_total_price: Decimal = Decimal("5000.00")
    allowed_app_versions: tuple[str, ...] = DEFAULT_APP_VERSIONS
    # payment modes the fence accepts as read beside the submit control (NFKC, exact; issue 15)
    allowed_payment_modes: tuple[str, ...] = DEFAULT_PAYMENT_MODES
    heartbeat_interval: int = 10
    heartbeat_stale_factor: int = 3
    evidence_max_bytes: int = SPEC_EVIDENCE_MAX_BYTES
    evidence_max_side: int = SPEC_EVIDENCE_MAX_SIDE
    evidence_max_pixels: int = SPEC_EVIDENCE_MAX_PIXELS
    evidence_per_attempt: int = 32
    evidence_bytes_per_attempt: int = 128 * 1024 * 1024
    events_per_attempt: int = 1000
    sweep_interval: int = 5
    session_idle_ttl: int = 1800
    session_absolute_ttl: int = 43200
    cookie_secure: bool = False
    pending_connections_max: int = 512
    pending_connections_per_address: int = 64
    pending_connection_timeout: int = 15
    log_format: str = "text"
    log_level: str = "INFO"
    # confirmed-right orders a device–pack pair needs before it runs without a person's approval; 0 = off
    # (issue 17; CMBUYER_SUPERVISED_ORDERS)
    supervised_orders: int = 3

    @property
    def evidence_dir(self) -> Path:
        """Where evidence PNGs live (``ab/cd/<sha256>.png`` below it; design §5)."""
        return self.data_dir / "evidence"

    def require_secrets(self) -> tuple[Secret, Secret]:
        """Return ``(claim_token_secret, session_secret)`` or raise :class:`SettingsError`."""
        if self.claim_token_secret is None:
            raise SettingsError("CMBUYER_CLAIM_TOKEN_SECRET is not set (run `cmbuyer-server init`)")
        if self.session_secret is None:
            raise SettingsError("CMBUYER_SESSION_SECRET is not set (run `cmbuyer-server init`)")
        return self.claim_token_secret, self.session_secret


def read_env_file(path: Path) -> dict[str, str]:
    """Parse ``KEY=VALUE`` lines (``#`` comments, blank lines); raise SettingsError on a bad line."""
    values: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return values
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{path}: cannot read env file ({exc.__class__.__name__})") from None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"CMBUYER_[A-Z0-9_]+", key.strip(), re.ASCII):
            raise SettingsError(f"{path}:{number}: expected CMBUYER_NAME=value")
        values[key.strip()] = value.strip()
    return values


def _secret(env: Mapping[str, str], name: str) -> Secret | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return None
    if not _HEX64.fullmatch(raw):
        raise SettingsError(f"{name} must be exactly 64 lowercase hex characters (32 random bytes)")
    return Secret(bytes.fromhex(raw))


def _int(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if not _INT.fullmatch(raw) or not low <= int(raw) <= high:
        raise SettingsError(f"{name} must be an integer from {low} to {high}")
    return int(raw)


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if raw not in ("0", "1", "true", "false"):
        raise SettingsError(f"{name} must be one of 0, 1, true, false")
    return raw in ("1", "true")


def _payment_modes(env: Mapping[str, str]) -> tuple[str, ...]:
    """``CMBUYER_ALLOWED_PAYMENT_MODES``: comma-separated mode names as the payment row shows them, stored
    NFKC (the fence compares the NFKC form of what was read). An empty list is refused rather than read as
    "refuse every fence": a server that can never permit a tap is a setting mistake, said at start-up."""
    raw = env.get("CMBUYER_ALLOWED_PAYMENT_MODES")
    if raw is None or raw == "":
        return DEFAULT_PAYMENT_MODES
    # NFKC first, so a full-width comma (微信支付，支付宝) separates too
    modes = tuple(m.strip() for m in normalize_sku(raw).split(",") if m.strip())
    if not modes or not all(len(m) <= PAYMENT_MODE_MAX and not has_control_chars(m) for m in modes):
        raise SettingsError(
            "CMBUYER_ALLOWED_PAYMENT_MODES must be comma-separated payment mode names"
            " such as 微信支付,支付宝 (each at most 32 characters)"
        )
    return modes


def load_settings(data_dir: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Build :class:`Settings` for ``data_dir`` (default ``$CMBUYER_DATA_DIR`` or ``./var``).

    Reads ``<data_dir>/cmbuyer.env`` when present; ``environ`` (default ``os.environ``) overrides it.
    Raises :class:`SettingsError` (one line, names the variable) on any invalid value.
    """
    real = dict(os.environ if environ is None else environ)
    base = Path(data_dir if data_dir is not None else real.get("CMBUYER_DATA_DIR") or DEFAULT_DATA_DIR)
    env = {**read_env_file(base / ENV_FILE_NAME), **{k: v for k, v in real.items() if k.startswith("CMBUYER_")}}

    db_raw = env.get("CMBUYER_DB_PATH") or ""
    db_path = Path(db_raw) if db_raw else base / "cmbuyer.sqlite3"
    host = env.get("CMBUYER_HOST") or "127.0.0.1"
    if not _HOST.fullmatch(host):
        raise SettingsError("CMBUYER_HOST must be an IP address or host name")
    port = _int(env, "CMBUYER_PORT", 8080, 0, 65535)

    lease_ttl = _int(env, "CMBUYER_CLAIM_LEASE_TTL", 120, 1, 86400)
    auth_ttl = _int(env, "CMBUYER_AUTHORIZATION_TTL", 3600, 2, 30 * 86400)
    if lease_ttl >= auth_ttl:
        raise SettingsError("CMBUYER_CLAIM_LEASE_TTL must be strictly shorter than CMBUYER_AUTHORIZATION_TTL")

    price_raw = env.get("CMBUYER_MAX_TOTAL_PRICE") or "5000.00"
    try:
        max_price = Decimal(price_raw) if MONEY_RE.fullmatch(price_raw) else None
    except InvalidOperation:
        max_price = None
    if max_price is None or max_price <= 0:
        raise SettingsError("CMBUYER_MAX_TOTAL_PRICE must be a canonical amount such as 5000.00")

    versions_raw = env.get("CMBUYER_ALLOWED_APP_VERSIONS", ",".join(DEFAULT_APP_VERSIONS))
    versions = tuple(v.strip() for v in versions_raw.split(",") if v.strip())
    if not all(_VERSION_NAME.fullmatch(v) for v in versions):
        raise SettingsError("CMBUYER_ALLOWED_APP_VERSIONS must be comma-separated version names like 8.17.0")
    payment_modes = _payment_modes(env)

    log_format = env.get("CMBUYER_LOG_FORMAT") or "text"
    if log_format not in ("text", "json"):
        raise SettingsError("CMBUYER_LOG_FORMAT must be text or json")
    log_level = (env.get("CMBUYER_LOG_LEVEL") or "INFO").upper()
    if log_level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise SettingsError("CMBUYER_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR")

    claim_secret = _secret(env, "CMBUYER_CLAIM_TOKEN_SECRET")
    session_secret = _secret(env, "CMBUYER_SESSION_SECRET")
    if claim_secret is not None and claim_secret == session_secret:
        raise SettingsError("CMBUYER_SESSION_SECRET must differ from CMBUYER_CLAIM_TOKEN_SECRET")

    evidence_max_bytes = _int(env, "CMBUYER_EVIDENCE_MAX_BYTES", SPEC_EVIDENCE_MAX_BYTES, 1024, SPEC_EVIDENCE_MAX_BYTES)
    # Per-attempt budgets: one open claim must not be able to fill the disk or the events table.
    evidence_budget = _int(env, "CMBUYER_EVIDENCE_BYTES_PER_ATTEMPT", 128 * 1024 * 1024, 1024, 4 * 1024**3)
    if evidence_budget < evidence_max_bytes:
        raise SettingsError("CMBUYER_EVIDENCE_BYTES_PER_ATTEMPT must be at least CMBUYER_EVIDENCE_MAX_BYTES")

    idle = _int(env, "CMBUYER_SESSION_IDLE_TTL", 1800, 60, 86400)
    absolute = _int(env, "CMBUYER_SESSION_ABSOLUTE_TTL", 43200, 60, 30 * 86400)
    if idle > absolute:
        raise SettingsError("CMBUYER_SESSION_IDLE_TTL must not exceed CMBUYER_SESSION_ABSOLUTE_TTL")

    return Settings(
        data_dir=base,
        db_path=db_path,
        host=host,
        port=port,
        claim_token_secret=claim_secret,
        session_secret=session_secret,
        claim_lease_ttl=lease_ttl,
        authorization_ttl=auth_ttl,
        max_quantity=_int(env, "CMBUYER_MAX_QUANTITY", 99, 1, 999),
        max_total_price=max_price,
        allowed_app_versions=versions,
        allowed_payment_modes=payment_modes,
        heartbeat_interval=_int(env, "CMBUYER_HEARTBEAT_INTERVAL", 10, 1, 3600),
        heartbeat_stale_factor=_int(env, "CMBUYER_HEARTBEAT_STALE_FACTOR", 3, 1, 100),
        evidence_max_bytes=evidence_max_bytes,
        evidence_max_side=_int(env, "CMBUYER_EVIDENCE_MAX_SIDE", SPEC_EVIDENCE_MAX_SIDE, 16, SPEC_EVIDENCE_MAX_SIDE),
        evidence_max_pixels=_int(
            env, "CMBUYER_EVIDENCE_MAX_PIXELS", SPEC_EVIDENCE_MAX_PIXELS, 256, SPEC_EVIDENCE_MAX_PIXELS
        ),
        evidence_per_attempt=_int(env, "CMBUYER_EVIDENCE_PER_ATTEMPT", 32, 1, 10_000),
        evidence_bytes_per_attempt=evidence_budget,
        events_per_attempt=_int(env, "CMBUYER_EVENTS_PER_ATTEMPT", 1000, 20, 1_000_000),
        sweep_interval=_int(env, "CMBUYER_SWEEP_INTERVAL", 5, 1, 3600),
        session_idle_ttl=idle,
        session_absolute_ttl=absolute,
        cookie_secure=_bool(env, "CMBUYER_COOKIE_SECURE", False),
        pending_connections_max=_int(env, "CMBUYER_PENDING_CONNECTIONS_MAX", 512, 8, 1_000_000),
        pending_connections_per_address=_int(env, "CMBUYER_PENDING_CONNECTIONS_PER_ADDRESS", 64, 1, 1_000_000),
        pending_connection_timeout=_int(env, "CMBUYER_PENDING_CONNECTION_TIMEOUT", 15, 1, 3600),
        log_format=log_format,
        log_level=log_level,
        supervised_orders=_int(env, "CMBUYER_SUPERVISED_ORDERS", 3, 0, 1000),
    )
