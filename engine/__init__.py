"""slowframe's streaming inference engine: SDXL on a few hundred MB of RAM."""

import os
import sys

# After each threaded GEMM OpenBLAS's idle threads otherwise spin for 2^28 cycles
# (~0.1 s) and take a core from the engine's own workers (attention heads, elementwise
# ops) that run next. 2^4 cycles makes them sleep at once; waking them costs
# microseconds. Chosen by measurement: bench/RESULTS.md#threads. OpenBLAS reads it when
# numpy loads it; if that was before this line, its threads are restarted to take it.
OPENBLAS_THREAD_TIMEOUT = "4"
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", OPENBLAS_THREAD_TIMEOUT)
if "numpy" in sys.modules:
    from engine.blas import follow_thread_timeout

    follow_thread_timeout()

from engine.errors import EngineError, InputError, ModelFileError  # noqa: E402

__version__ = "0.1.0"

__all__ = ["EngineError", "InputError", "ModelFileError", "__version__"]
