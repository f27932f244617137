"""engine.kernels.norms: every C kernel against its numpy twin (same bits) and both against
float64 arithmetic."""

import numpy as np
import pytest

from engine.kernels import norms
from kernel_testing import assert_same_bits, impls, needs_c, rng


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
        assert_same_bits(norms.c_layer_norm(x, gamma, beta, eps, np.empty_like(x)),
                         norms.np_layer_norm(x, gamma, beta, eps, np.empty_like(x)))


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
    c = norms.c_row_moments(x, np.empty(shape[0]), np.empty(shape[0]))
    n = norms.np_row_moments(x, np.empty(shape[0]), np.empty(shape[0]))
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
