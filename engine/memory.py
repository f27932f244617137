"""Handing freed memory back to the operating system between pipeline stages."""

from __future__ import annotations

import ctypes
import gc

try:
    _malloc_trim = ctypes.CDLL(None).malloc_trim   # glibc
except (OSError, AttributeError):
    _malloc_trim = None


def release_free_memory() -> None:
    """Return the heap's free pages to the kernel.

    A stage that is done (the text encoders, say) leaves tens of MB of freed but still
    resident heap behind: glibc keeps it for reuse, and the next stage's peak then
    stacks on top of it. On a 512 MB Pi that is the difference between fitting and not.
    """
    gc.collect()
    if _malloc_trim is not None:
        _malloc_trim(0)
