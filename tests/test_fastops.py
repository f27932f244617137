"""engine.fastops: every C kernel against its numpy fallback (same bits) and both against
an independent reference (float64 arithmetic, bit formulas, math.erf)."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest

import engine.fastops as fo

C_BUILT = fo.c_f16_to_f32 is not None
NOT_BUILT = "engine._ckernels is not built (no C compiler at install time): only the numpy fallbacks are tested"
needs_c = pytest.mark.skipif(not C_BUILT, reason=NOT_BUILT)

NAMES = ["f16_to_f32", "bf16_to_f32", "f32_to_f16", "dequant_u8_rows", "dequant_u8", "quant_u8", "gelu_erf", "geglu",
         "softmax_rows", "taps_first", "layer_norm", "row_moments", "wino_weights", "wino_input", "wino_output"]


def impls(name):
    """Parametrize over the numpy fallback and the C kernel (skipped when not built)."""
    return pytest.mark.parametrize(
        "fn",
        [
            pytest.param(getattr(fo, "np_" + name), id="numpy"),
            pytest.param(getattr(fo, "c_" + name), id="c", marks=needs_c),
        ],
    )


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32 if a.dtype.itemsize == 4 else np.uint16)


def assert_same_bits(a, b):
    ba, bb = bits(a).ravel(), bits(b).ravel()
    bad = np.flatnonzero(ba != bb)
    assert bad.size == 0, f"{bad.size} differ, first at {bad[0]}: {ba[bad[0]]:#x} != {bb[bad[0]]:#x}"


def assert_same_f32(a, b, nan_sign=True):
    """Equal bits, except that any NaN matches any NaN (of the same sign if nan_sign)."""
    a, b = a.ravel(), b.ravel()
    na, nb = np.isnan(a), np.isnan(b)
    assert np.array_equal(na, nb)
    if nan_sign:
        assert np.array_equal(np.signbit(a[na]), np.signbit(b[nb]))
    assert_same_bits(a[~na], b[~nb])


def rng(seed=0):
    return np.random.default_rng(seed)


def random_f32(n, seed=0):
    """Random bit patterns: every exponent, NaNs, infs, subnormals."""
    return rng(seed).integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)


SIZES = [0, 1, 3, 15, 16, 17, 1000, (1 << 15) + 5]  # vector tails, the fallback's block edge


# ---------------------------------------------------------------- module wiring


def test_backend_and_dispatch():
    assert fo.BACKEND in ("c", "numpy")
    for name in NAMES:
        want = getattr(fo, ("c_" if fo.BACKEND == "c" else "np_") + name)
        assert getattr(fo, name) is want, name
        assert callable(getattr(fo, "np_" + name))
        assert (getattr(fo, "c_" + name) is None) == (not C_BUILT)
    if os.environ.get("SLOWFRAME_KERNELS", "").lower() == "numpy":
        assert fo.BACKEND == "numpy"


def test_the_list_of_c_functions_is_the_build_scripts():
    import re

    import engine._kernels_build as build
    assert set(fo.C_FUNCTIONS) == set(re.findall(r"\b(sf_\w+)\(", build.CDEF))


def test_a_kernels_module_built_from_older_sources_counts_as_missing_functions():
    class Stale:
        sf_f16_to_f32 = sf_layer_norm = object()
    missing = fo.missing_functions(Stale())
    assert "sf_attention_head" in missing and "sf_f16_to_f32" not in missing
    if C_BUILT:
        assert fo.missing_functions(fo._ckernels.lib) == []


def _backend_with(env_value):
    env = dict(os.environ, SLOWFRAME_KERNELS=env_value)
    code = "import engine.fastops as f; print(f.BACKEND, f.gelu_erf is f.np_gelu_erf)"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def test_env_forces_numpy():
    r = _backend_with("numpy")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["numpy", "True"]


def test_env_bad_value():
    r = _backend_with("fortran")
    assert r.returncode != 0 and "SLOWFRAME_KERNELS" in r.stderr


@needs_c
def test_env_c_uses_c():
    r = _backend_with("c")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["c", "False"]


# ---------------------------------------------------------------- f16 / bf16 -> f32


ALL_U16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)


def ref_f16_bits_to_f32_bits(h):
    """Independent: value math in float64 for numbers, bit formula for inf/NaN (payload kept)."""
    h = h.astype(np.int64)
    sign, e, m = h >> 15, (h >> 10) & 31, h & 1023
    mag = np.where(e == 0, np.ldexp(m.astype(np.float64), -24), np.ldexp(1 + m / 1024.0, e - 15))
    val = np.where(sign == 1, -mag, mag).astype(np.float32).view(np.uint32)  # exact: fits in f32
    special = (sign << 31) | 0x7F800000 | (m << 13)
    return np.where(e == 31, special, val).astype(np.uint32)


@impls("f16_to_f32")
def test_f16_to_f32_all_patterns_vs_reference(fn):
    for src in (ALL_U16, ALL_U16.view(np.float16)):
        out = np.full(65536, np.nan, np.float32)
        assert fn(src, out) is out
        assert_same_bits(out.view(np.uint32), ref_f16_bits_to_f32_bits(ALL_U16))


@needs_c
def test_f16_to_f32_c_matches_numpy_astype_all_patterns():
    want = ALL_U16.view(np.float16).astype(np.float32)
    got = fo.c_f16_to_f32(ALL_U16, np.empty(65536, np.float32))
    assert_same_bits(got, want)  # NaN payloads included


@needs_c
@pytest.mark.parametrize("n", SIZES)
def test_f16_to_f32_sizes_and_shapes(n):
    src = rng(n).integers(0, 65536, n, dtype=np.uint32).astype(np.uint16)
    a = fo.c_f16_to_f32(src, np.empty(n, np.float32))
    b = fo.np_f16_to_f32(src, np.empty(n, np.float32))
    assert_same_bits(a, b)
    if n >= 15:  # any shape with the same size
        fo.c_f16_to_f32(src[:15].reshape(3, 5), out := np.empty((5, 3), np.float32))
        assert_same_bits(out.ravel(), b[:15])


@impls("bf16_to_f32")
def test_bf16_to_f32_all_patterns(fn):
    out = fn(ALL_U16, np.empty(65536, np.float32))
    assert_same_bits(out.view(np.uint32), np.arange(65536, dtype=np.uint32) << 16)


@needs_c
@pytest.mark.parametrize("n", SIZES)
def test_bf16_to_f32_c_vs_numpy(n):
    src = rng(n).integers(0, 65536, n, dtype=np.uint32).astype(np.uint16)
    assert_same_bits(fo.c_bf16_to_f32(src, np.empty(n, np.float32)), fo.np_bf16_to_f32(src, np.empty(n, np.float32)))


# ---------------------------------------------------------------- f32 -> f16


def ref_f32_to_f16_bits(x):
    """Independent: round to the half grid in float64 (np.rint is half-even), then pack the
    bits by hand. NaN -> 0x7e00 with the sign (only NaN-ness and sign are compared)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        d = x.astype(np.float64)  # signalling NaNs raise "invalid"
        a = np.abs(d)
        _, e2 = np.frexp(a)  # a = f * 2**e2, f in [0.5, 1)
        e = np.maximum(e2 - 1, -14)  # exponent of the half's ulp grid, subnormals share -14
        ulp = np.ldexp(1.0, e - 10)
        r = np.rint(a / ulp) * ulp  # exact in float64
        _, re2 = np.frexp(r)
        rexp = re2 - 1
        normal = r >= 2.0**-14
        hexp = np.where(normal, rexp + 15, 0)
        mant = np.where(normal, r / np.ldexp(1.0, rexp) - 1, r / 2.0**-24 / 1024) * 1024
        h = (hexp << 10) + np.rint(np.nan_to_num(mant)).astype(np.int64)
    h = np.where(r > 65504, 0x7C00, h)  # overflow (incl. inf)
    h = np.where(np.isnan(d), 0x7E00, h)
    h = h | (np.signbit(d).astype(np.int64) << 15)
    return h.astype(np.uint16)


