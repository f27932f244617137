"""engine.kernels.activations: every C kernel against its numpy twin (same bits) and both against
an independent reference (float64 arithmetic, math.erf)."""

import math

import numpy as np
import pytest

from engine.kernels import activations
from kernel_testing import SIZES, assert_same_bits, assert_same_f32, impls, needs_c, random_f32, rng


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
    a = activations.c_gelu_erf(x, np.empty_like(x))
    b = activations.np_gelu_erf(x, np.empty_like(x))
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
    gelu = getattr(activations, fn.__name__.replace("geglu", "gelu_erf"))
    assert_same_bits(out, p[..., :d] * gelu(np.ascontiguousarray(gate), np.empty(gate.shape, np.float32)))


@needs_c
@pytest.mark.parametrize("shape", GEGLU_SHAPES + [(64, 2 * 5120 + 2)])
def test_geglu_c_vs_numpy_bits(shape):
    p = geglu_input(shape, 3 + sum(shape))
    out_shape = shape[:-1] + (shape[-1] // 2,)
    a = activations.c_geglu(p, np.empty(out_shape, np.float32))
    assert_same_f32(a, activations.np_geglu(p, np.empty(out_shape, np.float32)), nan_sign=False)
    bias = (rng(shape[-1]).standard_normal(shape[-1]) * 2).astype(np.float32)
    a = activations.c_geglu(p, np.empty(out_shape, np.float32), bias)
    assert_same_f32(a, activations.np_geglu(p, np.empty(out_shape, np.float32), bias), nan_sign=False)


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
    activations.c_softmax_rows(a, sa)
    activations.np_softmax_rows(b, sb)
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
