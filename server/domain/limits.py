"""Per-attempt storage budgets: how much one claim may write through the device API.

A device with a valid claim could otherwise append events or upload 10 MiB screenshots until its lease
or the authorization ends, filling the events table or the evidence disk. A real flow needs a few dozen
events and about five screenshots (docs/state-machines.md: three gates, the post-submit observation, a failure), so
the defaults (``Settings``: 1,000 events, 32 files, 128 MiB) never bind an honest agent. Pure rules, no
I/O: the services count what the attempt already holds and ask here.
"""

from __future__ import annotations

from dataclasses import dataclass

from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import Conflict


@dataclass(frozen=True)
class AttemptBudget:
    """Caps for one attempt: ``events`` (rows), ``evidence_files`` (assets), ``evidence_bytes`` (bytes)."""

    events: int
    evidence_files: int
    evidence_bytes: int

    def events_fit(self, held: int, adding: int) -> bool:
        """True when ``adding`` more events keep the attempt at or under its cap (``held`` already stored)."""
        return held + adding <= self.events

    def evidence_fits(self, files_held: int, bytes_held: int, adding_bytes: int) -> bool:
        """True when one more file of ``adding_bytes`` keeps both the file count and the byte total within
        the caps."""
        return files_held + 1 <= self.evidence_files and bytes_held + adding_bytes <= self.evidence_bytes


def attempt_limit_reached() -> Conflict:
    """The fixed 409 when a write would take an attempt past its budget (docs/api.md)."""
    return Conflict("the attempt has used its budget of events or evidence", code=Code.ATTEMPT_LIMIT_REACHED)