def f16_edge_cases():
    """Every finite half, the midpoints between neighbours (ties) and one f32 ulp either side,
    the overflow boundary, subnormal boundaries, 0, inf, NaNs, both signs."""
    h = ALL_U16[(ALL_U16 & 0x7C00) != 0x7C00][:0x7C00]  # positive finite halves, ascending
    v = h.view(np.float16).astype(np.float64)
    nxt = np.append(v[1:], 65536.0)  # next half up (65536 stands for the rounding limit)
    mid = ((v + nxt) / 2).astype(np.float32)  # exact
    u = mid.view(np.uint32)
    pts = np.concatenate([v.astype(np.float32).view(np.uint32), u, u - 1, u + 1])
    extra = np.array(
        [65504, 65519.99, 65520, 65535.99, 65536, 1e5, 3.4e38, 2.0**-14, 2.0**-24, 2.0**-25,
         2.0**-25 * 1.0000001, 2.0**-26, 3 * 2.0**-25, 1e-30, 1e-45, 0.0, np.inf],
        np.float32,
    ).view(np.uint32)
    nans = np.array([0x7F800001, 0x7FC00000, 0x7F800FFF, 0x7FA00000, 0x7FFFFFFF, 0x7F802000], np.uint32)
    allp = np.concatenate([pts, extra, nans])
    return np.concatenate([allp, allp | 0x80000000]).view(np.float32)


@impls("f32_to_f16")
def test_f32_to_f16_vs_reference(fn):
    x = np.concatenate([f16_edge_cases(), random_f32(1 << 21, seed=1)])
    out = fn(x, np.empty(x.size, np.uint16))
    assert_same_f32(out.view(np.float16).astype(np.float32), ref_f32_to_f16_bits(x).view(np.float16).astype(np.float32))


def test_f32_to_f16_numpy_fallback_is_astype():
    x = np.concatenate([f16_edge_cases(), random_f32(1 << 18, seed=2)])
    x = x[~np.isnan(x)]
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    assert_same_bits(fo.np_f32_to_f16(x, np.empty(x.size, np.uint16)), want)


