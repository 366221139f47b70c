"""The agent's settings: one frozen :class:`AgentSettings` read once by ``cmbuyer-agent`` (agent/cli.py).

Sources, earlier wins: the command's flag (where the setting has one and the command offers it) > the
environment variable > the built-in default. A flag or variable given as an empty text counts as not given.
Every setting is one row of :data:`AGENT_SETTINGS_TABLE` (attribute, flag, variable, default, parser,
meaning): :func:`load_agent_settings` reads by it and docs/agent.md's settings table is generated from it
(:func:`agent_settings_markdown`, checked by tests/agent/test_settings.py). A bad value raises
:class:`AgentSettingsError`, one line in Chinese naming the flag or variable, never echoing a token.

This is the only agent module that reads the environment (tests/agent/test_settings.py scans agent/ for
others); the modules that need a setting take it as an argument.

``ANDROID_ADB_SERVER_HOST``/``ANDROID_ADB_SERVER_PORT`` are adb's own variables (adb, adbutils and
uiautomator2 honour them); the agent reads them here with adbutils' defaults so the same variable points
all of them at one adb server, and passes the endpoint to the phone adapter explicitly (doctor probes and
names it).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cmbuyer.agent.approval import ApprovalSettings
from cmbuyer.agent.holds import HoldPolicy

DEFAULT_SERVER = "http://127.0.0.1:8080"
DEFAULT_STATE_DIR = Path("./var/agent")
BUY_PATHS = ("single", "group")


class AgentSettingsError(ValueError):
    """A setting's value is not allowed; ``str`` is the one line to print (names the flag or variable)."""


@dataclass(frozen=True)
class AgentSetting:
    """One setting: the :class:`AgentSettings` attribute ``name``; ``flag`` (None: environment only; the
    argparse destination is the flag without dashes); ``env``, its variable; ``default``; ``parse`` (the
    variable's raw text and this row → the value; raises :class:`AgentSettingsError`); ``doc`` (the docs'
    meaning column) and ``shown`` (the docs' default cell when the default is no value one could write).
    """

    name: str
    flag: str | None
    env: str
    default: Any
    parse: Callable[[str, AgentSetting], Any]
    doc: str
    shown: str | None = None

    @property
    def dest(self) -> str | None:
        """The argparse destination of :attr:`flag` (``--server-ca`` → ``server_ca``), or None."""
        return None if self.flag is None else self.flag.lstrip("-").replace("-", "_")

    def read(self, flags: Mapping[str, Any], env: Mapping[str, str]) -> Any:
        """The flag's value when given (argparse has typed it; text is parsed like the variable's), else the
        variable's, else :attr:`default`. Empty or blank text counts as not given."""
        given = flags.get(self.dest) if self.dest is not None else None
        if given is not None and given != "":
            return self.parse(given, self) if isinstance(given, str) else given
        raw = env.get(self.env)
        if raw is None or not raw.strip():
            return self.default
        return self.parse(raw, self)


def _text(raw: str, row: AgentSetting) -> str:
    return raw


def _path(raw: str, row: AgentSetting) -> Path:
    return Path(raw)


def _limit(raw: str, row: AgentSetting) -> int:
    """A hold-policy streak limit: an integer >= 1 (a flag's, typed by argparse, is checked by
    :class:`~cmbuyer.agent.holds.HoldPolicy`, which names the limit)."""
    try:
        value = int(raw.strip())
    except ValueError:
        value = 0
    if value < 1:
        raise AgentSettingsError(f"{row.env} 必须是 >= 1 的整数")
    return value


