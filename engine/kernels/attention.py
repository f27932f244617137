"""Fused attention for one head (C in attention.c): softmax(q k^T) v without a band of
scores ever going to memory.

Not elementwise, so unlike the other kernels it has no numpy twin of the same bits: its
fallback is the BLAS path in engine/ops.py, which it matches to float32 rounding
(tests/engine/test_ops.py). ``c_attention_head`` and ``attention_work`` are None when the C
kernels are not built; ``fused_attention(d)`` says whether engine.ops uses the kernel.
"""

from __future__ import annotations

import numpy as np

from engine.kernels.backend import BACKEND, buf, c_kernel, lib, row_ptr
from engine.kernels.checks import F32, arr, no_overlap, strided_rows


def _check_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, out: np.ndarray) -> tuple[int, int, int]:
    for name, a in (("q", q), ("k", k), ("v", v), ("out", out)):
        strided_rows("attention", name, a)
    l, d = q.shape
    if k.shape[1] != d or v.shape != k.shape or out.shape != q.shape:
        raise ValueError(f"attention: q {q.shape}, k {k.shape}, v {v.shape}, out {out.shape}: "
                         "k and v must be (lk, d) and out (l, d)")
    if not out.flags.writeable:
        raise ValueError("attention: out must be writeable")
    no_overlap(out, q, k, v)
    return l, k.shape[0], d


@c_kernel
def attention_work(lk: int, d: int) -> int:
    """Floats of scratch c_attention_head needs for lk keys of d channels."""
    return int(lib.sf_attention_work(lk, d))


@c_kernel
def c_attention_head(q: np.ndarray, k: np.ndarray, v: np.ndarray, out: np.ndarray, work: np.ndarray,
                     variant: int = 0) -> bool:
    """softmax(q k^T) v for one head into out, by the fused C kernel: q (l, d)
    already scaled, k and v (lk, d), out (l, d), each with unit column stride (rows
    may be strided: a head's columns of a wider array); work from attention_work.
    variant: 0 the best this CPU runs, 1 generic, 2 AVX2, 3 AVX-512. Returns False
    where that build or this d (a multiple of 16 is needed) is not available."""
    l, lk, d = _check_attention(q, k, v, out)
    arr("work", work, (F32,), writable=True)
    if work.size < attention_work(lk, d):
        raise ValueError(f"work: {work.size} floats, needs attention_work({lk}, {d}) = {attention_work(lk, d)}")
    if l == 0:
        return True
    rc = lib.sf_attention_head(row_ptr(q), q.strides[0] // 4, row_ptr(k), k.strides[0] // 4, row_ptr(v),
                               v.strides[0] // 4, row_ptr(out), out.strides[0] // 4, l, lk, d,
                               buf(work), int(variant))
    return rc == 0


def _fused_attention_built() -> bool:
    if BACKEND != "c":
        return False
    one = np.ones((1, 16), np.float32)
    return c_attention_head(one, one, one, np.empty_like(one), np.empty(attention_work(1, 16), np.float32))


_FUSED_BUILT = _fused_attention_built()


def fused_attention(d: int) -> bool:
    """Whether attention heads of d channels run in the fused C kernel (c_attention_head):
    the C kernels are in use, built with it, and d is a multiple of 16."""
    return _FUSED_BUILT and d > 0 and d % 16 == 0
