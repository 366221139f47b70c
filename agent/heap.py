"""Keep an agent's resident memory near what it uses (docs/performance.md "Agent memory").

An agent decodes a 1080 × 2400 screenshot (7.8 MB of pixels) several times per order, on two threads
(the flow's and the outbox's). glibc's malloc serves a block that large with ``mmap`` and returns it on
``free`` — until the first such free, after which it raises its mmap threshold to that size, serves the
next ones from the thread's heap arena and keeps the freed pages: measured on the fleet bench, peak RSS
93–124 MB against 75 MB with a fixed threshold, and 60–65 MB resident after the orders against 54 MB.
Fixing the threshold (``mallopt(M_MMAP_THRESHOLD, …)``, the same as the ``MALLOC_MMAP_THRESHOLD_``
environment variable) keeps every block above it mmapped, so its pages go back to the system when freed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc <malloc.h>
MMAP_THRESHOLD_BYTES = 1024 * 1024  # well above Python's small objects, far below an image's rows


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes for this process; False (and nothing changed)
    where the C library is not glibc or refuses the value. Safe to call more than once."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, threshold))
    if not done:
        log.debug("mallopt refused the mmap threshold")
    return done
