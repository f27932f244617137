"""Activations: GELU (exact-erf form), GEGLU and the row softmax (C in activations.c).

Each kernel ``<name>`` comes as ``np_<name>`` (numpy), ``c_<name>`` (the C kernel, None
when it is not built) and ``<name>`` (the one engine.kernels.backend picks); both
versions give the same bits. ``gelu_erf`` may run in place (``out is x``).
"""

from __future__ import annotations

import numpy as np

from engine.kernels.backend import buf, c_kernel, elementwise, lib, pick
from engine.kernels.checks import F32, arr, no_overlap, same_data, same_size
from engine.kernels.numpy_twins import BLOCK, blocks, flat, lanes_sum

# ---------------------------------------------------------------- GELU / GEGLU

_INV_SQRT2 = np.float32(0.70710678118654752)
# Abramowitz & Stegun 7.1.28, highest degree first (Horner)
_AS_COEFFS = tuple(
    np.float32(c)
    for c in (0.0000430638, 0.0002765672, 0.0001520143, 0.0092705272, 0.0422820123, 0.0705230784, 1.0)
)


def _np_gelu_block(x: np.ndarray, out: np.ndarray, t: np.ndarray, u: np.ndarray, m: np.ndarray) -> np.ndarray:
    """out = gelu(x) for same-shape float32 arrays; t, u (float32) and m (bool) are scratch
    of that shape. out may be x. Same op order as sf_gelu1 in activations.c."""
    a = np.abs(x, out=t)
    a *= _INV_SQRT2
    p = np.multiply(a, _AS_COEFFS[0], out=u)  # Horner: p = ((a6 a + a5) a + ...) a + 1
    p += _AS_COEFFS[1]
    for c in _AS_COEFFS[2:]:
        p *= a
        p += c
    p *= p  # p^16 by four squarings
    p *= p
    p *= p
    p *= p
    np.divide(np.float32(1), p, out=p)  # r ~ erfc(|x| / sqrt 2); p = inf gives 0
    pos = np.greater_equal(x, np.float32(0), out=m)
    np.subtract(np.float32(2), p, out=p, where=pos)  # 1 + erf(x / sqrt 2): 2 - r if x >= 0 else r
    xm = np.maximum(x, np.float32(-20), out=t)  # keeps NaN; makes gelu(-inf) -0.0, not NaN
    xm *= np.float32(0.5)
    np.multiply(xm, p, out=out)
    return out