@needs_c
def test_f32_to_f16_c_vs_numpy():
    x = np.concatenate([f16_edge_cases(), random_f32(1 << 22, seed=3)])
    a = fo.c_f32_to_f16(x, np.empty(x.size, np.uint16))
    b = fo.np_f32_to_f16(x, np.empty(x.size, np.uint16))
    nan = np.isnan(x)
    assert_same_bits(a[~nan], b[~nan])
    # NaN: a NaN of the same sign (the C kernel also keeps numpy's payload rule)
    ha = a[nan].view(np.float16)
    assert np.isnan(ha).all() and np.array_equal(np.signbit(ha), np.signbit(x[nan]))


@needs_c
@pytest.mark.parametrize("n", SIZES)
def test_f32_to_f16_sizes(n):
    x = rng(n).standard_normal(n, dtype=np.float32) * 1000
    assert_same_bits(fo.c_f32_to_f16(x, np.empty(n, np.uint16)), fo.np_f32_to_f16(x, np.empty(n, np.uint16)))
    # float16 out works as well as uint16
    assert_same_bits(fo.c_f32_to_f16(x, np.empty(n, np.float16)).view(np.uint16), x.astype(np.float16).view(np.uint16))


# ---------------------------------------------------------------- uint8 dequant / quant


def f32_op(a, b, op):
    """One float32 operation, correctly rounded, computed in float64 (53 >= 2 * 24 + 2 bits,
    so rounding the float64 result to float32 gives the float32 result)."""
    with np.errstate(all="ignore"):
        return op(np.asarray(a, np.float32).astype(np.float64), np.asarray(b, np.float32).astype(np.float64)).astype(np.float32)


def ref_dequant(q, scale, zero):
    return f32_op(f32_op(q, zero, np.subtract), scale, np.multiply)


@impls("dequant_u8_rows")
@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (1, 1), (7, 33), (64, 1031)])
def test_dequant_u8_rows(fn, shape):
    g = rng(shape[0] * 1000 + shape[1])
    q = g.integers(0, 256, shape, dtype=np.uint8)
    scale = (g.standard_normal(shape[0]) * 0.01).astype(np.float32)
    zero = g.uniform(-10, 300, shape[0]).astype(np.float32)
    out = np.full(shape, np.nan, np.float32)
    assert fn(q, scale, zero, out) is out
    assert_same_bits(out, ref_dequant(q, scale[:, None], zero[:, None]))
    assert_same_bits(out, (q.astype(np.float32) - zero[:, None]) * scale[:, None])


@needs_c
def test_dequant_u8_rows_c_vs_numpy():
    g = rng(5)
    q = g.integers(0, 256, (300, 777), dtype=np.uint8)
    scale = g.uniform(-1, 1, 300).astype(np.float32)
    zero = g.uniform(0, 255, 300).astype(np.float32)
    a = fo.c_dequant_u8_rows(q, scale, zero, np.empty(q.shape, np.float32))
    b = fo.np_dequant_u8_rows(q, scale, zero, np.empty(q.shape, np.float32))
    assert_same_bits(a, b)


@impls("dequant_u8")
@pytest.mark.parametrize("scale,zero", [(0.0123, 128.0), (1 / 3, 127.3), (-2.5e-3, 0.0), (7.0, 255.0)])
def test_dequant_u8(fn, scale, zero):
    q = np.arange(256, dtype=np.uint8).repeat(3)
    out = fn(q, scale, zero, np.empty(q.size, np.float32))
    assert_same_bits(out, ref_dequant(q, np.float32(scale), np.float32(zero)))
    assert_same_bits(out, (q.astype(np.float32) - np.float32(zero)) * np.float32(scale))


@needs_c
@pytest.mark.parametrize("n", SIZES)
def test_dequant_u8_c_vs_numpy(n):
    q = rng(n).integers(0, 256, n, dtype=np.uint8)
    a = fo.c_dequant_u8(q, 0.0371, 131.5, np.empty(n, np.float32))
    b = fo.np_dequant_u8(q, np.float32(0.0371), np.float32(131.5), np.empty(n, np.float32))
    assert_same_bits(a, b)


def ref_quant(x, scale, zero):
    """float64 emulation of clip(rint(f32(x / scale)) + zero, 0, 255) -> uint8, NaN -> zero point."""
    v = f32_op(x, scale, np.divide).astype(np.float64)
    r = np.rint(v)
    r[np.isnan(r)] = 0.0
    u = f32_op(r, zero, np.add).astype(np.float64)
    return np.trunc(np.clip(u, 0, 255)).astype(np.uint8)


def quant_inputs(scale):
    g = rng(7)
    ks = np.arange(-300, 300, dtype=np.float64)
    ties = ((ks + 0.5) * np.float64(np.float32(scale))).astype(np.float32)  # land on .5 after x/scale
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 3.4e38, -3.4e38, 1e-45, 8388609.0, -8388607.5],
                       np.float32)
    return np.concatenate([
        special,
        ties, np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(-np.inf)),
        (g.standard_normal(200_000) * 200 * scale).astype(np.float32),
        random_f32(100_000, seed=8),
    ])


