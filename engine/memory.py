"""Where freed memory goes: back to the operating system between pipeline stages on a
Pi, kept in the process for reuse on a PC."""

from __future__ import annotations

import ctypes
import gc

try:
    _libc = ctypes.CDLL(None)
    _malloc_trim = _libc.malloc_trim   # glibc
    _mallopt = _libc.mallopt
except (OSError, AttributeError):
    _malloc_trim = _mallopt = None

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_DEFAULT_TRIM_THRESHOLD = 128 * 1024
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4


def release_free_memory() -> None:
    """Return the heap's free pages to the kernel.

    A stage that is done (the text encoders, say) leaves tens of MB of freed but still
    resident heap behind: glibc keeps it for reuse, and the next stage's peak then
    stacks on top of it. On a 512 MB Pi that is the difference between fitting and not.
    """
    gc.collect()
    if _malloc_trim is not None:
        _malloc_trim(0)


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory in the process for the next allocation to reuse.

    By default glibc gives every array over 32 MB (and, after a free, smaller ones too)
    its own mmap and unmaps it on free, so each op's fp32 weights (~10 GB per SDXL UNet
    evaluation) arrive in fresh pages the kernel must fault in and zero (seconds of system
    time an evaluation: bench/RESULTS.md#heap-retention). Serving everything from the
    heap and never trimming it removes that; the process keeps its high-water mark,
    which a PC can afford and a Pi cannot. Process-wide and sticky. False where the C
    library is not glibc.
    """
    if _mallopt is None:
        return False
    return bool(_mallopt(_M_MMAP_MAX, 0)) and bool(_mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def return_freed_arrays(threshold: int) -> bool:
    """Give every allocation of at least `threshold` bytes its own mapping, unmapped the
    moment it is freed.

    glibc's threshold starts at 128 KB but rises to the size of each big block freed (up
    to 32 MB), so after the first few ops nearly every array comes from the heap, whose
    free pieces stay resident: in an SDXL UNet evaluation as much freed heap as heap in
    use (bench/RESULTS.md#heap-retention). A fixed threshold (which also stops the rise)
    keeps the resident set close to what is live, for some page faults per op.
    Process-wide and sticky. False where the C library is not glibc.
    """
    if _mallopt is None:
        return False
    return bool(_mallopt(_M_MMAP_THRESHOLD, threshold))


def retain_freed(nbytes: int) -> bool:
    """Keep up to `nbytes` of freed heap at its top for the next allocations (glibc's
    trim threshold) instead of returning it to the system at once; 0 restores glibc's
    128 KB and returns every free heap page now.

    With the heap trimmed at 128 KB, every op's weights land in pages the kernel must
    fault in and zero again (measured: bench/RESULTS.md#heap-retention). Process-wide
    until called again. False where the C library is not glibc.
    """
    if _mallopt is None:
        return False
    ok = bool(_mallopt(_M_TRIM_THRESHOLD, nbytes or _DEFAULT_TRIM_THRESHOLD))
    if not nbytes:
        _malloc_trim(0)
    return ok
