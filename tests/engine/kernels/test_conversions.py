"""engine.kernels.conversions: every C kernel against its numpy twin (same bits) and both against
an independent reference (float64 arithmetic, bit formulas)."""

import numpy as np
import pytest

from engine.kernels import conversions
from kernel_testing import SIZES, assert_same_bits, assert_same_f32, impls, needs_c, random_f32, rng


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
    got = conversions.c_f16_to_f32(ALL_U16, np.empty(65536, np.float32))
    assert_same_bits(got, want)  # NaN payloads included


@needs_c
@pytest.mark.parametrize("n", SIZES)
def test_f16_to_f32_sizes_and_shapes(n):
    src = rng(n).integers(0, 65536, n, dtype=np.uint32).astype(np.uint16)
    a = conversions.c_f16_to_f32(src, np.empty(n, np.float32))
    b = conversions.np_f16_to_f32(src, np.empty(n, np.float32))
    assert_same_bits(a, b)
    if n >= 15:  # any shape with the same size
        conversions.c_f16_to_f32(src[:15].reshape(3, 5), out := np.empty((5, 3), np.float32))
        assert_same_bits(out.ravel(), b[:15])


@impls("bf16_to_f32")
def test_bf16_to_f32_all_patterns(fn):
    out = fn(ALL_U16, np.empty(65536, np.float32))
    assert_same_bits(out.view(np.uint32), np.arange(65536, dtype=np.uint32) << 16)


@needs_c
@pytest.mark.parametrize("n", SIZES)
def test_bf16_to_f32_c_vs_numpy(n):
    src = rng(n).integers(0, 65536, n, dtype=np.uint32).astype(np.uint16)
    assert_same_bits(conversions.c_bf16_to_f32(src, np.empty(n, np.float32)),
                     conversions.np_bf16_to_f32(src, np.empty(n, np.float32)))


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
    assert_same_bits(conversions.np_f32_to_f16(x, np.empty(x.size, np.uint16)), want)


@needs_c
def test_f32_to_f16_c_vs_numpy():
    x = np.concatenate([f16_edge_cases(), random_f32(1 << 22, seed=3)])
    a = conversions.c_f32_to_f16(x, np.empty(x.size, np.uint16))
    b = conversions.np_f32_to_f16(x, np.empty(x.size, np.uint16))
    nan = np.isnan(x)
    assert_same_bits(a[~nan], b[~nan])
    # NaN: a NaN of the same sign (the C kernel also keeps numpy's payload rule)
    ha = a[nan].view(np.float16)
    assert np.isnan(ha).all() and np.array_equal(np.signbit(ha), np.signbit(x[nan]))


@needs_c
@pytest.mark.parametrize("n", SIZES)
def test_f32_to_f16_sizes(n):
    x = rng(n).standard_normal(n, dtype=np.float32) * 1000
    assert_same_bits(conversions.c_f32_to_f16(x, np.empty(n, np.uint16)),
                     conversions.np_f32_to_f16(x, np.empty(n, np.uint16)))
    # float16 out works as well as uint16
    assert_same_bits(conversions.c_f32_to_f16(x, np.empty(n, np.float16)).view(np.uint16),
                     x.astype(np.float16).view(np.uint16))


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
    a = conversions.c_dequant_u8_rows(q, scale, zero, np.empty(q.shape, np.float32))
    b = conversions.np_dequant_u8_rows(q, scale, zero, np.empty(q.shape, np.float32))
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


def row_params(*pairs):
    """scale and zero arrays, one value per row."""
    return np.array([s for s, _ in pairs], np.float32), np.array([z for _, z in pairs], np.float32)


@impls("quant_u8_rows")
@pytest.mark.parametrize("scale,zero", QUANT_PARAMS)
def test_quant_u8_rows_vs_reference(fn, scale, zero):
    x = quant_inputs(scale)[None]
    out = np.empty(x.shape, np.uint8)
    assert fn(x, *row_params((scale, zero)), out) is out
    want = ref_quant(x, scale, zero)
    bad = np.flatnonzero(out != want)
    assert bad.size == 0, f"x={x.flat[bad[0]]!r}: {out.flat[bad[0]]} != {want.flat[bad[0]]}"


@impls("quant_u8_rows")
def test_quant_u8_rows_each_row_has_its_own_scale_and_zero(fn):
    x = np.stack([quant_inputs(s)[:50_000] for s, _ in QUANT_PARAMS])
    scale, zero = row_params(*QUANT_PARAMS)
    out = fn(x, scale, zero, np.empty(x.shape, np.uint8))
    assert np.array_equal(out, ref_quant(x, scale[:, None], zero[:, None]))


def test_quant_u8_rows_numpy_fallback_formula():
    x = quant_inputs(0.0234)
    x = x[np.isfinite(x)]
    s, z = np.float32(0.0234), np.float32(128.0)
    with np.errstate(all="ignore"):
        want = np.clip(np.rint(x / s) + z, 0, 255).astype(np.uint8)
    got = conversions.np_quant_u8_rows(x[None], *row_params((0.0234, 128.0)), np.empty((1, x.size), np.uint8))
    assert np.array_equal(got[0], want)


@impls("quant_u8_rows")
def test_quant_u8_rows_nan_is_zero_point(fn):
    x = np.array([[np.nan, -np.nan, 1.0], [np.nan, -np.nan, 1.0]], np.float32)
    out = fn(x, *row_params((0.5, 100.0), (0.5, 99.7)), np.empty((2, 3), np.uint8))
    assert out.tolist() == [[100, 100, 102], [99, 99, 101]]


@needs_c
@pytest.mark.parametrize("n", SIZES)
def test_quant_u8_rows_c_vs_numpy(n):
    scale, zero = row_params(*QUANT_PARAMS)
    x = (rng(n).standard_normal((len(QUANT_PARAMS), n)) * 150 * scale[:, None]).astype(np.float32)
    a = conversions.c_quant_u8_rows(x, scale, zero, np.empty(x.shape, np.uint8))
    b = conversions.np_quant_u8_rows(x, scale, zero, np.empty(x.shape, np.uint8))
    assert np.array_equal(a, b)


def test_quant_dequant_round_trip():
    x = np.stack([np.linspace(-1, 1, 10001, dtype=np.float32), np.linspace(-30, 2, 10001, dtype=np.float32)])
    scale, zero = row_params((2 / 254, 127.0), (32 / 255, 239.0))
    q = conversions.quant_u8_rows(x, scale, zero, np.empty(x.shape, np.uint8))
    back = conversions.dequant_u8_rows(q, scale, zero, np.empty(x.shape, np.float32))
    assert (np.abs(back - x) <= scale[:, None] / 2 + 1e-6).all()


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
