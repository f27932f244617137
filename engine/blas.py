"""Temporarily make numpy's OpenBLAS single-threaded.

Attention is many small GEMMs (head dim 64); they scale badly inside one BLAS call
but well when whole heads run on separate Python threads (BLAS, numpy and our C
kernels release the GIL). For that, BLAS must not spawn its own threads at the same
time. We find the OpenBLAS that numpy loaded and call its set_num_threads, as
threadpoolctl does; where there is none, callers simply run serially.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import threading
from collections.abc import Iterator

_NAMES = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads64_",
          "openblas_set_num_threads")
_GET_NAMES = tuple(n.replace("set_", "get_") for n in _NAMES)
_lock = threading.Lock()


def _find() -> tuple | None:
    import numpy  # noqa: F401  (make sure its BLAS is loaded)

    try:
        maps = open("/proc/self/maps").read()
    except OSError:
        return None
    for path in sorted(set(re.findall(r"(/\S*openblas\S*\.so\S*)", maps))):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for set_name, get_name in zip(_NAMES, _GET_NAMES):
            if hasattr(lib, set_name) and hasattr(lib, get_name):
                setter, getter = getattr(lib, set_name), getattr(lib, get_name)
                setter.argtypes, setter.restype = [ctypes.c_int], None
                getter.argtypes, getter.restype = [], ctypes.c_int
                return setter, getter
    return None


_CONTROL = _find()
AVAILABLE = _CONTROL is not None


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """BLAS runs on the calling thread only, until the block ends."""
    if _CONTROL is None:
        yield
        return
    setter, getter = _CONTROL
    with _lock:
        before = getter()
        setter(1)
        try:
            yield
        finally:
            setter(before)
