"""engine.kernels.winograd: every C kernel against its numpy twin (same bits) and both against
the transforms' matrices in float64."""

import numpy as np
import pytest

from engine.kernels import winograd
from kernel_testing import assert_same_bits, impls, needs_c, rng


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
    winograd.c_wino_weights(w, ua, 1, 7)
    winograd.np_wino_weights(w, ub, 1, 7)
    assert_same_bits(ua[:, 1:], ub[:, 1:])
    p = rng.standard_normal((5, 9, 2 * 70 + 3)).astype(np.float32)
    va, vb = np.empty((16, 5, 3, 70), np.float32), np.empty((16, 5, 3, 70), np.float32)
    winograd.c_wino_input(p, va, 0, 5)
    winograd.np_wino_input(p, vb, 0, 5)
    assert_same_bits(va, vb)
    ya, yb = np.empty((5, 6, 140), np.float32), np.empty((5, 6, 140), np.float32)
    winograd.c_wino_output(va, ya, 0, 5)
    winograd.np_wino_output(vb, yb, 0, 5)
    assert_same_bits(ya, yb)


@impls("wino_output")
def test_wino_kernels_reject_wrong_shapes_and_ranges(fn):
    with pytest.raises(ValueError, match="wino_output"):
        fn(np.zeros((16, 2, 3, 4), np.float32), np.zeros((2, 6, 7), np.float32), 0, 2)
    with pytest.raises(ValueError, match="channel range"):
        fn(np.zeros((16, 2, 3, 4), np.float32), np.zeros((2, 6, 8), np.float32), 1, 3)
