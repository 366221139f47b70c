"""The server's exceptions, under one root (:class:`CmbuyerError`).

- :class:`DomainError` and its kinds: a request breaks a business rule; it carries a catalogue
  :class:`~cmbuyer.server.domain.codes.Code` and that code's HTTP status (docs/api.md, docs/admin.md).
  Build one with :func:`refusal` (or the class that already names its code).
- :class:`Unavailable` (503, retry later): the server cannot answer now — storage failed
  (:class:`cmbuyer.server.db.StorageError`) or stored data contradicts a rule the code relies on
  (:class:`BrokenInvariant`). Never a 500, never a diagnostic on the wire.
- :class:`StartupRefused`: the server must not start; :class:`SettingsError`: a setting is missing or
  invalid. The command line turns each kind into its exit code (server/cli.py ``Exit``).

Messages never contain tokens, SQL, paths or other tasks' data.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Self

from cmbuyer.server.domain.codes import STATUS, Code


class CmbuyerError(Exception):
    """Root of every exception the server raises on purpose (anything else is a bug)."""


class DomainError(CmbuyerError):
    """A request breaks a business rule. ``code`` is the wire error code (a :class:`Code`, e.g.
    ``version_conflict``), ``status`` the HTTP status the edge uses (the catalogue's status of the code
    unless given), ``message`` a short Chinese/English text for people.

    Raises ValueError when ``code`` is not a catalogue code (a typo must not reach the wire)."""

    code: Code = Code.INVALID_REQUEST
    status: int = 400
    #: Which refusal of its code this is, and the facts that word it (:meth:`because`); "" and none when the
    #: message says it all.
    why: str = ""
    facts: Mapping[str, str] = MappingProxyType({})

    def __init__(self, message: str = "", *, code: Code | str | None = None, status: int | None = None) -> None:
        # without a message the text is the class's own code (as it always was), not ``code``
        super().__init__(message or str(self.code))
        self.message = message or str(self.code)
        if code is not None:
            self.code = Code(code)
        if status is not None:
            self.status = status
        elif code is not None:
            self.status = STATUS[self.code]

    def because(self, why: str, **facts: str) -> Self:
        """Name which refusal of its code this is (``why``, e.g. ``"decided"`` for an approval another person
        already decided) and the facts a person's sentence needs (raw codes and ids, never a wording): a
        service raises codes only, and the one table of sentences (``display/labels.py``
        ``REFUSAL_TEXTS``, through ``refusal_message``) words them. Returns ``self`` for ``raise``."""
        self.why = why
        self.facts = MappingProxyType(dict(facts))
        return self


class ValidationFailed(DomainError):
    """Input is malformed or out of range (400 ``invalid_request``); ``field`` names the input."""

    code = Code.INVALID_REQUEST
    status = 400

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class InvalidTransition(DomainError):
    """The aggregate is not in a state that allows this use-case (409 ``invalid_state``). ``use_case`` and
    ``state`` (when the raiser names them, as :func:`~cmbuyer.server.domain.states.transition` does) let the
    pages and the CLI word the refusal in Chinese (display/labels.py :func:`refusal_message`)."""

    code = Code.INVALID_STATE
    status = 409

    def __init__(
        self,
        message: str = "",
        *,
        code: Code | str | None = None,
        use_case: str | None = None,
        state: str | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.use_case = use_case
        self.state = state


class Conflict(DomainError):
    """Version, idempotency, fence … conflict (409) — the code says which; a Conflict always names it
    (``code=`` or a subclass's ``code``): there is no generic conflict code."""

    status = 409


class NotFound(DomainError):
    """The subject does not exist (or is not visible to this actor) (404 ``not_found``)."""

    code = Code.NOT_FOUND
    status = 404


def refusal(code: Code, message: str = "") -> DomainError:
    """The one constructor of a refusal with ``code``: the kind that goes with its status
    (404 → :class:`NotFound`, ``invalid_state`` → :class:`InvalidTransition`, other 409 → :class:`Conflict`,
    else :class:`DomainError`), carrying ``code``, its catalogue status and ``message`` (default: the code).

    E.g. ``raise refusal(Code.VERSION_CONFLICT, "task version changed")``."""
    status = STATUS[code]
    kind: type[DomainError]
    if code is Code.INVALID_STATE:
        kind = InvalidTransition
    elif status == 404:
        kind = NotFound
    elif status == 409:
        kind = Conflict
    else:
        kind = DomainError
    return kind(message or code, code=code)


class Unavailable(CmbuyerError):
    """The server cannot answer now (503; device API: empty body with ``Retry-After``; admin web:
    ``storage_unavailable``, retryable). The message is safe to log (no SQL, path or parameter)."""

    code: Code = Code.STORAGE_UNAVAILABLE
    status: int = 503


class BrokenInvariant(Unavailable):
    """Stored data contradicts a rule the code relies on — e.g. a row changed under the write lock, a
    stored claim response without its attempt, a claim the configured secret does not reproduce. Answered
    like a storage failure (503, nothing written: the job's transaction is rolled back), never with a
    guess; the message names the invariant."""


class StartupRefused(CmbuyerError):
    """The server must not start (schema, secret or recovery problem); the message is one line."""


class SettingsError(CmbuyerError, ValueError):
    """A setting is missing or invalid; ``str(err)`` is one line that names the variable."""
