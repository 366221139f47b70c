"""agent/settings.py: one table read once by the CLI — precedence (flag > variable > default), today's defaults,
one-line Chinese errors, the generated docs table, and the rule that no other agent module reads the
environment (a source scan, proved on a synthetic module)."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from cmbuyer.agent.approval import ApprovalSettings
from cmbuyer.agent.cli import build_parser, main
from cmbuyer.agent.holds import HoldPolicy
from cmbuyer.agent.settings import (
    AGENT_SETTINGS_TABLE,
    AgentSettings,
    AgentSettingsError,
    agent_settings_markdown,
    load_agent_settings,
)

ROOT = Path(__file__).resolve().parents[2]
AGENT_DIR = ROOT / "agent"
# a value each row accepts from its variable, and the value it reads as
GOOD = {
    "server_url": ("https://cmbuyer.example:8443", "https://cmbuyer.example:8443"),
    "server_ca": ("/etc/cmbuyer/ca.pem", Path("/etc/cmbuyer/ca.pem")),
    "device_id": ("0b5f6c1e-3a9d-4c1b-8e2f-7d6a5b4c3d2e", "0b5f6c1e-3a9d-4c1b-8e2f-7d6a5b4c3d2e"),
    "device_token": ("ab" * 32, "ab" * 32),
    "state_dir": ("/var/lib/cmbuyer-agent", Path("/var/lib/cmbuyer-agent")),
    "lock_dir": ("/run/cmbuyer", Path("/run/cmbuyer")),
    "pack_dir": ("/etc/cmbuyer/packs", Path("/etc/cmbuyer/packs")),
    "buy_path": ("group", "group"),
    "crash_loop_limit": (" 5 ", 5),
    "failure_limit": ("1", 1),
    "approval_timeout_seconds": ("120", 120.0),
    "approval_poll_seconds": (" 0.5 ", 0.5),
    "adb_host": ("10.0.0.7", "10.0.0.7"),
    "adb_port": ("15037", 15037),
}
BAD = {
    "buy_path": ["both", "Single"],
    "crash_loop_limit": ["two", "0", "-1"],
    "failure_limit": ["0", "1.5"],
    "approval_timeout_seconds": ["0", "nan", "inf", "3s"],
    "approval_poll_seconds": ["-1", "3s"],
    "adb_port": ["0", "65536", "port", "١٢٣"],
}


def test_every_field_has_one_row_and_the_defaults_are_todays() -> None:
    assert [f.name for f in dataclasses.fields(AgentSettings)] == [row.name for row in AGENT_SETTINGS_TABLE]
    s = load_agent_settings(environ={})
    assert (s.server_url, s.server_ca, s.device_id, s.device_token) == ("http://127.0.0.1:8080", None, None, None)
    assert (s.state_dir, s.lock_dir, s.pack_dir, s.buy_path) == (Path("./var/agent"), None, None, "single")
    assert s.holds == HoldPolicy(2, 3) and s.approval == ApprovalSettings(600.0, 3.0)
    assert s.adb_server == ("127.0.0.1", 5037)


@pytest.mark.parametrize("row", AGENT_SETTINGS_TABLE, ids=lambda row: row.env)
def test_each_variable_is_read_and_an_empty_one_is_unset(row: object) -> None:
    assert isinstance(row, type(AGENT_SETTINGS_TABLE[0]))
    raw, value = GOOD[row.name]
    assert getattr(load_agent_settings(environ={row.env: raw}), row.name) == value
    for unset in ("", "   "):
        assert getattr(load_agent_settings(environ={row.env: unset}), row.name) == row.default


@pytest.mark.parametrize("row", [r for r in AGENT_SETTINGS_TABLE if r.flag], ids=lambda row: row.flag)
def test_a_flag_beats_the_variable(row: object) -> None:
    """Through the real parser: the command that offers the flag, given it, reads the flag's value."""
    assert isinstance(row, type(AGENT_SETTINGS_TABLE[0])) and row.flag is not None
    raw, value = GOOD[row.name]
    other = {"buy_path": "single", "crash_loop_limit": "7", "failure_limit": "9"}.get(row.name, "/elsewhere")
    command = {"--buy-path": ["dry-run"], "--crash-loop-limit": ["run"], "--failure-limit": ["run"]}.get(
        row.flag, ["doctor"]
    )
    argv = [*command, "--device", "sim-1", row.flag, raw.strip()]
    if command == ["dry-run"]:
        argv += ["--goods-id", "1", "--quantity", "1", "--max-total", "1.00"]
    args = build_parser().parse_args(argv)
    assert getattr(load_agent_settings(args, {row.env: other}), row.name) == value
    # a command without the flag (or not given it) leaves the setting to the variable
    assert (
        getattr(load_agent_settings(build_parser().parse_args(["journal", "--device", "x"]), {row.env: raw}), row.name)
        == value
    )


