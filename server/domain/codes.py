"""The error catalogue: every machine error code the server answers, its HTTP status and who hears it.

A code is a stable word a client may key on (the agent does: ``agent/errors.py``), so each one is named
once, here, as a :class:`Code` member. The device API answers ``{"error": code}``
(``shared/schemas/device_error.response.json``), the admin web ``{"error": {"code": …}}``
(``shared/schemas/admin_error.response.json``); both schemas list their codes in an ``enum`` that
``tests/server/domain/test_error_catalogue.py`` proves equal to :data:`DEVICE_CODES` and
:data:`ADMIN_CODES`. What each code means for the caller is documented in docs/api.md (device API) and
docs/admin.md (admin web).

To refuse with a code, build the refusal through :func:`cmbuyer.server.domain.errors.refusal` (or the
exception class that already names it); the status always comes from :data:`STATUS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Flag, StrEnum, auto
from types import MappingProxyType
from typing import Final


class Code(StrEnum):
    """A wire error code. A ``StrEnum``: ``Code.NOT_FOUND == "not_found"`` and it encodes as that string."""

    # -- device API and admin web ----------------------------------------------------------------------
    INVALID_REQUEST = "invalid_request"
    REQUEST_TOO_LARGE = "request_too_large"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    NOT_FOUND = "not_found"
    NOT_ACCEPTABLE = "not_acceptable"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    VERSION_CONFLICT = "version_conflict"
    SUBMISSION_FENCED = "submission_fenced"
    INVALID_STATE = "invalid_state"
    NOT_SUPERVISED = "not_supervised"
    # -- device API only --------------------------------------------------------------------------------
    METHOD_NOT_ALLOWED = "method_not_allowed"
    CLAIM_REQUIRES_MANUAL = "claim_requires_manual"
    CLAIM_NOT_CURRENT = "claim_not_current"
    APP_VERSION_NOT_ALLOWED = "app_version_not_allowed"
    FENCE_REFUSED = "fence_refused"
    RESULT_CONFLICT = "result_conflict"
    EVIDENCE_CONFLICT = "evidence_conflict"
    ATTEMPT_LIMIT_REACHED = "attempt_limit_reached"
    UNSUPPORTED_IMAGE = "unsupported_image"
    APPROVAL_REQUIRED = "approval_required"
    APPROVAL_SCREENSHOT_INVALID = "approval_screenshot_invalid"
    # -- admin web only ---------------------------------------------------------------------------------
    INVALID_VIEW = "invalid_view"
    UNAUTHENTICATED = "unauthenticated"
    LOGIN_FAILED = "login_failed"
    CSRF_FAILED = "csrf_failed"
    CROSS_SITE_REQUEST = "cross_site_request"
    LOGIN_THROTTLED = "login_throttled"
    APPROVAL_NOT_WAITING = "approval_not_waiting"
    ATTEMPT_CLOSED = "attempt_closed"
    READINGS_UNREADABLE = "readings_unreadable"
    VERDICT_EXISTS = "verdict_exists"
    STORAGE_UNAVAILABLE = "storage_unavailable"
    # -- command line only (``cmbuyer-server admin create`` prints ``<code>: <message>``) ----------------
    USERNAME_TAKEN = "username_taken"


class Audience(Flag):
    """Who can receive a code: the device API, the admin web, the server's command line."""

    DEVICE = auto()
    ADMIN = auto()
    CLI = auto()


_D, _A, _C = Audience.DEVICE, Audience.ADMIN, Audience.CLI

# (HTTP status, audience) of every code. The CLI hears every refusal a service raises (exit 1), so CLI is
# only spelled out for the code nobody else hears. A device-side storage failure is an empty 503 (no
# code); the admin web names it ``storage_unavailable``.
_CATALOGUE: Final[Mapping[Code, tuple[int, Audience]]] = {
    Code.INVALID_REQUEST: (400, _D | _A),
    Code.REQUEST_TOO_LARGE: (413, _D | _A),
    Code.UNSUPPORTED_MEDIA_TYPE: (415, _D | _A),
    Code.NOT_FOUND: (404, _D | _A),
    Code.NOT_ACCEPTABLE: (406, _D | _A),
    Code.IDEMPOTENCY_CONFLICT: (409, _D | _A),
    Code.VERSION_CONFLICT: (409, _D | _A),
    Code.SUBMISSION_FENCED: (409, _D | _A),
    Code.INVALID_STATE: (409, _D | _A),
    Code.NOT_SUPERVISED: (409, _D | _A),
    Code.METHOD_NOT_ALLOWED: (405, _D),
    Code.CLAIM_REQUIRES_MANUAL: (409, _D),
    Code.CLAIM_NOT_CURRENT: (409, _D),
    Code.APP_VERSION_NOT_ALLOWED: (409, _D),
    Code.FENCE_REFUSED: (409, _D),
    Code.RESULT_CONFLICT: (409, _D),
    Code.EVIDENCE_CONFLICT: (409, _D),
    Code.ATTEMPT_LIMIT_REACHED: (409, _D),
    Code.UNSUPPORTED_IMAGE: (400, _D),
    Code.APPROVAL_REQUIRED: (409, _D),
    Code.APPROVAL_SCREENSHOT_INVALID: (422, _D),
    Code.INVALID_VIEW: (400, _A),
    Code.UNAUTHENTICATED: (401, _A),
    Code.LOGIN_FAILED: (401, _A),
    Code.CSRF_FAILED: (403, _A),
    Code.CROSS_SITE_REQUEST: (403, _A),
    Code.LOGIN_THROTTLED: (429, _A),
    Code.APPROVAL_NOT_WAITING: (409, _A),
    Code.ATTEMPT_CLOSED: (409, _A),
    Code.READINGS_UNREADABLE: (409, _A),
    Code.VERDICT_EXISTS: (409, _A),
    Code.STORAGE_UNAVAILABLE: (503, _A),
    Code.USERNAME_TAKEN: (409, _C),
}
if set(_CATALOGUE) != set(Code):  # a new member without its row would have no status: fail at import
    raise AssertionError(f"codes without a catalogue row: {sorted(set(Code) - set(_CATALOGUE))}")

#: The HTTP status that goes with each code (a code never travels with another status).
STATUS: Final[Mapping[Code, int]] = MappingProxyType({code: status for code, (status, _) in _CATALOGUE.items()})
#: The codes of ``device_error.response.json`` (device API bodies ``{"error": code}``).
DEVICE_CODES: Final[frozenset[Code]] = frozenset(c for c, (_, who) in _CATALOGUE.items() if _D in who)
#: The codes of ``admin_error.response.json`` (admin web JSON bodies and error pages).
ADMIN_CODES: Final[frozenset[Code]] = frozenset(c for c, (_, who) in _CATALOGUE.items() if _A in who)
#: The codes whose refusal tells the caller that trying again later may succeed (``"retryable": true`` in the
#: admin error body): the storage failed for now, or the login throttle will reopen.
RETRYABLE: Final[frozenset[Code]] = frozenset({Code.STORAGE_UNAVAILABLE, Code.LOGIN_THROTTLED})