QUANT_PARAMS = [(0.0234, 128.0), (1.0, 0.0), (0.5, 127.6), (3e-5, 255.0), (0.1, -3.0), (1e-3, 300.0)]


@impls("quant_u8")
@pytest.mark.parametrize("scale,zero", QUANT_PARAMS)
def test_quant_u8_vs_reference(fn, scale, zero):
    x = quant_inputs(scale)
    out = fn(x, scale, zero, np.empty(x.size, np.uint8))
    want = ref_quant(x, scale, zero)
    bad = np.flatnonzero(out != want)
    assert bad.size == 0, f"x={x[bad[0]]!r}: {out[bad[0]]} != {want[bad[0]]}"


def test_quant_u8_numpy_fallback_formula():
    x = quant_inputs(0.0234)
    x = x[np.isfinite(x)]
    s, z = np.float32(0.0234), np.float32(128.0)
    with np.errstate(all="ignore"):
        want = np.clip(np.rint(x / s) + z, 0, 255).astype(np.uint8)
    assert np.array_equal(fo.np_quant_u8(x, 0.0234, 128.0, np.empty(x.size, np.uint8)), want)


@impls("quant_u8")
def test_quant_u8_nan_is_zero_point(fn):
    x = np.array([np.nan, -np.nan, 1.0], np.float32)
    assert list(fn(x, 0.5, 100.0, np.empty(3, np.uint8))) == [100, 100, 102]
    assert list(fn(x, 0.5, 99.7, np.empty(3, np.uint8))) == [99, 99, 101]


@needs_c
@pytest.mark.parametrize("scale,zero", QUANT_PARAMS)
@pytest.mark.parametrize("n", SIZES)
def test_quant_u8_c_vs_numpy(n, scale, zero):
    x = (rng(n).standard_normal(n) * 150 * scale).astype(np.float32)
    a = fo.c_quant_u8(x, scale, zero, np.empty(n, np.uint8))
    b = fo.np_quant_u8(x, scale, zero, np.empty(n, np.uint8))
    assert np.array_equal(a, b)


def test_quant_dequant_round_trip():
    x = np.linspace(-1, 1, 10001, dtype=np.float32)
    scale, zero = 2 / 254, 127.0
    q = fo.quant_u8(x, scale, zero, np.empty(x.size, np.uint8))
    back = fo.dequant_u8(q, scale, zero, np.empty(x.size, np.float32))
    assert np.abs(back - x).max() <= scale / 2 + 1e-6


# ---------------------------------------------------------------- GELU / GEGLU


def exact_gelu(x):
    return np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in np.asarray(x, np.float64).ravel()])


def gelu_grid():
    dense = np.arange(-120000, 120001, dtype=np.float64) / 10000  # [-12, 12], step 1e-4
    g = rng(11)
    return np.concatenate([
        dense.astype(np.float32),
        g.uniform(-12, 12, 100_000).astype(np.float32),
        g.uniform(-0.01, 0.01, 10_000).astype(np.float32),
        np.array([0.0, -0.0, 1e-45, -1e-45, 1e-30, -1e-30, 17.7, -17.7, 19.9, -19.9, 20, -20, 20.1, -20.1,
                  100, -100, 1e6, -1e6, 1e30, -1e30, 3.4e38, -3.4e38], np.float32),
    ])


@impls("gelu_erf")
def test_gelu_vs_exact_erf(fn):
    x = gelu_grid()
    got = fn(x, np.empty_like(x)).astype(np.float64)
    err = np.abs(got - exact_gelu(x)) / np.maximum(1.0, np.abs(x))
    i = int(err.argmax())
    assert err[i] <= 5e-7, f"x={x[i]!r}: scaled error {err[i]:.3g}"


@impls("gelu_erf")
def test_gelu_specials(fn):
    x = np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0], np.float32)
    y = fn(x, np.empty_like(x))
    assert y[0] == np.inf
    assert y[1] == 0.0  # -0.0, not NaN
    assert np.isnan(y[2]) and np.isnan(y[3])
    assert y[4] == 0 and y[5] == 0


@impls("gelu_erf")
def test_gelu_in_place(fn):
    x = gelu_grid()
    want = fn(x, np.empty_like(x))
    y = x.copy()
    assert fn(y, y) is y
    assert_same_f32(y, want, nan_sign=False)


@needs_c
@pytest.mark.parametrize("n", SIZES)
def test_gelu_c_vs_numpy_bits(n):
    x = np.concatenate([gelu_grid(), random_f32(200_000, seed=12)]) if n == SIZES[-1] else \
        (rng(n).standard_normal(n) * 4).astype(np.float32)
    a = fo.c_gelu_erf(x, np.empty_like(x))
    b = fo.np_gelu_erf(x, np.empty_like(x))
    assert_same_f32(a, b, nan_sign=False)  # which NaN operand wins a multiply is the compiler's choice


