"""Norms: LayerNorm and the per-row moments GroupNorm merges across bands (C in norms.c).

Each kernel ``<name>`` comes as ``np_<name>`` (numpy), ``c_<name>`` (the C kernel, None
when it is not built) and ``<name>`` (the one engine.kernels.backend picks); both
versions give the same bits: the sums run in float64 in the C kernel's lane order.
"""

from __future__ import annotations

import numpy as np

from engine.kernels.backend import buf, c_kernel, lib, pick, row_ptr
from engine.kernels.checks import F32, F64, arr, no_overlap, strided_rows
from engine.kernels.numpy_twins import BLOCK, lanes_sum


def _np_moments(xs: np.ndarray, centred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """sf_moments for each row of xs (rows, cols): the float64 mean and the sum of squares
    of (xs - float32(mean)) in float64, both in the C kernel's lane order; the centred
    rows go to `centred`."""
    cols = xs.shape[1]
    mean = lanes_sum(xs.astype(np.float64), cols) / cols
    np.subtract(xs, mean.astype(np.float32)[:, None], out=centred)
    d2 = centred.astype(np.float64)
    d2 *= d2
    return mean, lanes_sum(d2, cols)

# ---------------------------------------------------------------- layer_norm


def _check_layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, out: np.ndarray) -> None:
    arr("x", x, (F32,))
    arr("gamma", gamma, (F32,))
    arr("beta", beta, (F32,))
    arr("out", out, (F32,), writable=True)
    if x.ndim != 2 or out.shape != x.shape or gamma.shape != (x.shape[1],) or beta.shape != (x.shape[1],):
        raise ValueError(f"layer_norm: x and out (rows, cols), gamma and beta (cols,); got {x.shape}, "
                         f"{gamma.shape}, {beta.shape}, {out.shape}")
    no_overlap(out, x)


def np_layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float, out: np.ndarray) -> np.ndarray:
    """LayerNorm over each row of x (rows, cols): mean and variance summed in float64
    (in the C kernel's lane order), the normalisation in float32."""
    _check_layer_norm(x, gamma, beta, out)
    rows, cols = x.shape
    if cols == 0:
        return out
    step = max(1, BLOCK // cols)
    for i in range(0, rows, step):
        d = out[i:i + step]
        _, m2 = _np_moments(x[i:i + step], d)
        rstd = (1.0 / np.sqrt(m2 / cols + np.float64(np.float32(eps)))).astype(np.float32)
        d *= rstd[:, None]
        d *= gamma
        d += beta
    return out


@c_kernel
def c_layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float, out: np.ndarray) -> np.ndarray:
    _check_layer_norm(x, gamma, beta, out)
    if x.size:
        lib.sf_layer_norm(buf(x), buf(gamma), buf(beta), buf(out),
                          x.shape[0], x.shape[1], float(eps))
    return out


layer_norm = pick(c_layer_norm, np_layer_norm)

# ---------------------------------------------------------------- row_moments


def _check_row_moments(x: np.ndarray, mean: np.ndarray, m2: np.ndarray) -> None:
    strided_rows("row_moments", "x", x)
    if x.shape[1] == 0:
        raise ValueError("row_moments: rows of x must not be empty")
    arr("mean", mean, (F64,), writable=True)
    arr("m2", m2, (F64,), writable=True)
    if mean.shape != (x.shape[0],) or m2.shape != (x.shape[0],):
        raise ValueError(f"row_moments: mean and m2 must be ({x.shape[0]},); got {mean.shape}, {m2.shape}")


def np_row_moments(x: np.ndarray, mean: np.ndarray, m2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row of x (rows, cols; rows may be strided): mean (float64, summed in the C
    kernel's lane order) and m2 = sum of (x - float32(mean))^2 in float64, into mean and m2."""
    _check_row_moments(x, mean, m2)
    rows, cols = x.shape
    step = max(1, BLOCK // cols)
    centred = np.empty((min(step, rows), cols), dtype=np.float32)
    for i in range(0, rows, step):
        xs = x[i:i + step]
        mean[i:i + step], m2[i:i + step] = _np_moments(xs, centred[:xs.shape[0]])
    return mean, m2


@c_kernel
def c_row_moments(x: np.ndarray, mean: np.ndarray, m2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    _check_row_moments(x, mean, m2)
    if x.shape[0]:
        lib.sf_row_moments(row_ptr(x), x.strides[0] // 4, x.shape[0], x.shape[1], buf(mean),
                           buf(m2))
    return mean, m2


row_moments = pick(c_row_moments, np_row_moments)
