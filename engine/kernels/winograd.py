"""Winograd F(2x2, 3x3) transforms of weights, inputs and outputs (C in winograd.c).

engine.ops.conv2d runs a 3x3 stride-1 convolution as 16 GEMMs between these transforms.
Each works on a range of channels, so the caller can split it over threads, and takes
its steps in the same order in numpy and in C. Each kernel ``<name>`` comes as
``np_<name>`` (numpy), ``c_<name>`` (the C kernel, None when it is not built) and
``<name>`` (the one engine.kernels.backend picks); both versions give the same bits.
"""

from __future__ import annotations

import numpy as np

from engine.kernels.backend import buf, c_kernel, lib, pick
from engine.kernels.checks import F32, arr, no_overlap


def _check_range(name: str, lo: int, hi: int, n: int) -> None:
    if not (0 <= lo <= hi <= n):
        raise ValueError(f"{name}: channel range {lo}:{hi} is outside 0:{n}")

# ---------------------------------------------------------------- weights


def _check_wino_weights(w: np.ndarray, u: np.ndarray, r0: int, r1: int) -> None:
    arr("w", w, (F32,))
    arr("u", u, (F32,), writable=True)
    if w.ndim != 4 or w.shape[2:] != (3, 3) or u.shape != (16, w.shape[0], w.shape[1]):
        raise ValueError(f"wino_weights: w (rows, cin, 3, 3) -> u (16, rows, cin), got {w.shape} -> {u.shape}")
    _check_range("wino_weights", r0, r1, w.shape[0])
    no_overlap(u, w)


def np_wino_weights(w: np.ndarray, u: np.ndarray, r0: int, r1: int) -> np.ndarray:
    """u[:, r0:r1] = G g G^T of each 3x3 kernel g of w[r0:r1], as 16 planes (16, rows, cin)."""
    _check_wino_weights(w, u, r0, r1)
    g = w[r0:r1]
    h = np.float32(0.5)
    a = [g[:, :, 0], ((g[:, :, 0] + g[:, :, 1]) + g[:, :, 2]) * h, ((g[:, :, 0] - g[:, :, 1]) + g[:, :, 2]) * h,
         g[:, :, 2]]
    for i in range(4):
        x0, x1, x2 = a[i][..., 0], a[i][..., 1], a[i][..., 2]
        u[4 * i + 0, r0:r1] = x0
        u[4 * i + 1, r0:r1] = ((x0 + x1) + x2) * h
        u[4 * i + 2, r0:r1] = ((x0 - x1) + x2) * h
        u[4 * i + 3, r0:r1] = x2
    return u


@c_kernel
def c_wino_weights(w: np.ndarray, u: np.ndarray, r0: int, r1: int) -> np.ndarray:
    _check_wino_weights(w, u, r0, r1)
    if u.size:
        lib.sf_wino_weights(buf(w), buf(u), w.shape[0], w.shape[1], r0, r1)
    return u


wino_weights = pick(c_wino_weights, np_wino_weights)

# ---------------------------------------------------------------- inputs


def _check_wino_input(p: np.ndarray, v: np.ndarray, c0: int, c1: int) -> None:
    arr("p", p, (F32,))
    arr("v", v, (F32,), writable=True)
    if p.ndim != 3 or v.ndim != 4 or v.shape[:2] != (16, p.shape[0]) \
            or p.shape[1] < 2 * v.shape[2] + 2 or p.shape[2] < 2 * v.shape[3] + 2:
        raise ValueError(f"wino_input: p (cin, >= 2ty+2, >= 2tx+2) -> v (16, cin, ty, tx), got {p.shape} -> {v.shape}")
    _check_range("wino_input", c0, c1, p.shape[0])
    no_overlap(v, p)


def np_wino_input(p: np.ndarray, v: np.ndarray, c0: int, c1: int) -> np.ndarray:
    """v[:, c0:c1] = B^T d B of every 4x4 tile d = p[c, 2i:2i+4, 2j:2j+4]."""
    _check_wino_input(p, v, c0, c1)
    ty, tx = v.shape[2], v.shape[3]
    d = [p[c0:c1, k:k + 2 * ty:2, :2 * tx + 2] for k in range(4)]
    t = [d[0] - d[2], d[1] + d[2], d[2] - d[1], d[1] - d[3]]
    for r in range(4):
        e = [t[r][:, :, k:k + 2 * tx:2] for k in range(4)]
        np.subtract(e[0], e[2], out=v[4 * r + 0, c0:c1])
        np.add(e[1], e[2], out=v[4 * r + 1, c0:c1])
        np.subtract(e[2], e[1], out=v[4 * r + 2, c0:c1])
        np.subtract(e[1], e[3], out=v[4 * r + 3, c0:c1])
    return v


@c_kernel
def c_wino_input(p: np.ndarray, v: np.ndarray, c0: int, c1: int) -> np.ndarray:
    _check_wino_input(p, v, c0, c1)
    if v.size:
        lib.sf_wino_input(buf(p), buf(v), p.shape[0], p.shape[1], p.shape[2],
                          v.shape[2], v.shape[3], c0, c1)
    return v


wino_input = pick(c_wino_input, np_wino_input)

# ---------------------------------------------------------------- outputs


def _check_wino_output(m: np.ndarray, y: np.ndarray, c0: int, c1: int) -> None:
    arr("m", m, (F32,))
    arr("y", y, (F32,), writable=True)
    if m.ndim != 4 or m.shape[0] != 16 or y.shape != (m.shape[1], 2 * m.shape[2], 2 * m.shape[3]):
        raise ValueError(f"wino_output: m (16, cout, ty, tx) -> y (cout, 2ty, 2tx), got {m.shape} -> {y.shape}")
    _check_range("wino_output", c0, c1, m.shape[1])
    no_overlap(y, m)


def np_wino_output(m: np.ndarray, y: np.ndarray, c0: int, c1: int) -> np.ndarray:
    """y[c0:c1] = A^T m A of every transformed tile: each gives a 2x2 block of y."""
    _check_wino_output(m, y, c0, c1)
    mm = m[:, c0:c1]
    q = [[(mm[4 * r] + mm[4 * r + 1]) + mm[4 * r + 2], (mm[4 * r + 1] - mm[4 * r + 2]) - mm[4 * r + 3]]
         for r in range(4)]
    yy = y[c0:c1].reshape(c1 - c0, m.shape[2], 2, m.shape[3], 2)
    for b in range(2):
        yy[:, :, 0, :, b] = (q[0][b] + q[1][b]) + q[2][b]
        yy[:, :, 1, :, b] = (q[1][b] - q[2][b]) - q[3][b]
    return y


@c_kernel
def c_wino_output(m: np.ndarray, y: np.ndarray, c0: int, c1: int) -> np.ndarray:
    _check_wino_output(m, y, c0, c1)
    if y.size:
        lib.sf_wino_output(buf(m), buf(y), m.shape[1], m.shape[2], m.shape[3], c0, c1)
    return y


wino_output = pick(c_wino_output, np_wino_output)