def geglu_input(shape, seed):
    g = rng(seed)
    p = (g.standard_normal(shape) * 3).astype(np.float32)
    p.reshape(-1)[:: 97] = g.uniform(-30, 30, p.reshape(-1)[:: 97].size)
    return p


GEGLU_SHAPES = [(1, 2), (3, 6), (7, 34), (5, 2 * 640), (2, 9, 2 * 17), (8, 2 * 5120)]


@impls("geglu")
@pytest.mark.parametrize("shape", GEGLU_SHAPES)
def test_geglu_vs_exact(fn, shape):
    p = geglu_input(shape, sum(shape))
    d = shape[-1] // 2
    out = np.full(shape[:-1] + (d,), np.nan, np.float32)
    assert fn(p, out) is out
    v, gate = p[..., :d].astype(np.float64), p[..., d:]
    want = v * exact_gelu(gate).reshape(gate.shape)
    tol = 5e-7 * np.maximum(1, np.abs(gate)) * np.abs(v) + 1.2e-7 * np.abs(want)
    assert (np.abs(out - want) <= tol).all()
    # and exactly value * (this implementation's own gelu) in float32
    gelu = getattr(fo, fn.__name__.replace("geglu", "gelu_erf"))
    assert_same_bits(out, p[..., :d] * gelu(np.ascontiguousarray(gate), np.empty(gate.shape, np.float32)))


