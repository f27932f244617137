"""cffi builder for engine.kernels._ckernels: the C kernels behind engine.kernels.

setup.py runs it (``cffi_modules``); rebuild in place with ``python3 setup.py build_ext
--inplace``. The prototypes (and so the cdef) come from kernels.h. Every kernel has a
numpy twin (the elementwise ones give the same bits; the fused attention's is the BLAS
path in engine/ops.py), so the compiled module is only a speed-up and may be missing.
"""

import os
import runpy

FOLDER = os.path.dirname(__file__)
SOURCES = ("conversions.c", "activations.c", "norms.c", "winograd.c", "attention.c")

ffibuilder = runpy.run_path(os.path.join(FOLDER, "cbuild.py"))["ffibuilder"](
    "engine.kernels._ckernels", FOLDER, "kernels.h", SOURCES)
