"""TLS on the server side (server/tls.py and ``cmbuyer-server tls init`` / ``serve``): the files
``tls init`` writes (0600, the CA key apart, paths in cmbuyer.env, a renewal keeps the CA), the one-line
"TLS" errors for unusable files, the bind refusals, and a real ``serve`` over HTTPS: verified with the
private CA, ``Secure`` on its cookies, no plain HTTP answered."""

from __future__ import annotations

import os
import socket
import ssl
import stat
import urllib.request
from pathlib import Path

import pytest
import trustme
from cryptography import x509

from cmbuyer.server.cli import main as cli_main
from cmbuyer.server.config import load_settings, read_env_file
from cmbuyer.server.tls import TlsError, server_context
from tests.server.submissions.live import LiveServer


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_tls_init_writes_private_files_and_records_them(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["--data-dir", str(data_dir), "tls", "init", "--host", "127.0.0.1", "--host", "phones.lan"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    ca = data_dir / "tls" / "ca.pem"
    assert printed[-1] == str(ca), "the last line is the one file phone hosts need"
    files = [
        ca,
        data_dir / "tls" / "server.pem",
        data_dir / "tls" / "server-key.pem",
        data_dir / "tls-ca" / "ca-key.pem",
    ]
    assert all(_mode(f) == 0o600 for f in files)
    assert _mode(data_dir / "tls") == _mode(data_dir / "tls-ca") == 0o700
    env = read_env_file(data_dir / "cmbuyer.env")
    assert Path(env["CMBUYER_TLS_CERT"]) == files[1].resolve()
    assert Path(env["CMBUYER_TLS_KEY"]) == files[2].resolve()
    assert "CMBUYER_CLAIM_TOKEN_SECRET" in env  # the rest of the file kept
    assert _mode(data_dir / "cmbuyer.env") == 0o600
    assert load_settings(data_dir, environ={}).tls
    leaf = x509.load_pem_x509_certificate(files[1].read_bytes())
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert sans.get_values_for_type(x509.DNSName) == ["phones.lan"]
    assert b"PRIVATE KEY" not in files[1].read_bytes() and b"PRIVATE KEY" not in ca.read_bytes()
    server_context(files[1], files[2])  # loads

    # a renewal: the same CA (phone hosts keep their ca.pem), a new server key
    first_ca, first_key = ca.read_bytes(), files[2].read_bytes()
    assert cli_main(["--data-dir", str(data_dir), "tls", "init", "--host", "127.0.0.1"]) == 0
    assert ca.read_bytes() == first_ca and files[2].read_bytes() != first_key
    assert "CA 沿用原有的" in capsys.readouterr().out


@pytest.mark.parametrize("host", ["", "bad host", "-x.lan", "a" * 300])
def test_tls_init_refuses_bad_hosts(data_dir: Path, host: str) -> None:
    assert cli_main(["--data-dir", str(data_dir), "tls", "init", f"--host={host}"]) == 2
    assert not (data_dir / "tls-ca").exists()


def test_tls_init_needs_an_initialised_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["--data-dir", str(tmp_path / "none"), "tls", "init", "--host", "127.0.0.1"]) == 3
    assert "cmbuyer-server init" in capsys.readouterr().err


def test_unusable_tls_files_are_one_line_tls_errors(tmp_path: Path) -> None:
    ca = trustme.CA()
    one, other = ca.issue_cert("127.0.0.1"), ca.issue_cert("127.0.0.1")
    cert, key, other_key, junk = (tmp_path / n for n in ("c.pem", "k.pem", "k2.pem", "junk.pem"))
    one.cert_chain_pems[0].write_to_path(str(cert))
    one.private_key_pem.write_to_path(str(key))
    other.private_key_pem.write_to_path(str(other_key))
    junk.write_text("not a certificate\n")
    server_context(cert, key)
    cases = [
        (tmp_path / "missing.pem", key, "cannot be read"),
        (cert, other_key, "does not belong"),
        (junk, key, "not a PEM"),
        (cert, junk, "not a PEM"),
    ]
    for c, k, words in cases:
        with pytest.raises(TlsError) as caught:
            server_context(c, k)
        assert "TLS" in str(caught.value) and words in str(caught.value) and "\n" not in str(caught.value)


@pytest.fixture(autouse=True)
def _serve_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """``serve`` run in-process writes its flags into ``os.environ``: give each test its own."""
    for key in ("CMBUYER_HOST", "CMBUYER_PORT", "CMBUYER_TLS_CERT", "CMBUYER_TLS_KEY"):
        monkeypatch.setenv(key, "")  # recorded, so whatever serve writes is undone after the test
        monkeypatch.delenv(key)


def test_cert_without_key_is_a_settings_error(data_dir: Path) -> None:
    assert cli_main(["--data-dir", str(data_dir), "serve", "--tls-cert", str(data_dir / "x.pem")]) == 3


@pytest.mark.parametrize(
    ("args", "env", "code"),
    [
        (["--host", "0.0.0.0"], {}, 3),
        (["--host", "10.0.0.8"], {}, 3),
        (["--host", "10.0.0.8", "--behind-proxy"], {}, 3),  # no trusted proxy named
        (["--host", "0.0.0.0", "--behind-proxy"], {"CMBUYER_TRUSTED_PROXIES": "10.0.0.5"}, 3),
    ],
)
def test_serve_refuses_to_bind_beyond_loopback_without_tls(
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    env: dict[str, str],
    code: int,
) -> None:
    for key in [k for k in os.environ if k.startswith("CMBUYER_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert cli_main(["--data-dir", str(data_dir), "serve", *args]) == code
    assert "拒绝启动" in capsys.readouterr().err


def test_serve_over_https(data_dir: Path) -> None:
    assert cli_main(["--data-dir", str(data_dir), "tls", "init", "--host", "127.0.0.1"]) == 0
    ca = data_dir / "tls" / "ca.pem"
    server = LiveServer(data_dir, env={}, ca=ca)
    port, log, base = server.port, server.log, server.url
    try:
        server.start(timeout=30)
        context = ssl.create_default_context(cafile=str(ca))
        with urllib.request.urlopen(f"{base}/login", timeout=5, context=context) as resp:
            cookies = resp.headers.get_all("Set-Cookie")
        assert cookies and all("Secure" in c for c in cookies)
        raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        with pytest.raises(ssl.SSLCertVerificationError), raw:  # not trusted without the private CA
            ssl.create_default_context().wrap_socket(raw, server_hostname="127.0.0.1").close()
        with pytest.raises(OSError):  # plain HTTP to the TLS port gets no HTTP answer
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
        assert "正在服务 https://" in log.read_text()
    finally:
        server.stop()
