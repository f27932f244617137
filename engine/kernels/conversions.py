"""Conversions: half and bfloat16 bits to float32 and back, 8-bit (de)quantisation, and
the conv weight layout with each kernel tap first (C in conversions.c).

Each kernel ``<name>`` comes as ``np_<name>`` (numpy), ``c_<name>`` (the C kernel, None
when it is not built) and ``<name>`` (the one engine.kernels.backend picks); both
versions give the same bits.
"""

from __future__ import annotations

import numpy as np

from engine.kernels.backend import buf, c_kernel, elementwise, lib, pick
from engine.kernels.checks import F16, F32, U8, U16, arr, check_unary, no_overlap, same_size
from engine.kernels.numpy_twins import BLOCK, flat

# ---------------------------------------------------------------- f16 / bf16 -> f32


def np_f16_to_f32(src: np.ndarray, out: np.ndarray) -> np.ndarray:
    """IEEE half bits (uint16 or float16) -> float32."""
    check_unary(src, out, (U16, F16), F32)
    np.copyto(flat(out), flat(src).view(np.float16), casting="unsafe")
    return out


@c_kernel
def c_f16_to_f32(src: np.ndarray, out: np.ndarray) -> np.ndarray:
    check_unary(src, out, (U16, F16), F32)
    return elementwise(lib.sf_f16_to_f32, src, out)


f16_to_f32 = pick(c_f16_to_f32, np_f16_to_f32)


def np_bf16_to_f32(src: np.ndarray, out: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) -> float32."""
    check_unary(src, out, (U16,), F32)
    o = flat(out).view(np.uint32)
    np.copyto(o, flat(src), casting="unsafe")
    o <<= 16
    return out


@c_kernel
def c_bf16_to_f32(src: np.ndarray, out: np.ndarray) -> np.ndarray:
    check_unary(src, out, (U16,), F32)
    return elementwise(lib.sf_bf16_to_f32, src, out)


bf16_to_f32 = pick(c_bf16_to_f32, np_bf16_to_f32)

# ---------------------------------------------------------------- f32 -> f16


def _check_f32_to_f16(src: np.ndarray, out: np.ndarray) -> None:
    arr("src", src, (F32,))
    arr("out", out, (U16, F16), writable=True)
    same_size(src, out)
    no_overlap(out, src)


def np_f32_to_f16(src: np.ndarray, out: np.ndarray) -> np.ndarray:
    """float32 -> IEEE half bits (uint16 or float16 out), round to nearest even."""
    _check_f32_to_f16(src, out)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf is the defined result
        np.copyto(flat(out).view(np.float16), flat(src), casting="unsafe")
    return out


@c_kernel
def c_f32_to_f16(src: np.ndarray, out: np.ndarray) -> np.ndarray:
    _check_f32_to_f16(src, out)
    return elementwise(lib.sf_f32_to_f16, src, out)


f32_to_f16 = pick(c_f32_to_f16, np_f32_to_f16)

# ---------------------------------------------------------------- uint8 dequant / quant


def _check_rows(src: np.ndarray, scale: np.ndarray, zero: np.ndarray, out: np.ndarray, src_dtype: np.dtype,
                out_dtype: np.dtype) -> None:
    arr("src", src, (src_dtype,))
    if src.ndim != 2:
        raise ValueError(f"src: expected 2 dims (rows, cols), got shape {src.shape}")
    arr("scale", scale, (F32,))
    arr("zero", zero, (F32,))
    if scale.size != src.shape[0] or zero.size != src.shape[0]:
        raise ValueError(f"scale/zero: expected {src.shape[0]} values each, got {scale.size} and {zero.size}")
    arr("out", out, (out_dtype,), writable=True)
    same_size(src, out)
    no_overlap(out, src, scale, zero)


def np_dequant_u8_rows(q: np.ndarray, scale: np.ndarray, zero: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out[r, k] = (float32(q[r, k]) - zero[r]) * scale[r]; q (R, K) uint8, scale/zero (R,)."""
    _check_rows(q, scale, zero, out, U8, F32)
    o = out.reshape(q.shape)
    np.subtract(q, zero.reshape(-1, 1), out=o)
    np.multiply(o, scale.reshape(-1, 1), out=o)
    return out


@c_kernel
def c_dequant_u8_rows(q: np.ndarray, scale: np.ndarray, zero: np.ndarray, out: np.ndarray) -> np.ndarray:
    _check_rows(q, scale, zero, out, U8, F32)
    if q.size:
        lib.sf_dequant_u8_rows(
            buf(q), buf(scale), buf(zero), buf(out),
            q.shape[0], q.shape[1],
        )
    return out


dequant_u8_rows = pick(c_dequant_u8_rows, np_dequant_u8_rows)


def np_quant_u8_rows(x: np.ndarray, scale: np.ndarray, zero: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out[r, k] = uint8(clip(rint(x[r, k] / scale[r]) + zero[r], 0, 255)); x (R, K) float32,
    scale/zero (R,) float32; rint half-to-even, the cast truncates; NaN gives the zero point."""
    _check_rows(x, scale, zero, out, F32, U8)
    o = out.reshape(x.shape)
    rows = max(1, BLOCK // max(1, x.shape[1]))
    t = np.empty((min(x.shape[0], rows), x.shape[1]), np.float32)
    nan = np.empty(t.shape, np.bool_)
    with np.errstate(all="ignore"):  # x / scale may overflow to inf: clipped to 255 below
        for r0 in range(0, x.shape[0], rows):
            r1 = min(x.shape[0], r0 + rows)
            b, m = t[: r1 - r0], nan[: r1 - r0]
            np.divide(x[r0:r1], scale[r0:r1, None], out=b)
            np.rint(b, out=b)
            np.isnan(b, out=m)
            np.copyto(b, 0, where=m)
            b += zero[r0:r1, None]
            np.clip(b, np.float32(0), np.float32(255), out=b)
            np.copyto(o[r0:r1], b, casting="unsafe")
    return out


@c_kernel
def c_quant_u8_rows(x: np.ndarray, scale: np.ndarray, zero: np.ndarray, out: np.ndarray) -> np.ndarray:
    _check_rows(x, scale, zero, out, F32, U8)
    if x.size:
        lib.sf_quant_u8_rows(buf(x), buf(scale), buf(zero), buf(out), x.shape[0], x.shape[1])
    return out


quant_u8_rows = pick(c_quant_u8_rows, np_quant_u8_rows)

# ---------------------------------------------------------------- conv weight layout


def _check_taps(w: np.ndarray, out: np.ndarray) -> None:
    arr("w", w, (F32,))
    arr("out", out, (F32,), writable=True)
    if w.ndim != 4 or out.shape != (w.shape[0], w.shape[2] * w.shape[3], w.shape[1]):
        raise ValueError(f"taps_first: w (rows, cin, kh, kw) -> out (rows, kh*kw, cin), got {w.shape} -> {out.shape}")
    no_overlap(out, w)


def np_taps_first(w: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Conv weight (rows, cin, kh, kw) -> (rows, kh*kw, cin): each kernel tap's matrix."""
    _check_taps(w, out)
    out[...] = w.reshape(w.shape[0], w.shape[1], -1).transpose(0, 2, 1)
    return out


@c_kernel
def c_taps_first(w: np.ndarray, out: np.ndarray) -> np.ndarray:
    _check_taps(w, out)
    if w.size:
        lib.sf_taps_first(buf(w), buf(out), out.shape[0], out.shape[2], out.shape[1])
    return out


taps_first = pick(c_taps_first, np_taps_first)
