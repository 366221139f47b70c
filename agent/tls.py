"""How the agent reaches the server: ``https://`` with certificate verification always on, ``http://``
only for a server on this machine (docs/api.md: no plain HTTP off loopback).

:func:`check_server_url` is the URL rule, :func:`client_context` the one way a TLS context is built (the
system's CAs, or only ``--server-ca FILE`` / ``CMBUYER_SERVER_CA`` — a team's private CA from
``cmbuyer-server tls init``). There is no switch that turns verification off, and a failed verification
is :class:`ServerTlsError`: final, never retried and never answered by falling back to ``http://``.
:func:`certificate_report` is what ``cmbuyer-agent doctor`` shows about the server's certificate.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import urllib.parse
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cmbuyer.agent.errors import ServerError

EXPIRY_WARN_DAYS = 14


class ServerTlsError(ServerError):
    """The server's certificate could not be verified, or the URL/CA file is not usable. Final."""

    def __init__(self, summary: str) -> None:
        super().__init__(summary, final=True)


def _host(url: str) -> str:
    return (urllib.parse.urlsplit(url).hostname or "").lower()


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_server_url(url: str, server_ca: Path | None = None) -> None:
    """Raise :class:`ServerTlsError` unless ``url`` is ``https://…``, or ``http://`` to a loopback server.

    ``server_ca`` with an ``http://`` URL is refused too: a CA file says the operator expects TLS."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServerTlsError("server URL must be https://HOST[:PORT] (http:// only for this machine)")
    if parts.scheme == "http":
        if server_ca is not None:
            raise ServerTlsError("--server-ca is given but the server URL is http://; use https://")
        if not is_loopback(parts.hostname):
            raise ServerTlsError(
                f"refusing plain HTTP to {parts.hostname}: use https:// (only a loopback server may be http://)"
            )


def client_context(server_ca: Path | None) -> ssl.SSLContext:
    """A verifying client context: the system's CAs, or only ``server_ca`` when given. TLS 1.2+, host name
    checked. Raises :class:`ServerTlsError` when the CA file cannot be read or holds no certificate."""
    if server_ca is None:
        context = ssl.create_default_context()
    else:
        try:
            context = ssl.create_default_context(cafile=str(server_ca))
        except (OSError, ssl.SSLError) as exc:
            raise ServerTlsError(f"TLS: --server-ca {server_ca} is not a readable PEM CA file ({exc})") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def verification_failure(exc: BaseException) -> ServerTlsError | None:
    """The :class:`ServerTlsError` for a transport error that is a TLS failure (``urllib`` wraps it in
    ``URLError.reason``), else None (an ordinary network error, retried by the caller)."""
    # urllib wraps it in URLError.reason; an SSLError's own .reason is a text, so test exc itself first
    reason = exc if isinstance(exc, ssl.SSLError) else getattr(exc, "reason", exc)
    if isinstance(reason, ssl.SSLCertVerificationError):
        return ServerTlsError(
            f"TLS: the server's certificate is not trusted ({reason.verify_message}); "
            "give the team's CA with --server-ca FILE (CMBUYER_SERVER_CA)"
        )
    if isinstance(reason, ssl.SSLError):
        return ServerTlsError(f"TLS handshake with the server failed ({reason.reason or type(reason).__name__})")
    return None


@dataclass(frozen=True)
class CertificateReport:
    """The server certificate as ``doctor`` shows it: ``verified`` (against the configured CAs, with the
    host name), ``subject`` (its common name), ``not_after`` (UTC), ``days_left`` and ``error``."""

    verified: bool
    subject: str
    not_after: datetime | None
    days_left: int | None
    error: str = ""

    @property
    def expiring(self) -> bool:
        """True when fewer than :data:`EXPIRY_WARN_DAYS` days are left."""
        return self.days_left is not None and self.days_left < EXPIRY_WARN_DAYS


def certificate_report(url: str, server_ca: Path | None, *, timeout: float = 5.0) -> CertificateReport:
    """Connect to ``url``'s host and describe its certificate; sends no request and no token.

    A certificate that does not verify is fetched once more without verification, only to show whose it
    is. Raises :class:`ServerTlsError` for an ``http://`` URL (nothing to report) or an unusable CA file;
    ``OSError`` when the server cannot be reached."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise ServerTlsError("no certificate: the server URL is not https://")
    host, port = parts.hostname, parts.port or 443
    verified, error = True, ""
    try:
        der = _peer_der(host, port, client_context(server_ca), timeout)
    except ssl.SSLCertVerificationError as exc:
        verified, error = False, exc.verify_message or "not verified"
        blind = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        blind.check_hostname = False
        blind.verify_mode = ssl.CERT_NONE  # report only: nothing is sent over this connection
        der = _peer_der(host, port, blind, timeout)
    cert = x509.load_der_x509_certificate(der)
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    subject = str(names[0].value) if names else cert.subject.rfc4514_string()
    not_after = cert.not_valid_after_utc
    days_left = (not_after - datetime.now(UTC)).days
    return CertificateReport(verified, subject, not_after, days_left, error)


def _peer_der(host: str, port: int, context: ssl.SSLContext, timeout: float) -> bytes:
    with (
        socket.create_connection((host, port), timeout=timeout) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    if der is None:
        raise ssl.SSLError("the server sent no certificate")
    return der


def verify_server(url: str, server_ca: Path | None, *, timeout: float = 5.0) -> None:
    """Before an agent starts: a TLS handshake with an ``https://`` server (nothing is sent). Raises
    :class:`ServerTlsError` when its certificate does not verify; a server that cannot be reached right
    now is left to the runner's retries (``OSError`` is swallowed). ``http://`` URLs are not contacted."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        return
    context = client_context(server_ca)
    try:
        _peer_der(parts.hostname, parts.port or 443, context, timeout)
    except ssl.SSLError as exc:
        failure = verification_failure(exc)
        raise failure if failure is not None else ServerTlsError("TLS handshake with the server failed") from None
    except OSError:
        return
