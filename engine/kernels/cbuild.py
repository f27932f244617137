"""How slowframe's C modules are built: the compiler flags they share, and a cffi builder
made from a header of prototypes and the C files that define them.

The builders (engine/kernels/build.py, frame/display/dither_build.py) load this file by
path, because setup.py runs them before the packages can be imported; it needs nothing
but the standard library until a builder is made (then cffi). engine/kernels/backend.py
imports it to read the kernel list from the header.
"""

from __future__ import annotations

import glob
import os
import re
import sys
from typing import Any

# IEEE semantics, one rounding per operation (-ffp-contract=off), and no -march=native:
# the rules are in engine/kernels/common.h. Every module gets the same flags.
if sys.platform == "win32":
    COMPILE_ARGS = ["/O2", "/fp:precise"]
else:
    COMPILE_ARGS = ["-O3", "-ffp-contract=off"]


def prototypes(header_text: str) -> str:
    """A header's declarations as cffi's cdef takes them: comments and preprocessor lines removed."""
    text = re.sub(r"/\*.*?\*/", "", header_text, flags=re.S)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def functions(header_text: str) -> tuple[str, ...]:
    """The names of the functions a header declares, in its order."""
    return tuple(re.findall(r"\b(\w+)\s*\(", prototypes(header_text)))


def ffibuilder(module: str, folder: str, header: str, sources: tuple[str, ...]) -> Any:
    """A cffi builder for `module` from `header` (its cdef) and `sources`, file names in
    `folder`; every header of the folder is a dependency, so editing one rebuilds."""
    from cffi import FFI

    with open(os.path.join(folder, header), encoding="utf-8") as f:
        cdef = prototypes(f.read())
    ffi = FFI()
    ffi.cdef(cdef)
    ffi.set_source(module, f'#include "{header}"',
                   sources=[os.path.join(folder, name) for name in sources],
                   depends=sorted(glob.glob(os.path.join(folder, "*.h"))),
                   include_dirs=[folder],
                   extra_compile_args=COMPILE_ARGS)
    return ffi