@needs_c
@pytest.mark.parametrize("shape", GEGLU_SHAPES + [(64, 2 * 5120 + 2)])
def test_geglu_c_vs_numpy_bits(shape):
    p = geglu_input(shape, 3 + sum(shape))
    out_shape = shape[:-1] + (shape[-1] // 2,)
    a = fo.c_geglu(p, np.empty(out_shape, np.float32))
    assert_same_f32(a, fo.np_geglu(p, np.empty(out_shape, np.float32)), nan_sign=False)
    bias = (rng(shape[-1]).standard_normal(shape[-1]) * 2).astype(np.float32)
    a = fo.c_geglu(p, np.empty(out_shape, np.float32), bias)
    assert_same_f32(a, fo.np_geglu(p, np.empty(out_shape, np.float32), bias), nan_sign=False)


@impls("geglu")
@pytest.mark.parametrize("shape", [(3, 6), (5, 2 * 640), (2, 9, 2 * 17)])
def test_geglu_adds_the_projection_bias_to_value_and_gate(fn, shape):
    p = geglu_input(shape, 5 + sum(shape))
    bias = (rng(7).standard_normal(shape[-1]) * 2).astype(np.float32)
    out_shape = shape[:-1] + (shape[-1] // 2,)
    with_bias = fn(p, np.empty(out_shape, np.float32), bias)
    assert_same_bits(with_bias, fn(p + bias, np.empty(out_shape, np.float32)))


@impls("geglu")
def test_geglu_bias_of_the_wrong_length_is_refused(fn):
    with pytest.raises(ValueError, match="bias: expected shape"):
        fn(np.zeros((2, 8), np.float32), np.empty((2, 4), np.float32), np.zeros(4, np.float32))


# ---------------------------------------------------------------- argument checks


def _calls(n=8):
    f32, u16, u8 = np.zeros(n, np.float32), np.zeros(n, np.uint16), np.zeros(n, np.uint8)
    return {
        "f16_to_f32": lambda fn, out=None, src=None: fn(u16 if src is None else src, np.zeros(n, np.float32) if out is None else out),
        "bf16_to_f32": lambda fn, out=None, src=None: fn(u16 if src is None else src, np.zeros(n, np.float32) if out is None else out),
        "f32_to_f16": lambda fn, out=None, src=None: fn(f32 if src is None else src, np.zeros(n, np.uint16) if out is None else out),
        "dequant_u8": lambda fn, out=None, src=None: fn(u8 if src is None else src, 1.0, 0.0, np.zeros(n, np.float32) if out is None else out),
        "quant_u8": lambda fn, out=None, src=None: fn(f32 if src is None else src, 1.0, 0.0, np.zeros(n, np.uint8) if out is None else out),
        "gelu_erf": lambda fn, out=None, src=None: fn(f32 if src is None else src, np.zeros(n, np.float32) if out is None else out),
    }


UNARY = list(_calls())


@pytest.mark.parametrize("prefix", ["np_", pytest.param("c_", marks=needs_c)])
@pytest.mark.parametrize("name", UNARY)
def test_bad_arguments(prefix, name):
    fn, call = getattr(fo, prefix + name), _calls()[name]
    call(fn)  # the defaults are fine
    out_dtype = call(fn).dtype
    with pytest.raises(ValueError, match="dtype"):
        call(fn, out=np.zeros(8, np.float64))
    with pytest.raises(ValueError, match="dtype"):
        call(fn, src=np.zeros(8, np.int32))
    with pytest.raises(ValueError, match="size"):
        call(fn, out=np.zeros(7, out_dtype))
    with pytest.raises(ValueError, match="contiguous"):
        call(fn, out=np.zeros(16, out_dtype)[::2])
    with pytest.raises(ValueError, match="numpy array"):
        call(fn, out=[0.0] * 8)
    ro = np.zeros(8, out_dtype)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        call(fn, out=ro)
    buf = np.zeros(64, np.uint8)  # out overlapping the input
    src_dtype = {"f16_to_f32": np.uint16, "bf16_to_f32": np.uint16, "dequant_u8": np.uint8}.get(name, np.float32)
    src = buf[: 8 * np.dtype(src_dtype).itemsize].view(src_dtype)
    out = buf[4 : 4 + 8 * np.dtype(out_dtype).itemsize].view(out_dtype)
    with pytest.raises(ValueError, match="overlap"):
        call(fn, src=src, out=out)


@pytest.mark.parametrize("prefix", ["np_", pytest.param("c_", marks=needs_c)])
def test_bad_arguments_rows_and_geglu(prefix):
    rows, geglu = getattr(fo, prefix + "dequant_u8_rows"), getattr(fo, prefix + "geglu")
    q, s, z = np.zeros((4, 6), np.uint8), np.ones(4, np.float32), np.zeros(4, np.float32)
    rows(q, s, z, np.zeros((4, 6), np.float32))
    with pytest.raises(ValueError, match="2 dims"):
        rows(q.ravel(), s, z, np.zeros(24, np.float32))
    with pytest.raises(ValueError, match="scale"):
        rows(q, s[:3], z, np.zeros((4, 6), np.float32))
    with pytest.raises(ValueError, match="dtype"):
        rows(q, s.astype(np.float64), z, np.zeros((4, 6), np.float32))
    with pytest.raises(ValueError, match="size"):
        rows(q, s, z, np.zeros((4, 5), np.float32))
    p = np.zeros((3, 10), np.float32)
    geglu(p, np.zeros((3, 5), np.float32))
    with pytest.raises(ValueError, match="shape"):
        geglu(p, np.zeros((3, 10), np.float32))
    with pytest.raises(ValueError, match="even"):
        geglu(np.zeros((3, 9), np.float32), np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match="overlap"):
        geglu(p, p.reshape(-1)[:15].reshape(3, 5))


# ---------------------------------------------------------------- softmax_rows

SOFTMAX_SHAPES = [(1, 1), (3, 5), (7, 8), (5, 77), (64, 154), (16, 4096), (2, 1031)]


def _softmax_case(shape, scale, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


@impls("softmax_rows")
@pytest.mark.parametrize("shape", SOFTMAX_SHAPES)
@pytest.mark.parametrize("scale", [0.1, 5.0, 60.0])
def test_softmax_rows_vs_float64(fn, shape, scale):
    x = _softmax_case(shape, scale)
    s, sums = x.copy(), np.empty(shape[0], np.float32)
    fn(s, sums)
    ref = np.exp((x - x.max(axis=1, keepdims=True)).astype(np.float64))   # the float32 difference is the kernel's input
    # arguments below -64 give exactly 0, so no probability (nor its product with a value) is subnormal
    kept = (x - x.max(axis=1, keepdims=True)) >= -64.0
    assert np.all(np.abs(s - ref)[kept] <= 3e-6 * ref[kept])
    assert np.all(s[~kept] == 0.0)
    assert np.all(s[np.arange(shape[0]), x.argmax(axis=1)] == 1.0)   # the row maximum gives exactly 1
    assert np.allclose(sums, ref.sum(axis=1), rtol=3e-6)


@needs_c
@pytest.mark.parametrize("shape", SOFTMAX_SHAPES + [(256, 4096)])
@pytest.mark.parametrize("scale", [0.1, 5.0, 60.0])
def test_softmax_rows_c_vs_numpy_bits(shape, scale):
    x = _softmax_case(shape, scale, seed=1)
    a, b = x.copy(), x.copy()
    sa, sb = np.empty(shape[0], np.float32), np.empty(shape[0], np.float32)
    fo.c_softmax_rows(a, sa)
    fo.np_softmax_rows(b, sb)
    assert_same_bits(a, b)
    assert_same_bits(sa, sb)


@impls("softmax_rows")
def test_softmax_rows_nan_or_inf_in_a_row_spreads_like_numpy(fn):
    x = _softmax_case((4, 21), 1.0, seed=2)
    x[0, 3] = np.nan    # in the vectorised body
    x[1, 20] = np.nan   # in the tail
    x[2, 0] = np.inf
    s, sums = x.copy(), np.empty(4, np.float32)
    fn(s, sums)
    assert np.isnan(s[0]).all() and np.isnan(s[1]).all() and np.isnan(sums[:2]).all()
    assert np.isnan(s[2, 0]) and (s[2, 1:] == 0.0).all()   # inf - inf; exp(-inf) flushed
    assert np.isfinite(s[3]).all() and s[3].max() == 1.0


@impls("softmax_rows")
def test_softmax_rows_bad_arguments(fn):
    s = np.zeros((3, 4), np.float32)
    with pytest.raises(ValueError):
        fn(s, np.zeros(2, np.float32))
    with pytest.raises(ValueError):
        fn(s.astype(np.float64), np.zeros(3, np.float32))


# ---------------------------------------------------------------- taps_first


@impls("taps_first")
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (5, 3, 3, 3), (16, 40, 3, 3), (7, 9, 1, 1), (2, 4, 2, 3)])
def test_taps_first_puts_each_kernel_tap_in_one_matrix(fn, shape):
    w = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    out = np.full((shape[0], shape[2] * shape[3], shape[1]), np.nan, np.float32)
    fn(w, out)
    for ky in range(shape[2]):
        for kx in range(shape[3]):
            assert_same_bits(out[:, ky * shape[3] + kx], w[:, :, ky, kx])


@impls("taps_first")
def test_taps_first_rejects_a_wrong_output_shape(fn):
    with pytest.raises(ValueError, match="taps_first"):
        fn(np.zeros((4, 3, 3, 3), np.float32), np.zeros((4, 3, 9), np.float32))


# ---------------------------------------------------------------- Winograd F(2x2, 3x3) transforms
# The matrices of Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks" (2015).
WINO_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
WINO_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]])
WINO_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]])


