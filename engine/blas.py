"""Direct access to the OpenBLAS that numpy loaded: its thread count, and sgemm.

A model runs its BLAS calls on the threads its options allow (`threads`, which
calls OpenBLAS's set_num_threads for the length of an evaluation, as threadpoolctl
does). Attention is many small GEMMs (head dim 64); they scale badly inside one BLAS
call but well when whole heads run on separate Python threads (BLAS, numpy and our C
kernels release the GIL). For that, BLAS must not spawn its own threads at the same
time: `single_threaded`.

`follow_thread_timeout` makes OpenBLAS's idle threads sleep as OPENBLAS_THREAD_TIMEOUT
says even when numpy (and so OpenBLAS) loaded before `engine` set it (engine/__init__.py).

`gemm` is cblas_sgemm with beta, which numpy's matmul lacks: a 3x3 convolution
accumulates nine GEMMs into one output (ops.conv2d) instead of copying a 9x larger
patch matrix. Where no OpenBLAS is found, callers use their numpy path.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import threading
from collections.abc import Iterator

import numpy as np

_NAMES = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads64_",
          "openblas_set_num_threads")
_GET_NAMES = tuple(n.replace("set_", "get_") for n in _NAMES)
# cblas_sgemm under the names numpy's wheels (ILP64, 64-bit ints) and distributions use
_SGEMM_NAMES = (("scipy_cblas_sgemm64_", ctypes.c_int64), ("cblas_sgemm64_", ctypes.c_int64),
                ("scipy_cblas_sgemm", ctypes.c_int), ("cblas_sgemm", ctypes.c_int))
# Not API, but exported (checked in numpy's scipy-openblas 0.3.31 and Debian's libopenblas0-pthread
# 0.3.21): the timeout read from the environment at load, that reading, and the stop of its threads.
_TIMEOUT_NAMES = ("openblas_thread_timeout", "openblas_read_env", "blas_thread_shutdown_")
_ROW_MAJOR, _NO_TRANS = 101, 111
_lock = threading.RLock()   # re-entered by single_threaded inside a model's threads()


def _libraries() -> list[ctypes.CDLL]:
    import numpy  # noqa: F401  (make sure its BLAS is loaded)

    try:
        maps = open("/proc/self/maps").read()
    except OSError:
        return []
    libs = []
    for path in sorted(set(re.findall(r"(/\S*openblas\S*\.so\S*)", maps))):
        try:
            libs.append(ctypes.CDLL(path))
        except OSError:
            continue
    return libs


def _find_control(libs: list[ctypes.CDLL]) -> tuple | None:
    for lib in libs:
        for set_name, get_name in zip(_NAMES, _GET_NAMES):
            if hasattr(lib, set_name) and hasattr(lib, get_name):
                setter, getter = getattr(lib, set_name), getattr(lib, get_name)
                setter.argtypes, setter.restype = [ctypes.c_int], None
                getter.argtypes, getter.restype = [], ctypes.c_int
                return setter, getter
    return None


def _find_sgemm(libs: list[ctypes.CDLL]):
    for lib in libs:
        for name, integer in _SGEMM_NAMES:
            if hasattr(lib, name):
                f = getattr(lib, name)
                f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, integer, integer, integer, ctypes.c_float,
                              ctypes.c_void_p, integer, ctypes.c_void_p, integer, ctypes.c_float, ctypes.c_void_p,
                              integer]
                f.restype = None
                return f
    return None


_LIBS = _libraries()
_CONTROL = _find_control(_LIBS)
_SGEMM = _find_sgemm(_LIBS)
AVAILABLE = _CONTROL is not None
HAS_GEMM = _SGEMM is not None


def follow_thread_timeout() -> bool:
    """Make OpenBLAS's idle threads use OPENBLAS_THREAD_TIMEOUT as the environment has it now.

    OpenBLAS reads its environment once, when it loads, and its threads take the timeout
    when they start: after `import numpy; import engine` they would spin 2^28 cycles after
    each threaded GEMM (bench/RESULTS.md#threads). This makes OpenBLAS read the environment
    again and stops its idle threads; its next threaded call starts them anew, with the
    timeout. Returns False where the OpenBLAS in use lacks those entry points. Call it
    while no other thread is inside BLAS."""
    wanted = os.environ.get("OPENBLAS_THREAD_TIMEOUT", "")
    for lib in _LIBS:
        if all(hasattr(lib, name) for name in _TIMEOUT_NAMES):
            read, reread, stop = (getattr(lib, name) for name in _TIMEOUT_NAMES)
            read.argtypes, read.restype = [], ctypes.c_int
            if wanted.strip().isdigit() and read() != int(wanted):
                with _lock:
                    reread()
                    stop()
            return True
    return False


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, beta: float) -> None:
    """c = a @ b + beta * c for float32 2-D arrays, in place, through cblas_sgemm.

    Each operand needs unit column stride; its row stride may be anything at least its
    width, so `b` can be a strided view into a larger buffer. Requires HAS_GEMM.
    """
    m, k = a.shape
    n = b.shape[1]
    if b.shape[0] != k or c.shape != (m, n):
        raise ValueError(f"gemm shapes {a.shape} @ {b.shape} -> {c.shape}")
    for x in (a, b, c):
        if x.dtype != np.float32 or (x.shape[1] > 1 and x.strides[1] != 4) or x.strides[0] % 4 \
                or x.strides[0] // 4 < x.shape[1]:
            raise ValueError("gemm operands must be float32 with unit column stride")
    if not c.flags.writeable:
        raise ValueError("gemm output is read-only")
    _SGEMM(_ROW_MAJOR, _NO_TRANS, _NO_TRANS, m, n, k, 1.0, a.ctypes.data, a.strides[0] // 4, b.ctypes.data,
           b.strides[0] // 4, beta, c.ctypes.data, c.strides[0] // 4)


def thread_count() -> int | None:
    """The threads OpenBLAS uses for a call now (None where it is not reachable)."""
    return None if _CONTROL is None else _CONTROL[1]()


@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
    """BLAS calls use `n` threads until the block ends, then what they used before."""
    if _CONTROL is None:
        yield
        return
    setter, getter = _CONTROL
    with _lock:
        before = getter()
        setter(n)
        try:
            yield
        finally:
            setter(before)


def single_threaded() -> contextlib.AbstractContextManager[None]:
    """BLAS runs on the calling thread only, until the block ends."""
    return threads(1)
