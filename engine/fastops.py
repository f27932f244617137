"""Elementwise hot loops: C kernels (engine._ckernels, built by cffi) with numpy fallbacks.

Each kernel ``<name>`` exists three times:

- ``np_<name>``: numpy, always available;
- ``c_<name>``: the C kernel, or None when engine._ckernels was not built;
- ``<name>``: the one to use, ``c_<name>`` when ``BACKEND == "c"`` else ``np_<name>``.

Both versions give the same bits (tests/test_fastops.py checks it), so the choice only
changes speed. ``c_attention_head`` (fused attention, for engine.ops.attention) is the
exception: not elementwise, its twin is the BLAS path in engine/ops.py, which it matches
to float32 rounding (tests/test_ops.py). ``BACKEND`` is "c" when the module imports, unless the environment sets
``SLOWFRAME_KERNELS=numpy``; ``SLOWFRAME_KERNELS=c`` makes a missing C module an
ImportError instead of a silent fallback.

All functions write into ``out`` (preallocated, C-contiguous, of the stated dtype) and
return it. The C calls release the GIL, so another thread can run while they do.
Inputs must be C-contiguous too; ``out`` may not overlap an input, except that
``gelu_erf`` may run in place (``out is x``).
"""

import os

import numpy as np

__all__ = [
    "BACKEND",
    "f16_to_f32",
    "bf16_to_f32",
    "f32_to_f16",
    "dequant_u8_rows",
    "dequant_u8",
    "quant_u8",
    "gelu_erf",
    "geglu",
    "softmax_rows",
    "taps_first",
    "layer_norm",
    "row_moments",
    "wino_weights",
    "wino_input",
    "wino_output",
]

BUILD_HINT = "build them with `pip install -e .` in the repository root (needs a C compiler and cffi)"

_CHOICE = os.environ.get("SLOWFRAME_KERNELS", "").strip().lower()
if _CHOICE not in ("", "auto", "c", "numpy"):
    raise ImportError(f"SLOWFRAME_KERNELS={_CHOICE!r}: use 'c', 'numpy' or leave it unset")

# The functions engine/_kernels_build.py defines. A module built from older sources (a
# `git pull` without rebuilding) lacks the newer ones and counts as not built.
C_FUNCTIONS = ("sf_f16_to_f32", "sf_bf16_to_f32", "sf_f32_to_f16", "sf_dequant_u8_rows", "sf_dequant_u8",
               "sf_quant_u8", "sf_gelu_erf", "sf_geglu", "sf_softmax_rows", "sf_taps_first", "sf_wino_weights",
               "sf_wino_input", "sf_wino_output", "sf_layer_norm", "sf_row_moments", "sf_attention_work",
               "sf_attention_head")


def missing_functions(lib: object) -> list[str]:
    """The C_FUNCTIONS a built kernels module lacks."""
    return [name for name in C_FUNCTIONS if not hasattr(lib, name)]


try:
    from engine import _ckernels
    _missing = missing_functions(_ckernels.lib)
    if _missing:
        raise ImportError(f"engine._ckernels was built from older sources: it has no {', '.join(_missing)}")
except ImportError as exc:  # not built (no compiler at install time), built for another Python, or stale
    _ckernels = None
    if _CHOICE == "c":
        raise ImportError(
            f"SLOWFRAME_KERNELS=c but the C kernels are not built for this Python ({exc}); {BUILD_HINT}"
        ) from exc

BACKEND = "c" if _ckernels is not None and _CHOICE != "numpy" else "numpy"


def fallback_warning() -> str | None:
    """What to tell the user when the kernels run in numpy without anyone asking for it
    (the model still works, but an evaluation takes 1.5-2x longer); None otherwise."""
    if BACKEND == "c" or _CHOICE == "numpy":
        return None
    return (f"slowframe's C kernels are not built for this Python (or were built from older sources), so the "
            f"engine runs their numpy fallbacks: "
            f"pictures take 1.5-2x longer. To fix, {BUILD_HINT}; set SLOWFRAME_KERNELS=numpy to silence this.")

# elements per block in the numpy fallbacks: keeps their temporaries in L2 instead of
# allocating several full-size arrays
_BLOCK = 1 << 15