def _seconds(raw: str, row: AgentSetting) -> float:
    """A positive finite number of seconds."""
    try:
        value = float(raw.strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise AgentSettingsError(f"{row.env} 必须是大于 0 的秒数")
    return value


def _buy_path(raw: str, row: AgentSetting) -> str:
    if raw not in BUY_PATHS:
        raise AgentSettingsError(f"{row.env} 只能是 single 或 group")
    return raw


def _port(raw: str, row: AgentSetting) -> int:
    value = raw.strip()
    if not (value.isascii() and value.isdigit() and 1 <= int(value) <= 65535):
        raise AgentSettingsError(f"{row.env} 必须是 1 到 65535 的整数")
    return int(value)


# In docs/agent.md's order.
AGENT_SETTINGS_TABLE: tuple[AgentSetting, ...] = (
    AgentSetting(
        "server_url",
        "--server",
        "CMBUYER_SERVER_URL",
        DEFAULT_SERVER,
        _text,
        "the server, `http(s)://host[:port]`; `http://` only for a loopback server",
    ),
    AgentSetting(
        "server_ca",
        "--server-ca",
        "CMBUYER_SERVER_CA",
        None,
        _path,
        "PEM file of the CA that signed the server's certificate (else the system's CAs)",
        shown="(system CAs)",
    ),
    AgentSetting(
        "device_id",
        None,
        "CMBUYER_DEVICE_ID",
        None,
        _text,
        "device id, with the token (else a credentials file)",
        shown="(unset)",
    ),
    AgentSetting(
        "device_token",
        None,
        "CMBUYER_DEVICE_TOKEN",
        None,
        _text,
        "device token, with the id (never printed)",
        shown="(unset)",
    ),
    AgentSetting(
        "state_dir",
        None,
        "CMBUYER_AGENT_STATE_DIR",
        DEFAULT_STATE_DIR,
        _path,
        "journals (`<serial>.sqlite3`) and default credentials files (`<serial>.cred`)",
        shown="`./var/agent`",
    ),
    AgentSetting(
        "lock_dir",
        None,
        "CMBUYER_AGENT_LOCK_DIR",
        None,
        _path,
        "per-phone run locks; the same value for every agent and doctor of the host",
        shown="`/tmp/cmbuyer-agent-<uid>`",
    ),
    AgentSetting(
        "pack_dir",
        "--pack-dir",
        "CMBUYER_AGENT_PACK_DIR",
        None,
        _path,
        "operator selector packs, preferred to the shipped ones of the same version",
        shown="(none)",
    ),
    AgentSetting(
        "buy_path",
        "--buy-path",
        "CMBUYER_AGENT_BUY_PATH",
        "single",
        _buy_path,
        "`single` (单独购买) or `group` (拼单)",
    ),
    AgentSetting(
        "crash_loop_limit",
        "--crash-loop-limit",
        "CMBUYER_AGENT_CRASH_LOOP_LIMIT",
        2,
        _limit,
        "consecutive crashed attempts before the phone is held (>= 1)",
    ),
    AgentSetting(
        "failure_limit",
        "--failure-limit",
        "CMBUYER_AGENT_FAILURE_LIMIT",
        3,
        _limit,
        "consecutive attempts failed before the fence before the phone is held (>= 1)",
    ),
    AgentSetting(
        "approval_timeout_seconds",
        None,
        "CMBUYER_AGENT_APPROVAL_TIMEOUT_SECONDS",
        600.0,
        _seconds,
        "longest wait for a person's decision, seconds (> 0)",
        shown="`600`",
    ),
    AgentSetting(
        "approval_poll_seconds",
        None,
        "CMBUYER_AGENT_APPROVAL_POLL_SECONDS",
        3.0,
        _seconds,
        "seconds between two looks while waiting (> 0, not above the timeout)",
        shown="`3`",
    ),
    AgentSetting("adb_host", None, "ANDROID_ADB_SERVER_HOST", "127.0.0.1", _text, "the adb server's host (adb's own)"),
    AgentSetting("adb_port", None, "ANDROID_ADB_SERVER_PORT", 5037, _port, "the adb server's port (adb's own)"),
)
AGENT_SETTINGS_BY_NAME: dict[str, AgentSetting] = {row.name: row for row in AGENT_SETTINGS_TABLE}


@dataclass(frozen=True)
class AgentSettings:
    """The agent's validated settings (:data:`AGENT_SETTINGS_TABLE` says where each comes from). Seconds are
    floats; paths are :class:`~pathlib.Path`; None means "not set" where the table shows no default value.
    The device token never shows in ``repr``."""

    server_url: str
    server_ca: Path | None
    device_id: str | None
    device_token: str | None = field(repr=False)
    state_dir: Path
    lock_dir: Path | None
    pack_dir: Path | None
    buy_path: str
    crash_loop_limit: int
    failure_limit: int
    approval_timeout_seconds: float
    approval_poll_seconds: float
    adb_host: str
    adb_port: int

    @property
    def holds(self) -> HoldPolicy:
        """The hold policy's two streak limits."""
        return HoldPolicy(self.crash_loop_limit, self.failure_limit)

    @property
    def approval(self) -> ApprovalSettings:
        """How long and how often the approval wait looks."""
        return ApprovalSettings(self.approval_timeout_seconds, self.approval_poll_seconds)

    @property
    def adb_server(self) -> tuple[str, int]:
        """``(host, port)`` of the adb server."""
        return self.adb_host, self.adb_port


def load_agent_settings(
    flags: argparse.Namespace | Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> AgentSettings:
    """Build :class:`AgentSettings` from a command's parsed ``flags`` (an argparse namespace; a command
    without a setting's flag leaves it to the environment) and ``environ`` (default ``os.environ``).
    Raises :class:`AgentSettingsError` (one line) on any bad value, and when the approval poll interval
    is longer than its timeout."""
    given = vars(flags) if isinstance(flags, argparse.Namespace) else dict(flags or {})
    env = os.environ if environ is None else environ
    values = {row.name: row.read(given, env) for row in AGENT_SETTINGS_TABLE}
    settings = AgentSettings(**values)
    try:
        settings.holds  # noqa: B018 - HoldPolicy checks the limits (a flag of 0 names the limit)
    except ValueError as exc:
        raise AgentSettingsError(str(exc)) from None
    if settings.approval_poll_seconds > settings.approval_timeout_seconds:
        raise AgentSettingsError("CMBUYER_AGENT_APPROVAL_POLL_SECONDS 不能大于 CMBUYER_AGENT_APPROVAL_TIMEOUT_SECONDS")
    return settings


def _default_text(row: AgentSetting) -> str:
    if row.shown is not None:
        return row.shown
    return f"`{row.default}`"


def agent_settings_markdown() -> str:
    """docs/agent.md's settings table (Markdown), one row per :data:`AGENT_SETTINGS_TABLE` entry."""
    lines = ["| variable | flag | default | meaning |", "|---|---|---|---|"]
    for row in AGENT_SETTINGS_TABLE:
        flag = f"`{row.flag}`" if row.flag else ""
        lines.append(f"| `{row.env}` | {flag} | {_default_text(row)} | {row.doc} |")
    return "\n".join(lines) + "\n"