@impls("wino_weights")
@pytest.mark.parametrize("rows,cin", [(1, 1), (3, 5), (4, 64), (2, 130)])
def test_wino_weights_is_g_g_gt_of_every_kernel(fn, rows, cin):
    w = np.random.default_rng(5).standard_normal((rows, cin, 3, 3)).astype(np.float32)
    u = np.full((16, rows, cin), np.nan, np.float32)
    fn(w, u, 0, rows)
    ref = np.einsum("ik,rckl,jl->ijrc", WINO_G, w.astype(np.float64), WINO_G).reshape(16, rows, cin)
    assert np.abs(u - ref).max() <= 1e-6 * np.abs(ref).max()


@impls("wino_input")
@pytest.mark.parametrize("cin,ty,tx,extra", [(1, 1, 1, 0), (3, 2, 5, 1), (2, 3, 64, 0), (2, 1, 131, 3)])
def test_wino_input_is_bt_d_b_of_every_tile(fn, cin, ty, tx, extra):
    p = np.random.default_rng(6).standard_normal((cin, 2 * ty + 2 + extra, 2 * tx + 2 + extra)).astype(np.float32)
    v = np.full((16, cin, ty, tx), np.nan, np.float32)
    fn(p, v, 0, cin)
    for i, j in [(0, 0), (ty - 1, tx - 1), (ty // 2, tx // 3)]:
        d = p[:, 2 * i:2 * i + 4, 2 * j:2 * j + 4].astype(np.float64)
        ref = np.einsum("ik,ckl,jl->ijc", WINO_BT, d, WINO_BT).reshape(16, cin)
        assert np.abs(v[:, :, i, j] - ref).max() <= 1e-6 * np.abs(ref).max()


@impls("wino_output")
@pytest.mark.parametrize("cout,ty,tx", [(1, 1, 1), (3, 2, 5), (2, 3, 70)])
def test_wino_output_is_at_m_a_of_every_tile(fn, cout, ty, tx):
    m = np.random.default_rng(7).standard_normal((16, cout, ty, tx)).astype(np.float32)
    y = np.full((cout, 2 * ty, 2 * tx), np.nan, np.float32)
    fn(m, y, 0, cout)
    for i, j in [(0, 0), (ty - 1, tx - 1), (ty // 2, tx // 3)]:
        ref = np.einsum("ik,ckl,jl->cij", WINO_AT, m[:, :, i, j].T.reshape(cout, 4, 4).astype(np.float64), WINO_AT)
        assert np.abs(y[:, 2 * i:2 * i + 2, 2 * j:2 * j + 2] - ref).max() <= 1e-6 * np.abs(ref).max()


@impls("wino_input")
def test_wino_transforms_write_only_their_channel_range(fn):
    p = np.random.default_rng(8).standard_normal((6, 6, 8)).astype(np.float32)
    v = np.full((16, 6, 2, 3), np.nan, np.float32)
    fn(p, v, 2, 4)
    assert np.isfinite(v[:, 2:4]).all() and np.isnan(v[:, :2]).all() and np.isnan(v[:, 4:]).all()


@needs_c
@pytest.mark.parametrize("seed", [0, 1])
def test_wino_kernels_c_vs_numpy_bits(seed):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((7, 67, 3, 3)) * 10.0 ** rng.uniform(-3, 3, (7, 67, 3, 3))).astype(np.float32)
    ua, ub = np.empty((16, 7, 67), np.float32), np.empty((16, 7, 67), np.float32)
    fo.c_wino_weights(w, ua, 1, 7)
    fo.np_wino_weights(w, ub, 1, 7)
    assert_same_bits(ua[:, 1:], ub[:, 1:])
    p = rng.standard_normal((5, 9, 2 * 70 + 3)).astype(np.float32)
    va, vb = np.empty((16, 5, 3, 70), np.float32), np.empty((16, 5, 3, 70), np.float32)
    fo.c_wino_input(p, va, 0, 5)
    fo.np_wino_input(p, vb, 0, 5)
    assert_same_bits(va, vb)
    ya, yb = np.empty((5, 6, 140), np.float32), np.empty((5, 6, 140), np.float32)
    fo.c_wino_output(va, ya, 0, 5)
    fo.np_wino_output(vb, yb, 0, 5)
    assert_same_bits(ya, yb)


@impls("wino_output")
def test_wino_kernels_reject_wrong_shapes_and_ranges(fn):
    with pytest.raises(ValueError, match="wino_output"):
        fn(np.zeros((16, 2, 3, 4), np.float32), np.zeros((2, 6, 7), np.float32), 0, 2)
    with pytest.raises(ValueError, match="channel range"):
        fn(np.zeros((16, 2, 3, 4), np.float32), np.zeros((2, 6, 8), np.float32), 1, 3)


# ---------------------------------------------------------------- layer_norm

LAYER_NORM_SHAPES = [(1, 1), (3, 7), (5, 8), (64, 640), (16, 1280), (9, 2053)]


@impls("layer_norm")
@pytest.mark.parametrize("shape", LAYER_NORM_SHAPES)
@pytest.mark.parametrize("offset", [0.0, 300.0])       # a mean far above the spread must not cost precision
def test_layer_norm_vs_float64(fn, shape, offset):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(shape) * 2.0 + offset).astype(np.float32)
    gamma, beta = rng.standard_normal(shape[1]).astype(np.float32), rng.standard_normal(shape[1]).astype(np.float32)
    got = fn(x, gamma, beta, 1e-5, np.empty_like(x))
    x64 = x.astype(np.float64)
    ref = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5) * gamma + beta
    assert np.abs(got - ref).max() <= 2e-5 * max(1.0, np.abs(ref).max())


@needs_c
@pytest.mark.parametrize("shape", LAYER_NORM_SHAPES + [(300, 640)])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
def test_layer_norm_c_vs_numpy_bits(shape, scale):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(shape) * scale + scale).astype(np.float32)
    gamma, beta = rng.standard_normal(shape[1]).astype(np.float32), rng.standard_normal(shape[1]).astype(np.float32)
    for eps in (1e-5, 1e-6):
        assert_same_bits(fo.c_layer_norm(x, gamma, beta, eps, np.empty_like(x)),
                         fo.np_layer_norm(x, gamma, beta, eps, np.empty_like(x)))