_F32 = np.dtype(np.float32)
_U16 = np.dtype(np.uint16)
_F16 = np.dtype(np.float16)
_U8 = np.dtype(np.uint8)

_INV_SQRT2 = np.float32(0.70710678118654752)
# Abramowitz & Stegun 7.1.28, highest degree first (Horner)
_AS_COEFFS = tuple(
    np.float32(c)
    for c in (0.0000430638, 0.0002765672, 0.0001520143, 0.0092705272, 0.0422820123, 0.0705230784, 1.0)
)


# ---------------------------------------------------------------- argument checks


def _arr(name, a, dtypes, writable=False):
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


def _same_size(src, out):
    if out.size != src.size:
        raise ValueError(f"out: size {out.size} != input size {src.size}")


def _no_overlap(out, *inputs):
    for a in inputs:
        if np.may_share_memory(out, a):
            raise ValueError("out overlaps an input")


def _check_unary(src, out, src_dtypes, out_dtype):
    _arr("src", src, src_dtypes)
    _arr("out", out, (out_dtype,), writable=True)
    _same_size(src, out)
    _no_overlap(out, src)


def _same_data(a, b):
    return a.__array_interface__["data"][0] == b.__array_interface__["data"][0] and a.size == b.size


def _flat(a):
    return a.reshape(-1)  # a view: a is C-contiguous


def _blocks(n):
    block = _BLOCK
    for i in range(0, n, block):
        yield i, min(i + block, n)


# ---------------------------------------------------------------- numpy fallbacks


def np_f16_to_f32(src, out):
    """IEEE half bits (uint16 or float16) -> float32."""
    _check_unary(src, out, (_U16, _F16), _F32)
    np.copyto(_flat(out), _flat(src).view(np.float16), casting="unsafe")
    return out


def np_bf16_to_f32(src, out):
    """bfloat16 bits (uint16) -> float32."""
    _check_unary(src, out, (_U16,), _F32)
    o = _flat(out).view(np.uint32)
    np.copyto(o, _flat(src), casting="unsafe")
    o <<= 16
    return out


def np_f32_to_f16(src, out):
    """float32 -> IEEE half bits (uint16 or float16 out), round to nearest even."""
    _arr("src", src, (_F32,))
    _arr("out", out, (_U16, _F16), writable=True)
    _same_size(src, out)
    _no_overlap(out, src)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf is the defined result
        np.copyto(_flat(out).view(np.float16), _flat(src), casting="unsafe")
    return out


def _check_rows(q, scale, zero, out):
    _arr("q", q, (_U8,))
    if q.ndim != 2:
        raise ValueError(f"q: expected 2 dims (rows, cols), got shape {q.shape}")
    _arr("scale", scale, (_F32,))
    _arr("zero", zero, (_F32,))
    if scale.size != q.shape[0] or zero.size != q.shape[0]:
        raise ValueError(f"scale/zero: expected {q.shape[0]} values each, got {scale.size} and {zero.size}")
    _arr("out", out, (_F32,), writable=True)
    _same_size(q, out)
    _no_overlap(out, q, scale, zero)


def np_dequant_u8_rows(q, scale, zero, out):
    """out[r, k] = (float32(q[r, k]) - zero[r]) * scale[r]; q (R, K) uint8, scale/zero (R,)."""
    _check_rows(q, scale, zero, out)
    o = out.reshape(q.shape)
    np.subtract(q, zero.reshape(-1, 1), out=o)
    np.multiply(o, scale.reshape(-1, 1), out=o)
    return out


def np_dequant_u8(q, scale, zero, out):
    """out = (float32(q) - zero) * scale, with scale and zero rounded to float32."""
    _check_unary(q, out, (_U8,), _F32)
    o = _flat(out)
    np.subtract(_flat(q), np.float32(zero), out=o)
    np.multiply(o, np.float32(scale), out=o)
    return out


