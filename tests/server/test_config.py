"""Settings validation (issue 2): every bad value stops start-up with one line naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cmbuyer.server.config import SettingsError, load_settings

GOOD = {"CMBUYER_CLAIM_TOKEN_SECRET": "ab" * 32, "CMBUYER_SESSION_SECRET": "cd" * 32}


def test_defaults_and_secret_masking(tmp_path: Path) -> None:
    s = load_settings(tmp_path, environ=GOOD)
    assert (s.host, s.port, s.claim_lease_ttl, s.authorization_ttl) == ("127.0.0.1", 8080, 120, 3600)
    assert s.db_path == tmp_path / "cmbuyer.sqlite3"
    assert "abab" not in repr(s) and "cdcd" not in repr(s) and "***" in repr(s)
    assert s.require_secrets()[0].reveal() == bytes.fromhex("ab" * 32)


def test_app_version_and_payment_mode_defaults(tmp_path: Path) -> None:
    s = load_settings(tmp_path, environ=GOOD)
    assert s.allowed_app_versions == ("8.17.0", "8.22.0")  # both simulator layouts (issue 15)
    assert s.allowed_payment_modes == ("微信支付", "支付宝")


def test_payment_modes_are_trimmed_and_nfkc(tmp_path: Path) -> None:
    # a full-width comma separates too (NFKC first); blanks between commas are dropped
    s = load_settings(tmp_path, environ={**GOOD, "CMBUYER_ALLOWED_PAYMENT_MODES": " 支付宝 ，, 微信支付"})
    assert s.allowed_payment_modes == ("支付宝", "微信支付")


def test_env_file_is_read_and_environment_overrides_it(tmp_path: Path) -> None:
    (tmp_path / "cmbuyer.env").write_text("# comment\nCMBUYER_PORT=9000\nCMBUYER_CLAIM_LEASE_TTL=30\n")
    s = load_settings(tmp_path, environ={**GOOD, "CMBUYER_PORT": "9001"})
    assert (s.port, s.claim_lease_ttl) == (9001, 30)


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"CMBUYER_CLAIM_TOKEN_SECRET": "ab" * 31}, "CMBUYER_CLAIM_TOKEN_SECRET"),
        ({"CMBUYER_CLAIM_TOKEN_SECRET": "AB" * 32}, "CMBUYER_CLAIM_TOKEN_SECRET"),
        ({"CMBUYER_CLAIM_TOKEN_SECRET": "ab" * 32 + "\n"}, "CMBUYER_CLAIM_TOKEN_SECRET"),
        ({"CMBUYER_SESSION_SECRET": "zz" * 32}, "CMBUYER_SESSION_SECRET"),
        ({"CMBUYER_SESSION_SECRET": "ab" * 32}, "CMBUYER_SESSION_SECRET"),
        ({"CMBUYER_CLAIM_LEASE_TTL": "3600"}, "CMBUYER_CLAIM_LEASE_TTL"),
        ({"CMBUYER_CLAIM_LEASE_TTL": "0"}, "CMBUYER_CLAIM_LEASE_TTL"),
        ({"CMBUYER_CLAIM_LEASE_TTL": "-5"}, "CMBUYER_CLAIM_LEASE_TTL"),
        ({"CMBUYER_PORT": "70000"}, "CMBUYER_PORT"),
        ({"CMBUYER_MAX_TOTAL_PRICE": "12.8"}, "CMBUYER_MAX_TOTAL_PRICE"),
        ({"CMBUYER_ALLOWED_APP_VERSIONS": "8.17.0,<x>"}, "CMBUYER_ALLOWED_APP_VERSIONS"),
        ({"CMBUYER_ALLOWED_PAYMENT_MODES": " , "}, "CMBUYER_ALLOWED_PAYMENT_MODES"),
        ({"CMBUYER_ALLOWED_PAYMENT_MODES": "微信支付," + "支" * 33}, "CMBUYER_ALLOWED_PAYMENT_MODES"),
        ({"CMBUYER_ALLOWED_PAYMENT_MODES": "微信支付,支付\x07宝"}, "CMBUYER_ALLOWED_PAYMENT_MODES"),
        ({"CMBUYER_EVIDENCE_MAX_BYTES": str(20 * 1024 * 1024)}, "CMBUYER_EVIDENCE_MAX_BYTES"),
        ({"CMBUYER_PENDING_CONNECTIONS_MAX": "7"}, "CMBUYER_PENDING_CONNECTIONS_MAX"),
        ({"CMBUYER_PENDING_CONNECTIONS_PER_ADDRESS": "0"}, "CMBUYER_PENDING_CONNECTIONS_PER_ADDRESS"),
        ({"CMBUYER_PENDING_CONNECTION_TIMEOUT": "0"}, "CMBUYER_PENDING_CONNECTION_TIMEOUT"),
    ],
)
def test_bad_values_name_the_variable(tmp_path: Path, env: dict[str, str], variable: str) -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(tmp_path, environ={**GOOD, **env})
    message = str(err.value)
    assert variable in message and "\n" not in message
    assert "abab" not in message and "zzzz" not in message


def _serve(data_dir: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CMBUYER_")}
    return subprocess.run(
        [sys.executable, "-m", "cmbuyer.server.cli", "--data-dir", str(data_dir), "serve", "--port", "0"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"CMBUYER_SESSION_SECRET": "cd" * 32}, "CMBUYER_CLAIM_TOKEN_SECRET"),  # missing
        ({**GOOD, "CMBUYER_CLAIM_TOKEN_SECRET": "ab" * 16}, "CMBUYER_CLAIM_TOKEN_SECRET"),  # short
        ({**GOOD, "CMBUYER_CLAIM_TOKEN_SECRET": "AB" * 32}, "CMBUYER_CLAIM_TOKEN_SECRET"),  # uppercase
        ({**GOOD, "CMBUYER_CLAIM_LEASE_TTL": "4000"}, "CMBUYER_CLAIM_LEASE_TTL"),  # TTL >= authorization TTL
    ],
)
def test_serve_refuses_bad_settings_with_one_line(tmp_path: Path, env: dict[str, str], variable: str) -> None:
    result = _serve(tmp_path, env)
    assert result.returncode == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and variable in lines[0]


def test_init_refuses_an_unwritable_data_dir(tmp_path: Path) -> None:
    blocked = tmp_path / "ro"
    blocked.mkdir()
    blocked.chmod(0o500)
    try:
        if os.access(blocked, os.W_OK):
            target = Path("/proc/cmbuyer-not-writable")  # root ignores mode bits; /proc is never writable
        else:
            target = blocked / "data"
        clean = {k: v for k, v in os.environ.items() if not k.startswith("CMBUYER_")}
        result = subprocess.run(
            [sys.executable, "-m", "cmbuyer.server.cli", "--data-dir", str(target), "init"],
            env=clean,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        blocked.chmod(0o700)
    assert result.returncode == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "not writable" in lines[0]