def _scratch(shape: int | tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.empty(shape, np.float32), np.empty(shape, np.float32), np.empty(shape, np.bool_)


def _check_gelu(x: np.ndarray, out: np.ndarray) -> None:
    arr("x", x, (F32,))
    arr("out", out, (F32,), writable=True)
    same_size(x, out)
    if not same_data(x, out):
        no_overlap(out, x)


def np_gelu_erf(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """GELU 0.5 x (1 + erf(x / sqrt 2)), erf by A&S 7.1.28 (error <= 5e-7 max(1, |x|)).
    May run in place (out is x)."""
    _check_gelu(x, out)
    xf, of = flat(x), flat(out)
    t, u, m = _scratch(min(x.size, BLOCK))
    # p^16 overflows to inf for |x| > ~17.7 (r = 0, as meant); signalling NaNs raise "invalid"
    with np.errstate(over="ignore", invalid="ignore"):
        for i, j in blocks(x.size):
            n = j - i
            _np_gelu_block(xf[i:j], of[i:j], t[:n], u[:n], m[:n])
    return out


@c_kernel
def c_gelu_erf(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    _check_gelu(x, out)
    return elementwise(lib.sf_gelu_erf, x, out)


gelu_erf = pick(c_gelu_erf, np_gelu_erf)


def _check_geglu(p: np.ndarray, out: np.ndarray, bias: np.ndarray | None) -> int:
    arr("p", p, (F32,))
    arr("out", out, (F32,), writable=True)
    if p.ndim < 1 or p.shape[-1] % 2:
        raise ValueError(f"p: last dim must be even (value, gate), got shape {p.shape}")
    d = p.shape[-1] // 2
    want = p.shape[:-1] + (d,)
    if out.shape != want:
        raise ValueError(f"out: expected shape {want}, got {out.shape}")
    no_overlap(out, p)
    if bias is not None:
        arr("bias", bias, (F32,))
        if bias.shape != (2 * d,):
            raise ValueError(f"bias: expected shape {(2 * d,)}, got {bias.shape}")
    return d


def np_geglu(p: np.ndarray, out: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """diffusers GEGLU: p (..., 2D) -> out (..., D) = value * gelu(gate), where
    value = p[..., :D] + bias[:D] and gate = p[..., D:] + bias[D:] (bias optional)."""
    d = _check_geglu(p, out, bias)
    if d == 0 or out.size == 0:
        return out
    p2 = p.reshape(-1, 2 * d)
    o2 = out.reshape(-1, d)
    rows = max(1, BLOCK // d)
    t, u, m = _scratch((min(rows, p2.shape[0]), d))
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(0, p2.shape[0], rows):
            j = min(i + rows, p2.shape[0])
            ob = o2[i:j]
            gate, value = p2[i:j, d:], p2[i:j, :d]
            if bias is not None:
                gate, value = gate + bias[d:], value + bias[:d]
            _np_gelu_block(gate, ob, t[: j - i], u[: j - i], m[: j - i])
            np.multiply(value, ob, out=ob)  # value * gelu(gate)
    return out


@c_kernel
def c_geglu(p: np.ndarray, out: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    d = _check_geglu(p, out, bias)
    if out.size:
        if bias is None:
            bias = np.zeros(2 * d, np.float32)
        lib.sf_geglu(buf(p), buf(np.ascontiguousarray(bias)), buf(out),
                     out.size // d, d)
    return out


geglu = pick(c_geglu, np_geglu)

# ---------------------------------------------------------------- softmax_rows

_EXP_P = [np.float32(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                                  1.6666665459e-1, 5.0000001201e-1)]
_SOFTMAX_LANES = 16   # SF_SOFTMAX_LANES of activations.c

# softmax_rows gives exactly 0 for arguments below this (see sf_exp_neg in common.h)
EXP_FLUSH_BELOW = -64.0


def _np_exp_neg(x: np.ndarray) -> np.ndarray:
    """exp(x) for x <= 0 in place, the same Cephes steps as sf_exp_neg (0 below -64)."""
    f32 = np.float32
    flush = x < f32(EXP_FLUSH_BELOW)
    np.maximum(x, f32(-87.0), out=x)
    n = x * f32(1.44269504088896341)
    n += f32(12582912.0)
    n -= f32(12582912.0)
    r = n * f32(0.693359375)
    np.subtract(x, r, out=r)
    r -= n * f32(-2.12194440e-4)
    p = np.multiply(r, _EXP_P[0])
    for c in _EXP_P[1:]:
        p += c
        p *= r
    p *= r
    p += r
    p += f32(1.0)
    scale = ((n.astype(np.int32) + 127) << 23).view(np.float32)
    np.multiply(p, scale, out=x)
    x[flush] = 0.0
    return x


def _check_softmax(s: np.ndarray, sums: np.ndarray) -> None:
    arr("s", s, (F32,), writable=True)
    arr("sums", sums, (F32,), writable=True)
    if s.ndim != 2 or sums.shape != (s.shape[0],):
        raise ValueError(f"softmax_rows: s must be 2-D and sums ({s.shape[0]},); got {s.shape}, {sums.shape}")


def np_softmax_rows(s: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """Each row of s (rows, cols) -> exp(row - max(row)) in place (a NaN anywhere in a row
    makes it all NaN); sums (rows,) = row sums, added in 16 interleaved lanes as the C
    kernel does."""
    _check_softmax(s, sums)
    rows, cols = s.shape
    if cols == 0:
        sums[...] = 0
        return s
    step = max(1, BLOCK // cols)
    for i in range(0, rows, step):
        x = s[i:i + step]
        with np.errstate(invalid="ignore"):   # a NaN or inf row turns to NaN, as in C
            x -= x.max(axis=1, keepdims=True)
            _np_exp_neg(x)
        sums[i:i + step] = lanes_sum(x, cols, _SOFTMAX_LANES)
    return s


@c_kernel
def c_softmax_rows(s: np.ndarray, sums: np.ndarray) -> np.ndarray:
    _check_softmax(s, sums)
    if s.size:
        lib.sf_softmax_rows(buf(s), buf(sums), s.shape[0], s.shape[1])
    else:
        sums[...] = 0
    return s


softmax_rows = pick(c_softmax_rows, np_softmax_rows)
