"""Benchmarks time the engine's C kernels, never a silent numpy fallback.

A checkout whose cffi module was never built (a fresh clone, an install for another
Python) runs every kernel in numpy: the engine still works, 1.5-2x slower, and every
figure a benchmark prints would describe the fallback. `require_c_kernels` stops such a
run with the fix, unless SLOWFRAME_KERNELS=numpy asks for the fallback on purpose.
"""

from __future__ import annotations

import sys


def require_c_kernels() -> str:
    """The kernel backend in use ("c", or "numpy" when asked for); exits when the C
    kernels are missing and nobody asked for numpy."""
    from engine import kernels

    if kernels.fallback_warning() is None:
        return kernels.BACKEND
    sys.exit(f"the engine's C kernels are not built for this Python, so every kernel would run its numpy fallback "
             f"and the figures would not describe the engine. To fix, {kernels.BUILD_HINT}; or set "
             f"SLOWFRAME_KERNELS=numpy to time the fallback on purpose.")
