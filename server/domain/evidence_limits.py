"""The evidence limits: one object for every check of an upload's size (docs/api.md "Evidence").

The protocol fixes the largest screenshot (``SPEC_*`` below; docs/api.md "POST /api/v1/tasks/{id}/evidence"); a server
may configure
tighter limits, never looser (``CMBUYER_EVIDENCE_MAX_*``, server/config.py). :class:`EvidenceLimits` is
built once from the settings (``Settings.evidence_limits``) and read by the three places that enforce
it: the application's request cap (``client_max_size``, server/app.py), the multipart reader's caps
(server/web/multipart.py ``Limits.for_evidence``) and the PNG checks (server/evidence/png.py
``validate_evidence``). Pure values, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

SPEC_EVIDENCE_MAX_BYTES = 10 * 1024 * 1024
SPEC_EVIDENCE_MAX_SIDE = 8192
SPEC_EVIDENCE_MAX_PIXELS = 16_777_216
# What an evidence request carries beside the file, in bytes: the boundaries, each part's headers (at
# most 1 KiB each, multipart.Limits.max_header_bytes) and the six metadata values (at most 256 bytes each,
# multipart.Limits.max_field_bytes) fit well inside it. docs/api.md: a declared Content-Length over the
# file limit + 16 KiB is refused with 413 before any body byte is read.
MULTIPART_OVERHEAD = 16 * 1024


@dataclass(frozen=True)
class EvidenceLimits:
    """Limits of one evidence upload: ``max_bytes`` (the PNG file, bytes), ``max_side`` (width and
    height, pixels) and ``max_pixels`` (width × height). Each is at most its ``SPEC_*`` value."""

    max_bytes: int = SPEC_EVIDENCE_MAX_BYTES
    max_side: int = SPEC_EVIDENCE_MAX_SIDE
    max_pixels: int = SPEC_EVIDENCE_MAX_PIXELS

    @property
    def request_cap(self) -> int:
        """The largest evidence request body in bytes: the file plus :data:`MULTIPART_OVERHEAD`. No
        request body of any route may be larger (the application's ``client_max_size``)."""
        return self.max_bytes + MULTIPART_OVERHEAD
