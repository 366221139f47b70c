"""Domain errors. Each carries a stable machine ``code`` (documented in docs/api.md); messages never
contain tokens, SQL, paths or other tasks' data."""

from __future__ import annotations


class DomainError(Exception):
    """A request breaks a business rule. ``code`` is the wire error code (e.g. ``version_conflict``),
    ``status`` the HTTP status the edge should use, ``message`` a short Chinese/English text for people."""

    code = "invalid_request"
    status = 400

    def __init__(self, message: str = "", *, code: str | None = None, status: int | None = None) -> None:
        super().__init__(message or self.code)
        self.message = message or self.code
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status


class ValidationFailed(DomainError):
    """Input is malformed or out of range (400 ``invalid_request``); ``field`` names the input."""

    code = "invalid_request"
    status = 400

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class InvalidTransition(DomainError):
    """The aggregate is not in a state that allows this use-case (409)."""

    code = "invalid_state"
    status = 409


class Conflict(DomainError):
    """Version, idempotency or fence conflict (409) — the code says which."""

    code = "conflict"
    status = 409


class NotFound(DomainError):
    """The subject does not exist (or is not visible to this actor) (404)."""

    code = "not_found"
    status = 404
