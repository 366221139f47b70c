"""Settings validation: every bad value stops start-up with one line naming the variable."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cmbuyer.server.config import (
    DEFAULT_APP_VERSIONS,
    SETTINGS_BY_NAME,
    SETTINGS_TABLE,
    Settings,
    default_text,
    env_file_defaults,
    load_settings,
    settings_markdown,
)
from cmbuyer.server.domain.errors import SettingsError
from cmbuyer.server.domain.evidence_limits import MULTIPART_OVERHEAD, EvidenceLimits
from cmbuyer.server.web import multipart

ROOT = Path(__file__).resolve().parents[2]

GOOD = {"CMBUYER_CLAIM_TOKEN_SECRET": "ab" * 32, "CMBUYER_SESSION_SECRET": "cd" * 32}


def test_defaults_and_secret_masking(tmp_path: Path) -> None:
    s = load_settings(tmp_path, environ=GOOD)
    assert (s.host, s.port, s.claim_lease_ttl, s.authorization_ttl) == ("127.0.0.1", 8080, 120, 3600)
    assert s.db_path == tmp_path / "cmbuyer.sqlite3"
    assert "abab" not in repr(s) and "cdcd" not in repr(s) and "***" in repr(s)
    assert s.require_secrets()[0].reveal() == bytes.fromhex("ab" * 32)


def test_app_version_and_payment_mode_defaults(tmp_path: Path) -> None:
    s = load_settings(tmp_path, environ=GOOD)
    assert s.allowed_app_versions == ("8.17.0", "8.22.0")  # both simulator layouts
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
        # TLS files come in pairs; proxies are addresses; a replica is a file:/// or s3:// URL
        ({"CMBUYER_TLS_CERT": "/srv/cmbuyer/tls/server.pem"}, "CMBUYER_TLS_KEY"),
        ({"CMBUYER_TLS_KEY": "/srv/cmbuyer/tls/server-key.pem"}, "CMBUYER_TLS_CERT"),
        ({"CMBUYER_TLS_CERT": "a\x07b", "CMBUYER_TLS_KEY": "k"}, "CMBUYER_TLS_CERT"),
        ({"CMBUYER_TRUSTED_PROXIES": "10.0.0.5,proxy.lan"}, "CMBUYER_TRUSTED_PROXIES"),
        ({"CMBUYER_REPLICA_URL": "/mnt/backup"}, "CMBUYER_REPLICA_URL"),
        ({"CMBUYER_REPLICA_URL": "file://relative/path"}, "CMBUYER_REPLICA_URL"),
        ({"CMBUYER_REPLICA_URL": "http://example.invalid/db"}, "CMBUYER_REPLICA_URL"),
        ({"CMBUYER_REPLICA_SYNC_INTERVAL": "0"}, "CMBUYER_REPLICA_SYNC_INTERVAL"),
    ],
)
def test_bad_values_name_the_variable(tmp_path: Path, env: dict[str, str], variable: str) -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(tmp_path, environ={**GOOD, **env})
    message = str(err.value)
    assert variable in message and "\n" not in message
    assert "abab" not in message and "zzzz" not in message


def test_tls_proxy_and_replica_settings(tmp_path: Path) -> None:
    s = load_settings(
        tmp_path,
        environ={
            **GOOD,
            "CMBUYER_TLS_CERT": "/c.pem",
            "CMBUYER_TLS_KEY": "/k.pem",
            "CMBUYER_TRUSTED_PROXIES": "10.0.0.5, 192.168.1.0/24",
            "CMBUYER_REPLICA_URL": "s3://bucket/cmbuyer",
        },
    )
    assert s.tls and s.secure_cookies and not s.cookie_secure  # Secure follows the server's own TLS
    assert [str(n) for n in s.trusted_proxies] == ["10.0.0.5/32", "192.168.1.0/24"]
    assert (s.replica_url, s.replica_sync_interval) == ("s3://bucket/cmbuyer", 1)
    plain = load_settings(tmp_path, environ=GOOD)
    assert not plain.tls and not plain.secure_cookies and plain.trusted_proxies == () and plain.replica_url is None


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
    assert len(lines) == 1 and "不可写" in lines[0]


# -- one table: defaults, bounds, README -------------------------------------------------------


def test_every_setting_is_one_table_row_and_its_default_is_the_rows() -> None:
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    assert set(fields) == set(SETTINGS_BY_NAME)
    assert len(SETTINGS_BY_NAME) == len(SETTINGS_TABLE)
    assert len({row.env for row in SETTINGS_TABLE}) == len(SETTINGS_TABLE)
    for row in SETTINGS_TABLE:
        if row.parse is None:  # data dir and DB path: required fields, read by load_settings itself
            assert fields[row.name].default is dataclasses.MISSING, row.name
        else:
            assert fields[row.name].default == row.default, row.name


def test_defaults_are_what_an_empty_environment_loads(tmp_path: Path) -> None:
    s = load_settings(tmp_path, environ={})
    for row in SETTINGS_TABLE:
        if row.parse is not None:
            assert getattr(s, row.name) == row.default, row.name
    assert s.data_dir == tmp_path


def test_every_default_is_inside_its_bounds_and_reads_back_as_itself() -> None:
    for row in SETTINGS_TABLE:
        if row.low is not None:
            assert row.high is not None and row.low <= row.default <= row.high, row.name
        if row.parse is not None and row.default is not None:
            assert row.parse(default_text(row), row) == row.default, row.name


def test_bounds_are_enforced_at_both_ends(tmp_path: Path) -> None:
    for row in SETTINGS_TABLE:
        if row.low is None or row.high is None:
            continue
        for bad in (row.low - 1, row.high + 1):
            with pytest.raises(SettingsError) as err:
                load_settings(tmp_path, environ={row.env: str(bad)})
            assert row.env in str(err.value)


def test_readme_settings_table_is_generated_from_the_table() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    begin = readme.index("| variable | default | allowed | meaning |")
    end = readme.index("<!-- end of settings table -->")
    assert readme[begin:end] == settings_markdown(), (
        "README's settings table is stale; paste the output of: .venv/bin/python -c "
        "'from cmbuyer.server.config import settings_markdown; print(settings_markdown(), end=\"\")'"
    )


def test_default_app_versions_are_the_shipped_packs_versions() -> None:
    """The supported app versions live in the packs (agent/packs/*.json) and the one setting."""
    packs = [json.loads(p.read_text(encoding="utf-8"))["app"] for p in (ROOT / "agent" / "packs").glob("*.json")]
    shipped = tuple(app["version_name"] for app in sorted(packs, key=lambda app: app["version_code"]))
    assert DEFAULT_APP_VERSIONS == shipped


def test_init_writes_the_tables_defaults() -> None:
    assert env_file_defaults() == {
        "CMBUYER_CLAIM_LEASE_TTL": "120",
        "CMBUYER_AUTHORIZATION_TTL": "3600",
        "CMBUYER_ALLOWED_APP_VERSIONS": ",".join(DEFAULT_APP_VERSIONS),
    }


def test_one_evidence_limits_object_feeds_the_request_cap_the_multipart_reader_and_the_png_check(
    tmp_path: Path,
) -> None:
    env = {
        "CMBUYER_EVIDENCE_MAX_BYTES": "2048",
        "CMBUYER_EVIDENCE_MAX_SIDE": "64",
        "CMBUYER_EVIDENCE_MAX_PIXELS": "512",
    }
    limits = load_settings(tmp_path, environ=env).evidence_limits
    assert limits == EvidenceLimits(max_bytes=2048, max_side=64, max_pixels=512)
    assert limits.request_cap == 2048 + MULTIPART_OVERHEAD == 2048 + 16 * 1024
    caps = multipart.Limits.for_evidence(limits)
    assert (caps.max_total, caps.max_file_bytes) == (limits.request_cap, 2048)
    assert EvidenceLimits() == load_settings(tmp_path, environ={}).evidence_limits  # defaults: the protocol's
    assert EvidenceLimits().max_bytes == 10 * 1024 * 1024
