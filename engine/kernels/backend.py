"""The one chooser between slowframe's C kernels and their numpy twins, for the engine
and the dithering alike, and the loaded engine kernels module.

``SLOWFRAME_KERNELS`` unset (or ``auto``): the C kernels where they are built;
``numpy``: the twins, on purpose; ``c``: a missing C module is an ImportError instead of
a silent fallback. A C module built from older sources (a ``git pull`` without
rebuilding) lacks the newer functions of its header and counts as not built.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from engine.kernels.cbuild import functions

BUILD_HINT = "build them with `pip install -e .` in the repository root (needs a C compiler and cffi)"

_CHOICE = os.environ.get("SLOWFRAME_KERNELS", "").strip().lower()
if _CHOICE not in ("", "auto", "c", "numpy"):
    raise ImportError(f"SLOWFRAME_KERNELS={_CHOICE!r}: use 'c', 'numpy' or leave it unset")

# the functions engine/kernels/kernels.h declares
C_FUNCTIONS = functions((Path(__file__).parent / "kernels.h").read_text(encoding="utf-8"))


def missing_functions(lib: object, names: tuple[str, ...] = C_FUNCTIONS) -> list[str]:
    """The `names` a built C module's lib lacks."""
    return [name for name in names if not hasattr(lib, name)]


def load(module: str, names: tuple[str, ...] = ()) -> ModuleType | None:
    """The compiled cffi module `module`, or None when it is not built (no compiler at
    install time), built for another Python, or lacks one of `names`; with
    SLOWFRAME_KERNELS=c those are an ImportError."""
    try:
        built = importlib.import_module(module)
        missing = missing_functions(built.lib, names)
        if missing:
            raise ImportError(f"{module} was built from older sources: it has no {', '.join(missing)}")
    except ImportError as exc:
        if _CHOICE == "c":
            raise ImportError(f"SLOWFRAME_KERNELS=c but {module} is not built for this Python ({exc}); {BUILD_HINT}") \
                from exc
        return None
    return built


def backend_of(built: ModuleType | None) -> str:
    """"c" when the C module `built` is there and numpy was not asked for, else "numpy"."""
    return "c" if built is not None and _CHOICE != "numpy" else "numpy"


_ckernels = load("engine.kernels._ckernels", C_FUNCTIONS)
BACKEND = backend_of(_ckernels)
ffi, lib = (_ckernels.ffi, _ckernels.lib) if _ckernels is not None else (None, None)


def fallback_warning() -> str | None:
    """What to tell the user when the kernels run in numpy without anyone asking for it
    (the model still works, only slower); None otherwise."""
    if BACKEND == "c" or _CHOICE == "numpy":
        return None
    return (f"slowframe's C kernels are not built for this Python (or were built from older sources), so the "
            f"engine runs their numpy fallbacks: "
            f"pictures take 1.5-2x longer. To fix, {BUILD_HINT}; set SLOWFRAME_KERNELS=numpy to silence this.")


F = TypeVar("F", bound=Callable[..., Any])


def c_kernel(wrapper: F) -> F | None:
    """`wrapper` (a c_<name> function calling lib) when the C kernels are built, else None."""
    return wrapper if lib is not None else None


def pick(c_version: F | None, numpy_version: F) -> F:
    """The version of a kernel to run: the C one when BACKEND is "c", else the numpy twin."""
    return c_version if BACKEND == "c" else numpy_version


_CTYPES = {"float32": "float[]", "float64": "double[]", "float16": "uint16_t[]", "uint16": "uint16_t[]",
           "uint8": "uint8_t[]"}


def buf(a: Any) -> Any:
    """A cffi pointer to the memory of C-contiguous array `a`, typed by its dtype (float16 as uint16_t)."""
    return ffi.from_buffer(_CTYPES[a.dtype.name], a)


def row_ptr(a: Any) -> Any:
    """A float * to the first element of `a`, whose rows may be strided."""
    return ffi.cast("float *", a.__array_interface__["data"][0])


def elementwise(c_function: Callable[..., Any], src: Any, out: Any, *scalars: float) -> Any:
    """Run an elementwise kernel c_function(src, *scalars, out, n) over the arrays unless they
    are empty; returns out."""
    if src.size:
        c_function(buf(src), *scalars, buf(out), src.size)
    return out