# ---------------------------------------------------------------- row_moments

def strided_rows(shape, seed, scale=1.0, offset=0.0):
    """Random rows, each followed by a gap: a channel's band rows inside a wider buffer."""
    rows, cols = shape
    buf = (np.random.default_rng(seed).standard_normal((rows, cols + 5)) * scale + offset).astype(np.float32)
    return buf[:, :cols]


@impls("row_moments")
@pytest.mark.parametrize("shape", LAYER_NORM_SHAPES)
@pytest.mark.parametrize("offset", [0.0, 300.0])       # a mean far above the spread must not cost precision
def test_row_moments_vs_float64(fn, shape, offset):
    x = strided_rows(shape, 6, 2.0, offset)
    mean, m2 = fn(x, np.empty(shape[0]), np.empty(shape[0]))
    x64 = x.astype(np.float64)
    assert np.allclose(mean, x64.mean(1), rtol=1e-12, atol=1e-12)
    assert np.allclose(m2, ((x64 - x64.mean(1, keepdims=True)) ** 2).sum(1), rtol=1e-6, atol=1e-9)


@needs_c
@pytest.mark.parametrize("shape", LAYER_NORM_SHAPES + [(320, 3200)])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
def test_row_moments_c_vs_numpy_bits(shape, scale):
    x = strided_rows(shape, 7, scale, scale)
    c = fo.c_row_moments(x, np.empty(shape[0]), np.empty(shape[0]))
    n = fo.np_row_moments(x, np.empty(shape[0]), np.empty(shape[0]))
    for a, b in zip(c, n):
        assert np.array_equal(a.view(np.uint64), b.view(np.uint64))


@impls("row_moments")
def test_row_moments_rejects_what_it_cannot_take(fn):
    x = np.zeros((4, 8), np.float32)
    with pytest.raises(ValueError, match="mean and m2 must be"):
        fn(x, np.empty(3), np.empty(4))
    with pytest.raises(ValueError, match="float32"):
        fn(x.astype(np.float64), np.empty(4), np.empty(4))
    with pytest.raises(ValueError, match="unit column stride"):
        fn(np.zeros((4, 16), np.float32)[:, ::2], np.empty(4), np.empty(4))
    with pytest.raises(ValueError, match="must not be empty"):
        fn(np.zeros((4, 0), np.float32), np.empty(4), np.empty(4))


@impls("layer_norm")
def test_layer_norm_rejects_mismatched_parameters(fn):
    x = np.zeros((4, 8), np.float32)
    with pytest.raises(ValueError, match="layer_norm"):
        fn(x, np.ones(7, np.float32), np.zeros(8, np.float32), 1e-5, np.empty_like(x))
