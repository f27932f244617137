"""The numeric kernels: fp32 numpy (BLAS for the heavy lifting, C for conversions).

Layouts: images (B, C, H, W); token sequences (B, L, C) or (N, C); weights as in
the checkpoint (linear (out, in), conv (out, in, kh, kw)).
"""

from __future__ import annotations

import math

import numpy as np

from engine import fastops
from engine.sources import Source


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """x (..., in) @ w.T + b -> (..., out)."""
    y = x @ w.T
    if b is not None:
        y += b
    return y


def conv2d(src: Source, w: np.ndarray, b: np.ndarray | None, stride: int = 1,
           band_bytes: int = 64 << 20, out: np.ndarray | None = None) -> np.ndarray:
    """2-D convolution, padding k//2, for 1x1 and 3x3 kernels at stride 1 or 2.

    Works in bands of output rows: for each band the (C*k*k, rows*W) patch matrix is
    built from just the input rows it needs (so a full im2col never exists, and the
    source may be normalised/upsampled/concatenated on the fly), then one GEMM.
    With `out` given, the result is added to it.
    """
    B, C, H, W = src.shape
    co, ci, k, _ = w.shape
    if ci != C:
        raise ValueError(f"conv expects {ci} input channels, got {C}")
    pad = k // 2
    Ho = (H + 2 * pad - k) // stride + 1
    Wo = (W + 2 * pad - k) // stride + 1
    accumulate = out is not None
    if out is None:
        out = np.empty((B, co, Ho, Wo), dtype=np.float32)
    wm = w.reshape(co, ci * k * k)
    band = max(1, min(Ho, band_bytes // (4 * ci * k * k * Wo)))
    if k == 1 and stride == 1:
        scratch = None
    else:
        padded = np.zeros((C, (band - 1) * stride + k, W + 2 * pad), dtype=np.float32)
        patches = np.empty((C, k, k, band, Wo), dtype=np.float32)
    tmp = np.empty((co, band * Wo), dtype=np.float32) if accumulate else None
    for bi in range(B):
        for y0 in range(0, Ho, band):
            y1 = min(Ho, y0 + band)
            n = y1 - y0
            if k == 1 and stride == 1:
                scratch = np.ascontiguousarray(src.rows(bi, y0, y1)).reshape(C, n * W)
            else:
                lo = y0 * stride - pad                        # first input row needed
                hi = (y1 - 1) * stride - pad + k              # one past the last
                rows = (n - 1) * stride + k
                a, z = max(lo, 0), min(hi, H)
                padded[:, :a - lo] = 0.0
                padded[:, a - lo:z - lo, pad:pad + W] = src.rows(bi, a, z)
                padded[:, z - lo:rows] = 0.0
                for ky in range(k):
                    for kx in range(k):
                        patches[:, ky, kx, :n] = padded[:, ky:ky + (n - 1) * stride + 1:stride,
                                                        kx:kx + (Wo - 1) * stride + 1:stride]
                scratch = patches[:, :, :, :n].reshape(C * k * k, n * Wo) if n == band else \
                    np.ascontiguousarray(patches[:, :, :, :n]).reshape(C * k * k, n * Wo)
            dst = out[bi, :, y0:y1].reshape(co, n * Wo)
            if accumulate:
                t = tmp[:, :n * Wo]
                np.matmul(wm, scratch, out=t)
                if b is not None:
                    t += b[:, None]
                dst += t
            else:
                np.matmul(wm, scratch, out=dst)
                if b is not None:
                    dst += b[:, None]
    return out


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """LayerNorm over the last axis."""
    mean = x.mean(axis=-1, keepdims=True)
    d = x - mean
    var = np.einsum("...c,...c->...", d, d)[..., None] / x.shape[-1]
    d *= 1.0 / np.sqrt(var + eps)
    d *= gamma
    d += beta
    return d


def silu(x: np.ndarray) -> np.ndarray:
    t = np.negative(x)
    np.exp(t, out=t)
    t += 1.0
    return np.divide(x, t, out=t)


def geglu(p: np.ndarray) -> np.ndarray:
    """diffusers GEGLU: p = [value, gate] on the last axis -> value * gelu(gate)."""
    lead = p.shape[:-1]
    p2 = np.ascontiguousarray(p.reshape(-1, p.shape[-1]))
    out = np.empty((p2.shape[0], p2.shape[1] // 2), dtype=np.float32)
    fastops.geglu(p2, out)
    return out.reshape(*lead, -1)


def gelu(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x)
    return fastops.gelu_erf(x, np.empty_like(x))


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int, slices: int) -> np.ndarray:
    """softmax(q k^T / sqrt(d)) v for each head, one head and one band of query rows at a time.

    q (L, C), k and v (Lk, C), C = heads * d. The scale is folded into q (which is
    modified); only a (L/slices, Lk) score buffer exists at any time.
    """
    L, C = q.shape
    d = C // heads
    q *= np.float32(1.0 / math.sqrt(d))
    out = np.empty((L, C), dtype=np.float32)
    band = math.ceil(L / slices)
    scores = np.empty((band, k.shape[0]), dtype=np.float32)
    for h in range(heads):
        cols = slice(h * d, (h + 1) * d)
        kt = k[:, cols].T
        vh = v[:, cols]
        for r0 in range(0, L, band):
            r1 = min(L, r0 + band)
            s = scores[:r1 - r0]
            np.matmul(q[r0:r1, cols], kt, out=s)
            s -= s.max(axis=1, keepdims=True)
            np.exp(s, out=s)
            total = s.sum(axis=1, keepdims=True)
            o = out[r0:r1, cols]
            np.matmul(s, vh, out=o)
            o /= total
    return out


def timestep_embedding(t: np.ndarray, dim: int, flip_sin_to_cos: bool = True, shift: float = 0.0,
                       max_period: float = 10000.0) -> np.ndarray:
    """Sinusoidal embedding of t (N,) -> (N, dim), as diffusers' get_timestep_embedding."""
    half = dim // 2
    exponent = (-math.log(max_period) * np.arange(half, dtype=np.float32)).astype(np.float32) / np.float32(half - shift)
    freqs = np.exp(exponent.astype(np.float64)).astype(np.float32)  # correctly rounded, as torch's
    arg = t.astype(np.float32)[:, None] * freqs[None, :]
    sin, cos = np.sin(arg), np.cos(arg)
    emb = np.concatenate([cos, sin] if flip_sin_to_cos else [sin, cos], axis=-1)
    if dim % 2:
        emb = np.pad(emb, ((0, 0), (0, 1)))
    return emb.astype(np.float32)
