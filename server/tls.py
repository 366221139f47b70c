"""TLS for ``serve`` and ``cmbuyer-server tls init``.

:func:`server_context` builds the listening side's :class:`ssl.SSLContext` (the standard library's
defaults, TLS 1.2 or newer) from the configured PEM files and turns every way they can be wrong into a
:class:`TlsError` whose one line says "TLS" and names the file. :func:`init_certificates` makes a small
team's private CA and a server certificate with ``cryptography`` (no openssl shell calls).

Files under the data dir (all written 0600, directories 0700):

- ``tls/ca.pem`` — the CA certificate: the one file phone hosts need (``cmbuyer-agent --server-ca``);
- ``tls/server.pem`` (certificate, then the CA certificate) and ``tls/server-key.pem`` — what ``serve``
  loads;
- ``tls-ca/ca-key.pem`` — the CA's private key, kept apart: ``serve`` never reads it; it is needed only to
  issue the next server certificate (``tls init`` again), so it may be moved offline between renewals.
"""

from __future__ import annotations

import ipaddress
import os
import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from cmbuyer.server.domain.errors import CmbuyerError

TLS_DIR = "tls"
CA_KEY_DIR = "tls-ca"
CA_CERT = "ca.pem"
SERVER_CERT = "server.pem"
SERVER_KEY = "server-key.pem"
CA_KEY = "ca-key.pem"
CA_DAYS = 3650
SERVER_DAYS = 397  # what public CAs may issue at most; `tls init` again renews with the same CA
_DNS_NAME = re.compile(
    r"(?=.{1,253}\Z)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*",
    re.ASCII,
)


class TlsError(CmbuyerError):
    """A TLS file is missing, unreadable, not PEM, or its key does not match; ``str`` is one line."""


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """The server-side context for ``cert`` (PEM chain) and ``key`` (PEM private key), TLS 1.2+.

    Raises :class:`TlsError` when a file cannot be read, is not a certificate/key, or the key is not the
    certificate's."""
    for what, path in (("certificate", cert), ("key", key)):
        try:
            with path.open("rb") as handle:
                handle.read(1)
        except OSError as exc:
            raise TlsError(f"TLS {what} file {path} cannot be read ({exc.strerror})") from None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc) or "key values mismatch" in str(exc):
            raise TlsError(f"TLS key {key} does not belong to the certificate {cert}") from None
        raise TlsError(f"TLS files {cert} / {key} are not a PEM certificate chain and its private key") from None
    return context


@dataclass(frozen=True)
class TlsFiles:
    """Paths :func:`init_certificates` wrote; ``ca_created`` is False when an existing CA signed."""

    ca_cert: Path
    server_cert: Path
    server_key: Path
    ca_key: Path
    ca_created: bool
    not_after: datetime


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` with mode 0600 (a new file next to it, then renamed: never half-written)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def parse_hosts(hosts: Sequence[str]) -> list[str]:
    """Check ``--host`` values (DNS names or IP addresses); raise :class:`TlsError` naming a bad one."""
    if not hosts:
        raise TlsError("TLS certificates need at least one --host (the name or address phone hosts connect to)")
    for host in hosts:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            if not _DNS_NAME.fullmatch(host):
                raise TlsError(f"--host {host!r} is neither an IP address nor a DNS name") from None
    return list(dict.fromkeys(hosts))


def init_certificates(data_dir: Path, hosts: Sequence[str], now: datetime) -> TlsFiles:
    """Create (or reuse) the private CA under ``data_dir`` and issue a server certificate for ``hosts``.

    An existing ``tls-ca/ca-key.pem`` with ``tls/ca.pem`` is reused, so a renewal keeps the ``ca.pem`` phone
    hosts already trust; otherwise a new CA is made. The server key is always new. Raises
    :class:`TlsError` for bad hosts or an unreadable existing CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    names = parse_hosts(hosts)
    tls_dir, ca_dir = data_dir / TLS_DIR, data_dir / CA_KEY_DIR
    for folder in (tls_dir, ca_dir):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
    files = TlsFiles(
        tls_dir / CA_CERT,
        tls_dir / SERVER_CERT,
        tls_dir / SERVER_KEY,
        ca_dir / CA_KEY,
        False,
        now + timedelta(SERVER_DAYS),
    )
    pem = serialization.Encoding.PEM
    private = serialization.PrivateFormat.PKCS8
    if files.ca_key.exists() and files.ca_cert.exists():
        try:
            ca_key = serialization.load_pem_private_key(files.ca_key.read_bytes(), password=None)
            ca_cert = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
        except (OSError, ValueError):
            raise TlsError(f"TLS CA files {files.ca_cert} / {files.ca_key} cannot be read") from None
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
            raise TlsError(f"TLS CA key {files.ca_key} is not the EC key `tls init` writes")
        created = False
    else:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"cmbuyer private CA ({names[0]})")])
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        _write_private(files.ca_key, ca_key.private_bytes(pem, private, serialization.NoEncryption()))
        _write_private(files.ca_cert, ca_cert.public_bytes(pem))
        created = True
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for name in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            sans.append(x509.DNSName(name))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(files.not_after)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write_private(files.server_key, key.private_bytes(pem, private, serialization.NoEncryption()))
    _write_private(files.server_cert, cert.public_bytes(pem) + ca_cert.public_bytes(pem))
    return TlsFiles(files.ca_cert, files.server_cert, files.server_key, files.ca_key, created, files.not_after)
