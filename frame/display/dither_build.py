"""cffi builder for frame.display._cdither: the error-diffusion loop (dither.c) behind
frame.display.dither, whose pure-Python twin gives the same indices, so the compiled
module is only a speed-up and may be missing.

setup.py runs it (``cffi_modules``); rebuild in place with ``python3 setup.py build_ext
--inplace``. It shares the engine kernels' compiler flags (engine/kernels/cbuild.py).
"""

import os
import runpy

FOLDER = os.path.dirname(__file__)
CBUILD = os.path.join(FOLDER, os.pardir, os.pardir, "engine", "kernels", "cbuild.py")

ffibuilder = runpy.run_path(CBUILD)["ffibuilder"]("frame.display._cdither", FOLDER, "dither.h", ("dither.c",))