def np_quant_u8(x, scale, zero, out):
    """out = uint8(clip(rint(x / scale) + zero, 0, 255)), float32 math (scale, zero rounded
    to float32), rint half-to-even, the cast truncates; NaN gives the zero point."""
    _check_unary(x, out, (_F32,), _U8)
    s, z = np.float32(scale), np.float32(zero)
    xf, of = _flat(x), _flat(out)
    t = np.empty(min(x.size, _BLOCK), np.float32)
    nan = np.empty(t.size, np.bool_)
    with np.errstate(all="ignore"):  # x / scale may overflow to inf: clipped to 255 below
        for i, j in _blocks(x.size):
            b, m = t[: j - i], nan[: j - i]
            np.divide(xf[i:j], s, out=b)
            np.rint(b, out=b)
            np.isnan(b, out=m)
            np.copyto(b, 0, where=m)
            b += z
            np.clip(b, np.float32(0), np.float32(255), out=b)
            np.copyto(of[i:j], b, casting="unsafe")
    return out


def _np_gelu_block(x, out, t, u, m):
    """out = gelu(x) for same-shape float32 arrays; t, u (float32) and m (bool) are scratch
    of that shape. out may be x. Same op order as sf_gelu1 in the C source."""
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


def _scratch(shape):
    return np.empty(shape, np.float32), np.empty(shape, np.float32), np.empty(shape, np.bool_)


def np_gelu_erf(x, out):
    """GELU 0.5 x (1 + erf(x / sqrt 2)), erf by A&S 7.1.28 (error <= 5e-7 max(1, |x|)).
    May run in place (out is x)."""
    _arr("x", x, (_F32,))
    _arr("out", out, (_F32,), writable=True)
    _same_size(x, out)
    if not _same_data(x, out):
        _no_overlap(out, x)
    xf, of = _flat(x), _flat(out)
    t, u, m = _scratch(min(x.size, _BLOCK))
    # p^16 overflows to inf for |x| > ~17.7 (r = 0, as meant); signalling NaNs raise "invalid"
    with np.errstate(over="ignore", invalid="ignore"):
        for i, j in _blocks(x.size):
            n = j - i
            _np_gelu_block(xf[i:j], of[i:j], t[:n], u[:n], m[:n])
    return out


def _check_geglu(p, out, bias):
    _arr("p", p, (_F32,))
    _arr("out", out, (_F32,), writable=True)
    if p.ndim < 1 or p.shape[-1] % 2:
        raise ValueError(f"p: last dim must be even (value, gate), got shape {p.shape}")
    d = p.shape[-1] // 2
    want = p.shape[:-1] + (d,)
    if out.shape != want:
        raise ValueError(f"out: expected shape {want}, got {out.shape}")
    _no_overlap(out, p)
    if bias is not None:
        _arr("bias", bias, (_F32,))
        if bias.shape != (2 * d,):
            raise ValueError(f"bias: expected shape {(2 * d,)}, got {bias.shape}")
    return d