@pytest.mark.parametrize(("name", "raw"), [(name, raw) for name, raws in BAD.items() for raw in raws])
def test_a_bad_value_is_one_chinese_line_naming_the_variable(name: str, raw: str) -> None:
    row = next(r for r in AGENT_SETTINGS_TABLE if r.name == name)
    with pytest.raises(AgentSettingsError) as err:
        load_agent_settings(environ={row.env: raw})
    message = str(err.value)
    assert row.env in message and "\n" not in message and any("\u4e00" <= ch <= "\u9fff" for ch in message)


def test_limits_from_flags_and_the_approval_pair_are_checked_together() -> None:
    with pytest.raises(AgentSettingsError, match="failure_limit 必须是 >= 1 的整数"):
        load_agent_settings({"failure_limit": 0}, {})
    with pytest.raises(AgentSettingsError, match="CMBUYER_AGENT_APPROVAL_POLL_SECONDS 不能大于"):
        load_agent_settings(
            environ={"CMBUYER_AGENT_APPROVAL_TIMEOUT_SECONDS": "2", "CMBUYER_AGENT_APPROVAL_POLL_SECONDS": "3"}
        )


def test_the_token_never_shows() -> None:
    token = "cd" * 32
    settings = load_agent_settings(environ={"CMBUYER_DEVICE_TOKEN": token})
    assert settings.device_token == token and token not in repr(settings) and token not in str(settings)


def test_a_bad_setting_stops_the_command_before_it_touches_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``journal`` would create nothing anyway; ``run`` would take the lock and open the journal: neither happens."""
    state = tmp_path / "state"
    monkeypatch.setenv("CMBUYER_AGENT_STATE_DIR", str(state))
    monkeypatch.setenv("CMBUYER_AGENT_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("CMBUYER_AGENT_BUY_PATH", "both")
    assert main(["run", "--device", "sim-1", "--once"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("设置有误：CMBUYER_AGENT_BUY_PATH 只能是 single 或 group")
    monkeypatch.setenv("CMBUYER_AGENT_BUY_PATH", "group")
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", "adb")
    assert main(["journal", "--device", "sim-1"]) == 2
    assert "设置有误：ANDROID_ADB_SERVER_PORT 必须是 1 到 65535 的整数" in capsys.readouterr().err
    assert not state.exists() and not (tmp_path / "locks").exists()
    monkeypatch.delenv("ANDROID_ADB_SERVER_PORT")
    assert main(["journal", "--device", "sim-1"]) == 1  # the same command, settings fine: it runs
    assert json.loads(capsys.readouterr().out)["path"] == str(state / "sim-1.sqlite3")


def test_the_docs_table_is_generated_from_the_table() -> None:
    docs = (ROOT / "docs" / "agent.md").read_text(encoding="utf-8")
    begin = docs.index("| variable | flag | default | meaning |")
    end = docs.index("<!-- end of agent settings table -->")
    assert docs[begin:end] == agent_settings_markdown(), (
        "docs/agent.md's agent settings table is stale; paste the output of: .venv/bin/python -c "
        "'from cmbuyer.agent.settings import agent_settings_markdown; print(agent_settings_markdown(), end=\"\")'"
    )


# -- no agent module but settings.py reads the environment ---------------------------------------------------

_ENV_NAMES = frozenset({"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"})


def env_reads(source: str) -> list[int]:
    """Line numbers where ``source`` touches the process environment: ``os.environ``/``os.getenv`` … (any
    alias of ``os``) or a name imported from ``os`` among those."""
    tree = ast.parse(source)
    os_names = {"os"} | {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name == "os"
    }
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in _ENV_NAMES:
            if isinstance(node.value, ast.Name) and node.value.id in os_names:
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            if any(alias.name in _ENV_NAMES for alias in node.names):
                lines.append(node.lineno)
    return sorted(lines)


def test_no_agent_module_but_settings_reads_the_environment() -> None:
    found = {
        str(path.relative_to(ROOT)): lines
        for path in sorted(AGENT_DIR.rglob("*.py"))
        if path.name != "settings.py" or path.parent != AGENT_DIR
        if (lines := env_reads(path.read_text(encoding="utf-8")))
    }
    assert found == {}, f"read the setting in agent/settings.py and pass it down: {found}"
    assert env_reads((AGENT_DIR / "settings.py").read_text(encoding="utf-8"))  # the scan sees the one reader


def test_the_scan_finds_every_way_of_reading_the_environment() -> None:
    synthetic = (
        "import os\nimport os as system\nfrom os import getenv\nfrom os import environ as env\n"
        "a = os.environ.get('CMBUYER_AGENT_X')\nb = system.getenv('X')\nc = os.environ['Y']\n"
        "d = getenv('Z')\ne = 'os.environ in a string'\n"
    )
    assert env_reads(synthetic) == [3, 4, 5, 6, 7]
    assert env_reads("import os\npath = os.path.join('a', 'b')\n") == []
