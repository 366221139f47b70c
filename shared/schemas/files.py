"""Reading a file nobody vouched for (packs, evidence, capture and session files) without trusting what it is.

``Path.read_bytes`` blocks forever on a FIFO (no writer) and reads ``/dev/zero`` until memory runs out;
a stat-then-read check can be raced (the path swapped for a FIFO in between). :func:`read_regular`
opens without blocking, checks the OPENED file is a regular file no larger than a limit, and reads at
most that many bytes (never a hang, never an unbounded read).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


class NotRegularFile(OSError):
    """The path is a FIFO, device, socket or directory (``strerror`` says so)."""


class FileTooLarge(OSError):
    """The regular file holds more than the caller's limit (``strerror`` names the limit)."""


def read_regular(path: str | Path, limit: int) -> bytes:
    """The bytes of the regular file ``path`` (symlinks followed), at most ``limit`` of them.

    Raises NotRegularFile, FileTooLarge (both OSError with a short ``strerror``) or the OSError of
    ``open``/``read`` (missing file, permission)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file", str(path))
        if st.st_size > limit:
            raise FileTooLarge(errno.EFBIG, f"larger than {limit} bytes", str(path))
        chunks: list[bytes] = []
        size = 0
        while size <= limit:  # the file may grow after fstat: count what is read, not what was stat'ed
            chunk = os.read(fd, min(1024 * 1024, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise FileTooLarge(errno.EFBIG, f"larger than {limit} bytes", str(path))
        return b"".join(chunks)
    finally:
        os.close(fd)