def np_geglu(p, out, bias=None):
    """diffusers GEGLU: p (..., 2D) -> out (..., D) = value * gelu(gate), where
    value = p[..., :D] + bias[:D] and gate = p[..., D:] + bias[D:] (bias optional)."""
    d = _check_geglu(p, out, bias)
    if d == 0 or out.size == 0:
        return out
    p2 = p.reshape(-1, 2 * d)
    o2 = out.reshape(-1, d)
    rows = max(1, _BLOCK // d)
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


_EXP_P = [np.float32(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                                  1.6666665459e-1, 5.0000001201e-1)]
_LANES = 8
_SOFTMAX_LANES = 16


# softmax_rows gives exactly 0 for arguments below this (see sf_exp_neg in _kernels_build.py)
EXP_FLUSH_BELOW = -64.0


def _np_exp_neg(x):
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


def _check_softmax(s, sums):
    _arr("s", s, (_F32,), writable=True)
    _arr("sums", sums, (_F32,), writable=True)
    if s.ndim != 2 or sums.shape != (s.shape[0],):
        raise ValueError(f"softmax_rows: s must be 2-D and sums ({s.shape[0]},); got {s.shape}, {sums.shape}")


def _lanes_sum(values, cols, width=_LANES):
    """Row sums of `values` (rows, cols), in their dtype, in the C kernels' lane order:
    `width` interleaved partial sums (the tail adds into the first lanes), then adjacent
    pairs added level by level."""
    body = cols // width * width
    lanes = np.zeros((values.shape[0], width), dtype=values.dtype)
    # numpy adds along a non-last axis one block after another, like the C loop
    np.add.reduce(values[:, :body].reshape(values.shape[0], -1, width), axis=1, out=lanes)
    lanes[:, :cols - body] += values[:, body:]
    while lanes.shape[1] > 1:
        lanes = lanes[:, 0::2] + lanes[:, 1::2]
    return lanes[:, 0]


def np_softmax_rows(s, sums):
    """Each row of s (rows, cols) -> exp(row - max(row)) in place (a NaN anywhere in a row
    makes it all NaN); sums (rows,) = row sums, added in 16 interleaved lanes as the C
    kernel does."""
    _check_softmax(s, sums)
    rows, cols = s.shape
    if cols == 0:
        sums[...] = 0
        return s
    step = max(1, _BLOCK // cols)
    for i in range(0, rows, step):
        x = s[i:i + step]
        with np.errstate(invalid="ignore"):   # a NaN or inf row turns to NaN, as in C
            x -= x.max(axis=1, keepdims=True)
            _np_exp_neg(x)
        sums[i:i + step] = _lanes_sum(x, cols, _SOFTMAX_LANES)
    return s


def _check_taps(w, out):
    _arr("w", w, (_F32,))
    _arr("out", out, (_F32,), writable=True)
    if w.ndim != 4 or out.shape != (w.shape[0], w.shape[2] * w.shape[3], w.shape[1]):
        raise ValueError(f"taps_first: w (rows, cin, kh, kw) -> out (rows, kh*kw, cin), got {w.shape} -> {out.shape}")
    _no_overlap(out, w)


def np_taps_first(w, out):
    """Conv weight (rows, cin, kh, kw) -> (rows, kh*kw, cin): each kernel tap's matrix."""
    _check_taps(w, out)
    out[...] = w.reshape(w.shape[0], w.shape[1], -1).transpose(0, 2, 1)
    return out


# Winograd F(2x2, 3x3) transforms (see sf_wino_* in _kernels_build.py): each works on a
# range of channels, so ops.conv2d can split it over threads, and takes the steps in
# the same order as the C.

def _check_range(name, lo, hi, n):
    if not (0 <= lo <= hi <= n):
        raise ValueError(f"{name}: channel range {lo}:{hi} is outside 0:{n}")


def _check_wino_weights(w, u, r0, r1):
    _arr("w", w, (_F32,))
    _arr("u", u, (_F32,), writable=True)
    if w.ndim != 4 or w.shape[2:] != (3, 3) or u.shape != (16, w.shape[0], w.shape[1]):
        raise ValueError(f"wino_weights: w (rows, cin, 3, 3) -> u (16, rows, cin), got {w.shape} -> {u.shape}")
    _check_range("wino_weights", r0, r1, w.shape[0])
    _no_overlap(u, w)


def np_wino_weights(w, u, r0, r1):
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


def _check_wino_input(p, v, c0, c1):
    _arr("p", p, (_F32,))
    _arr("v", v, (_F32,), writable=True)
    if p.ndim != 3 or v.ndim != 4 or v.shape[:2] != (16, p.shape[0]) \
            or p.shape[1] < 2 * v.shape[2] + 2 or p.shape[2] < 2 * v.shape[3] + 2:
        raise ValueError(f"wino_input: p (cin, >= 2ty+2, >= 2tx+2) -> v (16, cin, ty, tx), got {p.shape} -> {v.shape}")
    _check_range("wino_input", c0, c1, p.shape[0])
    _no_overlap(v, p)


def np_wino_input(p, v, c0, c1):
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


def _check_wino_output(m, y, c0, c1):
    _arr("m", m, (_F32,))
    _arr("y", y, (_F32,), writable=True)
    if m.ndim != 4 or m.shape[0] != 16 or y.shape != (m.shape[1], 2 * m.shape[2], 2 * m.shape[3]):
        raise ValueError(f"wino_output: m (16, cout, ty, tx) -> y (cout, 2ty, 2tx), got {m.shape} -> {y.shape}")
    _check_range("wino_output", c0, c1, m.shape[1])
    _no_overlap(y, m)


def np_wino_output(m, y, c0, c1):
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


def _check_layer_norm(x, gamma, beta, out):
    _arr("x", x, (_F32,))
    _arr("gamma", gamma, (_F32,))
    _arr("beta", beta, (_F32,))
    _arr("out", out, (_F32,), writable=True)
    if x.ndim != 2 or out.shape != x.shape or gamma.shape != (x.shape[1],) or beta.shape != (x.shape[1],):
        raise ValueError(f"layer_norm: x and out (rows, cols), gamma and beta (cols,); got {x.shape}, "
                         f"{gamma.shape}, {beta.shape}, {out.shape}")
    _no_overlap(out, x)


def _np_moments(xs, centred):
    """sf_moments for each row of xs (rows, cols): the float64 mean and the sum of squares
    of (xs - float32(mean)) in float64, both in the C kernel's lane order; the centred
    rows go to `centred`."""
    cols = xs.shape[1]
    mean = _lanes_sum(xs.astype(np.float64), cols) / cols
    np.subtract(xs, mean.astype(np.float32)[:, None], out=centred)
    d2 = centred.astype(np.float64)
    d2 *= d2
    return mean, _lanes_sum(d2, cols)


def np_layer_norm(x, gamma, beta, eps, out):
    """LayerNorm over each row of x (rows, cols): mean and variance summed in float64
    (in the C kernel's lane order), the normalisation in float32."""
    _check_layer_norm(x, gamma, beta, out)
    rows, cols = x.shape
    if cols == 0:
        return out
    step = max(1, _BLOCK // cols)
    for i in range(0, rows, step):
        d = out[i:i + step]
        _, m2 = _np_moments(x[i:i + step], d)
        rstd = (1.0 / np.sqrt(m2 / cols + np.float64(np.float32(eps)))).astype(np.float32)
        d *= rstd[:, None]
        d *= gamma
        d += beta
    return out


_F64 = np.dtype(np.float64)


def _strided_rows(kernel, name, a):
    """Check that `a` is a 2-D float32 array whose rows the C kernels can walk with a row
    stride: unit column stride, a whole number of floats between rows."""
    if not isinstance(a, np.ndarray) or a.dtype != _F32 or a.ndim != 2:
        raise ValueError(f"{kernel}: {name} must be a 2-D float32 array, got "
                         f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}")
    if a.shape[1] > 1 and a.strides[1] != 4 or a.strides[0] % 4 or a.strides[0] < 0:
        raise ValueError(f"{kernel}: {name} needs unit column stride and whole-float row strides, "
                         f"got strides {a.strides}")


def _check_row_moments(x, mean, m2):
    _strided_rows("row_moments", "x", x)
    if x.shape[1] == 0:
        raise ValueError("row_moments: rows of x must not be empty")
    _arr("mean", mean, (_F64,), writable=True)
    _arr("m2", m2, (_F64,), writable=True)
    if mean.shape != (x.shape[0],) or m2.shape != (x.shape[0],):
        raise ValueError(f"row_moments: mean and m2 must be ({x.shape[0]},); got {mean.shape}, {m2.shape}")


def np_row_moments(x, mean, m2):
    """Each row of x (rows, cols; rows may be strided): mean (float64, summed in the C
    kernel's lane order) and m2 = sum of (x - float32(mean))^2 in float64, into mean and m2."""
    _check_row_moments(x, mean, m2)
    rows, cols = x.shape
    step = max(1, _BLOCK // cols)
    centred = np.empty((min(step, rows), cols), dtype=np.float32)
    for i in range(0, rows, step):
        xs = x[i:i + step]
        mean[i:i + step], m2[i:i + step] = _np_moments(xs, centred[:xs.shape[0]])
    return mean, m2


def _check_attention(q, k, v, out):
    for name, a in (("q", q), ("k", k), ("v", v), ("out", out)):
        _strided_rows("attention", name, a)
    l, d = q.shape
    if k.shape[1] != d or v.shape != k.shape or out.shape != q.shape:
        raise ValueError(f"attention: q {q.shape}, k {k.shape}, v {v.shape}, out {out.shape}: "
                         "k and v must be (lk, d) and out (l, d)")
    if not out.flags.writeable:
        raise ValueError("attention: out must be writeable")
    _no_overlap(out, q, k, v)
    return l, k.shape[0], d


# ---------------------------------------------------------------- C kernels

if _ckernels is not None:
    _ffi, _lib = _ckernels.ffi, _ckernels.lib

    def _p(ctype, a):
        return _ffi.from_buffer(ctype, a)

    def c_f16_to_f32(src, out):
        _check_unary(src, out, (_U16, _F16), _F32)
        if src.size:
            _lib.sf_f16_to_f32(_p("uint16_t[]", src), _p("float[]", out), src.size)
        return out

    def c_bf16_to_f32(src, out):
        _check_unary(src, out, (_U16,), _F32)
        if src.size:
            _lib.sf_bf16_to_f32(_p("uint16_t[]", src), _p("float[]", out), src.size)
        return out

    def c_f32_to_f16(src, out):
        _arr("src", src, (_F32,))
        _arr("out", out, (_U16, _F16), writable=True)
        _same_size(src, out)
        _no_overlap(out, src)
        if src.size:
            _lib.sf_f32_to_f16(_p("float[]", src), _p("uint16_t[]", out), src.size)
        return out

    def c_dequant_u8_rows(q, scale, zero, out):
        _check_rows(q, scale, zero, out)
        if q.size:
            _lib.sf_dequant_u8_rows(
                _p("uint8_t[]", q), _p("float[]", scale), _p("float[]", zero), _p("float[]", out),
                q.shape[0], q.shape[1],
            )
        return out

    def c_dequant_u8(q, scale, zero, out):
        _check_unary(q, out, (_U8,), _F32)
        if q.size:
            _lib.sf_dequant_u8(_p("uint8_t[]", q), float(scale), float(zero), _p("float[]", out), q.size)
        return out

    def c_quant_u8(x, scale, zero, out):
        _check_unary(x, out, (_F32,), _U8)
        if x.size:
            _lib.sf_quant_u8(_p("float[]", x), float(scale), float(zero), _p("uint8_t[]", out), x.size)
        return out

    def c_gelu_erf(x, out):
        _arr("x", x, (_F32,))
        _arr("out", out, (_F32,), writable=True)
        _same_size(x, out)
        if not _same_data(x, out):
            _no_overlap(out, x)
        if x.size:
            _lib.sf_gelu_erf(_p("float[]", x), _p("float[]", out), x.size)
        return out

    def c_geglu(p, out, bias=None):
        d = _check_geglu(p, out, bias)
        if out.size:
            if bias is None:
                bias = np.zeros(2 * d, np.float32)
            _lib.sf_geglu(_p("float[]", p), _p("float[]", np.ascontiguousarray(bias)), _p("float[]", out),
                          out.size // d, d)
        return out

    def c_softmax_rows(s, sums):
        _check_softmax(s, sums)
        if s.size:
            _lib.sf_softmax_rows(_p("float[]", s), _p("float[]", sums), s.shape[0], s.shape[1])
        else:
            sums[...] = 0
        return s

    def c_taps_first(w, out):
        _check_taps(w, out)
        if w.size:
            _lib.sf_taps_first(_p("float[]", w), _p("float[]", out), out.shape[0], out.shape[2], out.shape[1])
        return out

    def c_layer_norm(x, gamma, beta, eps, out):
        _check_layer_norm(x, gamma, beta, out)
        if x.size:
            _lib.sf_layer_norm(_p("float[]", x), _p("float[]", gamma), _p("float[]", beta), _p("float[]", out),
                               x.shape[0], x.shape[1], float(eps))
        return out

    def _ptr(a):
        return _ffi.cast("float *", a.__array_interface__["data"][0])

    def c_row_moments(x, mean, m2):
        _check_row_moments(x, mean, m2)
        if x.shape[0]:
            _lib.sf_row_moments(_ptr(x), x.strides[0] // 4, x.shape[0], x.shape[1], _p("double[]", mean),
                                _p("double[]", m2))
        return mean, m2

    def c_attention_head(q, k, v, out, work, variant=0):
        """softmax(q k^T) v for one head into out, by the fused C kernel: q (l, d)
        already scaled, k and v (lk, d), out (l, d), each with unit column stride (rows
        may be strided: a head's columns of a wider array); work from attention_work.
        variant: 0 the best this CPU runs, 1 generic, 2 AVX2, 3 AVX-512. Returns False
        where that build or this d (a multiple of 16 is needed) is not available."""
        l, lk, d = _check_attention(q, k, v, out)
        _arr("work", work, (_F32,), writable=True)
        if work.size < attention_work(lk, d):
            raise ValueError(f"work: {work.size} floats, needs attention_work({lk}, {d}) = {attention_work(lk, d)}")
        if l == 0:
            return True
        rc = _lib.sf_attention_head(_ptr(q), q.strides[0] // 4, _ptr(k), k.strides[0] // 4, _ptr(v),
                                    v.strides[0] // 4, _ptr(out), out.strides[0] // 4, l, lk, d,
                                    _p("float[]", work), int(variant))
        return rc == 0

    def attention_work(lk, d):
        """Floats of scratch c_attention_head needs for lk keys of d channels."""
        return int(_lib.sf_attention_work(lk, d))

    def c_wino_weights(w, u, r0, r1):
        _check_wino_weights(w, u, r0, r1)
        if u.size:
            _lib.sf_wino_weights(_p("float[]", w), _p("float[]", u), w.shape[0], w.shape[1], r0, r1)
        return u

    def c_wino_input(p, v, c0, c1):
        _check_wino_input(p, v, c0, c1)
        if v.size:
            _lib.sf_wino_input(_p("float[]", p), _p("float[]", v), p.shape[0], p.shape[1], p.shape[2],
                               v.shape[2], v.shape[3], c0, c1)
        return v

    def c_wino_output(m, y, c0, c1):
        _check_wino_output(m, y, c0, c1)
        if y.size:
            _lib.sf_wino_output(_p("float[]", m), _p("float[]", y), m.shape[1], m.shape[2], m.shape[3], c0, c1)
        return y

else:
    c_attention_head = attention_work = c_row_moments = None
    c_softmax_rows = c_taps_first = c_layer_norm = None
    c_wino_weights = c_wino_input = c_wino_output = None
    c_f16_to_f32 = c_bf16_to_f32 = c_f32_to_f16 = None
    c_dequant_u8_rows = c_dequant_u8 = c_quant_u8 = None
    c_gelu_erf = c_geglu = None

_C = BACKEND == "c"
f16_to_f32 = c_f16_to_f32 if _C else np_f16_to_f32
bf16_to_f32 = c_bf16_to_f32 if _C else np_bf16_to_f32
f32_to_f16 = c_f32_to_f16 if _C else np_f32_to_f16
dequant_u8_rows = c_dequant_u8_rows if _C else np_dequant_u8_rows
dequant_u8 = c_dequant_u8 if _C else np_dequant_u8
quant_u8 = c_quant_u8 if _C else np_quant_u8
gelu_erf = c_gelu_erf if _C else np_gelu_erf
geglu = c_geglu if _C else np_geglu
softmax_rows = c_softmax_rows if _C else np_softmax_rows
taps_first = c_taps_first if _C else np_taps_first
layer_norm = c_layer_norm if _C else np_layer_norm
row_moments = c_row_moments if _C else np_row_moments
wino_weights = c_wino_weights if _C else np_wino_weights
wino_input = c_wino_input if _C else np_wino_input
wino_output = c_wino_output if _C else np_wino_output
del _C


def fused_attention(d: int) -> bool:
    """Whether attention heads of d channels run in the fused C kernel (c_attention_head):
    the C kernels are in use, built with it, and d is a multiple of 16."""
    return _FUSED_BUILT and d > 0 and d % 16 == 0


def _fused_attention_built() -> bool:
    if BACKEND != "c":
        return False
    one = np.ones((1, 16), np.float32)
    return c_attention_head(one, one, one, np.empty_like(one), np.empty(attention_work(1, 16), np.float32))


_FUSED_BUILT = _fused_attention_built()
