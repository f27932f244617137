"""Argument checks the kernels share (each kernel's own check sits with it): the C
versions and the numpy twins run the same ones, so both refuse the same calls."""

from __future__ import annotations

import numpy as np

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
U16 = np.dtype(np.uint16)
F16 = np.dtype(np.float16)
U8 = np.dtype(np.uint8)


def arr(name: str, a: object, dtypes: tuple[np.dtype, ...], writable: bool = False) -> np.ndarray:
    """`a`, checked to be a C-contiguous numpy array of one of `dtypes` (and writeable)."""
    if not isinstance(a, np.ndarray):
        raise ValueError(f"{name}: expected a numpy array, got {type(a).__name__}")
    if a.dtype not in dtypes:
        want = " or ".join(str(d) for d in dtypes)
        raise ValueError(f"{name}: expected dtype {want}, got {a.dtype}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name}: must be C-contiguous")
    if writable and not a.flags.writeable:
        raise ValueError(f"{name}: must be writeable")
    return a


def same_size(src: np.ndarray, out: np.ndarray) -> None:
    if out.size != src.size:
        raise ValueError(f"out: size {out.size} != input size {src.size}")


def no_overlap(out: np.ndarray, *inputs: np.ndarray) -> None:
    for a in inputs:
        if np.may_share_memory(out, a):
            raise ValueError("out overlaps an input")


def check_unary(src: np.ndarray, out: np.ndarray, src_dtypes: tuple[np.dtype, ...], out_dtype: np.dtype) -> None:
    """An elementwise kernel's src and out: dtypes, equal sizes, no overlap."""
    arr("src", src, src_dtypes)
    arr("out", out, (out_dtype,), writable=True)
    same_size(src, out)
    no_overlap(out, src)


def same_data(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether a and b are the same memory (an in-place call)."""
    return a.__array_interface__["data"][0] == b.__array_interface__["data"][0] and a.size == b.size


def strided_rows(kernel: str, name: str, a: object) -> None:
    """Check that `a` is a 2-D float32 array whose rows the C kernels can walk with a row
    stride: unit column stride, a whole number of floats between rows."""
    if not isinstance(a, np.ndarray) or a.dtype != F32 or a.ndim != 2:
        raise ValueError(f"{kernel}: {name} must be a 2-D float32 array, got "
                         f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}")
    if a.shape[1] > 1 and a.strides[1] != 4 or a.strides[0] % 4 or a.strides[0] < 0:
        raise ValueError(f"{kernel}: {name} needs unit column stride and whole-float row strides, "
                         f"got strides {a.strides}")
