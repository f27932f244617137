"""Each op against torch on random data (per-op PCC and max error)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from diffusers.models.embeddings import get_timestep_embedding

from conftest import pcc
from engine import blas, kernels, ops, parallel
from engine.bands import Compact, Concat, Dense, Normalized, Upsampled, nearest_index

rng = np.random.default_rng(1)


def randn(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def close(got: np.ndarray, expected: torch.Tensor, tol: float = 1e-5) -> None:
    e = expected.numpy()
    assert got.shape == e.shape
    assert pcc(got, e) >= 0.999999
    assert np.abs(got - e).max() <= tol * max(1.0, np.abs(e).max())


@pytest.fixture(params=["winograd", "shifted-gemms", "im2col"])
def conv_path(request, monkeypatch):
    """3x3 stride-1 convs run by Winograd where a band holds enough tiles, else as nine
    accumulated GEMMs when cblas_sgemm is reachable, else through the patch matrix:
    all three must be right."""
    if request.param == "shifted-gemms" and not blas.HAS_GEMM:
        pytest.skip("no cblas_sgemm in numpy's BLAS here")
    monkeypatch.setattr(ops, "WINO_MIN_TILES", 0 if request.param == "winograd" else 1 << 60)
    monkeypatch.setattr(blas, "HAS_GEMM", request.param == "shifted-gemms")
    return request.param


@pytest.mark.parametrize("k,stride", [(3, 1), (3, 2), (1, 1)])
@pytest.mark.parametrize("band_bytes", [1, 50_000, 64 << 20])   # one row per band .. whole image
@pytest.mark.parametrize("h,w", [(9, 14), (16, 16)])
def test_conv2d_matches_torch_for_every_band_size(k, stride, band_bytes, h, w, conv_path):
    x = randn(2, 32, h, w)
    wt = randn(24, 32, k, k, scale=0.1)
    b = randn(24)
    got = ops.conv2d(Dense(x), wt, b, stride, band_bytes)
    close(got, F.conv2d(torch.from_numpy(x), torch.from_numpy(wt), torch.from_numpy(b), stride, k // 2))


@pytest.mark.parametrize("band_bytes,weight_transforms", [(4096, 64), (6144, 6)])
def test_winograd_repeats_whichever_transform_is_cheaper_and_stays_exact(band_bytes, weight_transforms, monkeypatch):
    """With several bands of tiles and several pieces of output channels, either the
    weights are transformed again for every band (8 bands x 8 pieces) or the input for
    every piece (6 pieces, weights once each): both give the convolution."""
    monkeypatch.setattr(ops, "WINO_MIN_TILES", 0)
    monkeypatch.setattr(ops, "WINO_SPLIT_TILES", 0)
    calls = []
    transform = kernels.wino_weights
    monkeypatch.setattr(kernels, "wino_weights", lambda *a: calls.append(a) or transform(*a))
    x, wt, b = randn(1, 8, 16, 16), randn(64, 8, 3, 3, scale=0.1), randn(64)
    got = ops.conv2d(Dense(x), wt, b, 1, band_bytes, threads=1)
    assert len(calls) == weight_transforms
    close(got, F.conv2d(torch.from_numpy(x), torch.from_numpy(wt), torch.from_numpy(b), 1, 1))


def test_small_bands_transform_the_input_in_channel_blocks_and_stay_exact(monkeypatch):
    """A band too small for WINO_SPLIT_TILES tiles of all channels keeps its tiles and
    transforms (and multiplies) a block of input channels at a time instead."""
    if not blas.HAS_GEMM:
        pytest.skip("no cblas_sgemm in numpy's BLAS here")
    monkeypatch.setattr(ops, "WINO_MIN_TILES", 0)
    monkeypatch.setattr(ops, "WINO_SPLIT_TILES", 32)
    blocks = []
    transform = kernels.wino_input
    monkeypatch.setattr(kernels, "wino_input", lambda p, v, c0, c1: blocks.append(p.shape[0]) or transform(p, v, c0, c1))
    x, wt, b = randn(1, 48, 16, 16), randn(24, 48, 3, 3, scale=0.1), randn(24)
    band_bytes = 40_000   # the padded input rows of 32 tiles; their transform for 19 of 48 channels: 3 blocks
    assert ops._winograd_plan(48, 16, 16, band_bytes) == (4, 16)
    got = ops.conv2d(Dense(x), wt, b, 1, band_bytes, threads=1)
    assert set(blocks) == {16}
    close(got, F.conv2d(torch.from_numpy(x), torch.from_numpy(wt), torch.from_numpy(b), 1, 1))


def test_bands_too_small_for_all_channels_rows_fill_each_channel_block_and_stay_exact(monkeypatch):
    """Where even the padded input rows of all channels exceed band_bytes, each block of
    channels is filled on its own (here straddling the upsampled part and the skip), for
    every piece of output channels: so each piece's weights are transformed just once,
    not once per band."""
    if not blas.HAS_GEMM:
        pytest.skip("no cblas_sgemm in numpy's BLAS here")
    monkeypatch.setattr(ops, "WINO_MIN_TILES", 0)
    monkeypatch.setattr(ops, "WINO_SPLIT_TILES", 32)
    calls = []
    transform = kernels.wino_weights
    monkeypatch.setattr(kernels, "wino_weights", lambda *a: calls.append(a) or transform(*a))
    a, s = randn(1, 20, 8, 8), randn(1, 28, 16, 16, scale=2.0)
    gamma, beta = randn(48), randn(48)
    image = Normalized(Concat(Upsampled(Dense(a), (16, 16)), Compact(s, "uint8")), gamma, beta, groups=8, eps=1e-5,
                       silu=True)
    wt, b = randn(24, 48, 3, 3, scale=0.1), randn(24)
    band_bytes = 20_000   # < the 34,560 bytes of 48 channels' padded rows for 32 tiles
    ty, block = ops._winograd_plan(48, 16, 16, band_bytes)
    assert ty == 4 and block < 48 and not ops._winograd_fills_whole_band(48, ty, 16, band_bytes)
    got = ops.conv2d(image, wt, b, 1, band_bytes, threads=1)
    assert len(calls) == 3            # 3 pieces of 8 output channels, 2 bands of 4 tile rows
    ref_in = torch.cat([F.interpolate(torch.from_numpy(a), size=(16, 16), mode="nearest"),
                        torch.from_numpy(Compact(s, "uint8").dense())], 1)
    ref_in = F.silu(F.group_norm(ref_in, 8, torch.from_numpy(gamma), torch.from_numpy(beta), 1e-5))
    close(got, F.conv2d(ref_in, torch.from_numpy(wt), torch.from_numpy(b), 1, 1), tol=1e-4)


@pytest.mark.parametrize("c0,c1", [(0, 48), (0, 5), (17, 20), (19, 31), (40, 48)])
def test_banded_images_fill_any_range_of_channels(c0, c1):
    a, s = randn(2, 20, 4, 5), randn(2, 28, 8, 10)
    image = Normalized(Concat(Upsampled(Dense(a), (8, 10)), Compact(s, "fp16")), randn(48), randn(48), groups=8,
                       eps=1e-5, silu=True)
    whole = image.dense()
    out = np.empty((c1 - c0, 3, 10), dtype=np.float32)
    image.fill(1, 2, 5, out, c0)
    assert np.array_equal(out, whole[1, c0:c1, 2:5])
    assert np.array_equal(image.rows(1, 2, 5, c0, c1), whole[1, c0:c1, 2:5])


def test_conv2d_accumulates_into_out(conv_path):
    x = randn(1, 8, 6, 7)
    wt = randn(5, 8, 3, 3)
    b = randn(5)
    base = randn(1, 5, 6, 7)
    got = ops.conv2d(Dense(x), wt, b, 1, 2000, out=base.copy())
    close(got, torch.from_numpy(base) + F.conv2d(torch.from_numpy(x), torch.from_numpy(wt), torch.from_numpy(b), 1, 1))


def test_conv2d_of_a_normalised_concatenation_in_bands_matches_torch(conv_path):
    a, s = randn(2, 24, 11, 13), randn(2, 8, 11, 13, scale=2.0)
    gamma, beta = randn(32), randn(32)
    image = Normalized(Concat(Dense(a), Compact(s, "fp16")), gamma, beta, groups=8, eps=1e-5, silu=True)
    wt, b = randn(16, 32, 3, 3, scale=0.1), randn(16)
    ref_in = F.silu(F.group_norm(torch.cat([torch.from_numpy(a), torch.from_numpy(Compact(s, "fp16").dense())], 1),
                                 8, torch.from_numpy(gamma), torch.from_numpy(beta), 1e-5))
    close(ops.conv2d(image, wt, b, 1, 4 * 32 * 15 * 3),
          F.conv2d(ref_in, torch.from_numpy(wt), torch.from_numpy(b), 1, 1), tol=1e-4)


@pytest.mark.parametrize("once_bytes,times", [(16 << 20, (1, 1)), (0, (4, 99))])   # 4 bands of outputs
def test_a_computed_image_is_computed_once_where_the_weight_is_read_in_bands(once_bytes, times, conv_path, tmp_path,
                                                                             monkeypatch):
    from safetensors.numpy import save_file

    from engine.weights import TensorStore, WeightRows

    a, s = randn(1, 24, 11, 13), randn(1, 8, 11, 13, scale=2.0)
    gamma, beta = randn(32), randn(32)
    wt, b = randn(16, 32, 3, 3, scale=0.1), randn(16)
    save_file({"w": wt}, tmp_path / "w.safetensors")
    banded = WeightRows(TensorStore([tmp_path / "w.safetensors"]), "w", 4 * 4 * 32 * 9)
    rows_filled = []

    class Counted(Normalized):
        def fill(self, b, y0, y1, out, c0=0):
            rows_filled.append((y1 - y0) * out.shape[0])
            super().fill(b, y0, y1, out, c0)

    monkeypatch.setattr(ops, "ONCE_BYTES", once_bytes)
    image = Counted(Concat(Dense(a), Compact(s, "uint8")), gamma, beta, groups=8, eps=1e-5, silu=True)
    got = ops.conv2d(image, banded, b, 1, 4 * 32 * 15 * 3)
    # every channel's rows once, or (bigger than ONCE_BYTES) at least once per band of the weight's outputs
    assert times[0] <= sum(rows_filled) / (32 * 11) <= times[1]
    ref_in = F.silu(F.group_norm(torch.cat([torch.from_numpy(a), torch.from_numpy(Compact(s, "uint8").dense())], 1),
                                 8, torch.from_numpy(gamma), torch.from_numpy(beta), 1e-5))
    close(got, F.conv2d(ref_in, torch.from_numpy(wt), torch.from_numpy(b), 1, 1), tol=1e-4)


def test_groupnorm_silu_banded_image_matches_torch_even_with_a_large_mean():
    x = randn(2, 64, 10, 12) + 50.0          # mean >> std: naive E[x^2]-E[x]^2 would lose it
    gamma, beta = randn(64), randn(64)
    image = Normalized(Dense(x), gamma, beta, groups=32, eps=1e-5, silu=True)
    expected = F.silu(F.group_norm(torch.from_numpy(x), 32, torch.from_numpy(gamma), torch.from_numpy(beta), 1e-5))
    close(image.dense(), expected, tol=1e-4)
    close(image.rows(1, 3, 7), expected[1, :, 3:7], tol=1e-4)


def test_groupnorm_over_a_concatenation_whose_groups_straddle_the_parts():
    a, b = randn(1, 40, 8, 8), randn(1, 24, 8, 8, scale=3.0)    # 64 channels, 32 groups of 2; ...
    gamma, beta = randn(64), randn(64)
    image = Normalized(Concat(Dense(a), Dense(b)), gamma, beta, groups=16, eps=1e-6, silu=False)  # groups of 4
    cat = torch.cat([torch.from_numpy(a), torch.from_numpy(b)], 1)
    close(image.dense(), F.group_norm(cat, 16, torch.from_numpy(gamma), torch.from_numpy(beta), 1e-6), tol=1e-4)


@pytest.mark.parametrize("size", [(16, 20), (15, 9), (7, 3)])
def test_upsampled_banded_image_matches_torch_nearest(size):
    x = randn(2, 3, (size[0] + 1) // 2, (size[1] + 1) // 2)
    got = Upsampled(Dense(x), size).dense()
    expected = F.interpolate(torch.from_numpy(x), size=size, mode="nearest")
    assert np.array_equal(got, expected.numpy())
    assert np.array_equal(nearest_index(5, 10), np.repeat(np.arange(5), 2))


def test_compact_fp16_banded_image_is_the_fp16_rounding():
    x = randn(2, 5, 7, 9)
    got = Compact(x, "fp16").dense()
    assert np.array_equal(got, x.astype(np.float16).astype(np.float32))
    assert Compact(x, "fp16").nbytes == x.nbytes // 2


def test_compact_uint8_banded_image_keeps_outliers_and_zero_exact():
    x = randn(1, 16, 32, 32)
    x[0, 0, 0, :4] = [40.0, -40.0, 0.0, 0.0]  # outliers in channel 0 only
    c = Compact(x, "uint8")
    got = c.dense()
    assert c.nbytes == x.size
    assert got[0, 0, 0, 2] == 0.0
    [(scale, _)] = c.ranges                           # one picture: its per-channel steps
    assert (np.abs(got - x).max(axis=(0, 2, 3)) <= scale / 2 * 1.001).all()   # each channel within its own step
    assert scale[0] > 5 * scale[1:].max()              # the outliers widen their own channel's step only


def test_layer_norm():
    x, g, b = randn(3, 7, 48, scale=2.0), randn(48), randn(48)
    close(ops.layer_norm(x, g, b), F.layer_norm(torch.from_numpy(x), (48,), torch.from_numpy(g), torch.from_numpy(b)))


def test_linear_and_silu():
    x, w, b = randn(5, 33), randn(17, 33), randn(17)
    close(ops.linear(x, w, b), F.linear(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)))
    close(ops.silu(x), F.silu(torch.from_numpy(x)))


def test_geglu_and_gelu_match_torch_exact_erf():
    p = randn(6, 64, scale=3.0)
    v, g = torch.from_numpy(p).chunk(2, dim=-1)
    close(ops.geglu(p), v * F.gelu(g), tol=2e-6)
    close(ops.gelu(p), F.gelu(torch.from_numpy(p)), tol=2e-6)


@pytest.fixture(params=["fused", "bands"])
def attention_path(request, monkeypatch):
    """Heads whose channels are a multiple of 16 run in the fused C kernel when it is
    built; others, and every head without it, in bands of two BLAS GEMMs: both must be
    right."""
    if request.param == "fused" and not kernels.fused_attention(16):
        pytest.skip("the fused attention kernel is not built here")
    if request.param == "bands":
        monkeypatch.setattr(kernels, "fused_attention", lambda d: False)
    return request.param


@pytest.mark.parametrize("slices", [1, 3, 16, 1000])
@pytest.mark.parametrize("lk", [77, 154, 300])
def test_sliced_attention_matches_torch_sdpa(slices, lk, monkeypatch, attention_path):
    monkeypatch.setattr(ops, "MIN_SCORE_BYTES", 4)   # let these small heads be cut as finely as asked
    heads, d, L = 4, 16, 50
    q, k, v = randn(L, heads * d), randn(lk, heads * d), randn(lk, heads * d)
    split = lambda t: torch.from_numpy(t).reshape(-1, heads, d).transpose(0, 1)  # noqa: E731
    expected = F.scaled_dot_product_attention(split(q), split(k), split(v)).transpose(0, 1).reshape(L, heads * d)
    close(ops.attention(q.copy(), k, v, heads, slices), expected)


def sdpa(q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int) -> torch.Tensor:
    split = lambda t: torch.from_numpy(t).reshape(t.shape[0], heads, -1).transpose(0, 1)  # noqa: E731
    return F.scaled_dot_product_attention(split(q), split(k), split(v)).transpose(0, 1).reshape(q.shape[0], -1)


CPU_VARIANTS = {1: "generic", 2: "avx2", 3: "avx512"}


@pytest.mark.parametrize("variant", sorted(CPU_VARIANTS))
@pytest.mark.parametrize("L,lk,heads,d", [
    (4096, 4096, 1, 64),    # SDXL's 128x128 level: whole 64-row blocks and 32-key panels
    (1000, 1024, 2, 64),    # a last block of 40 rows
    (70, 77, 3, 64),        # a prompt: a last key panel of 13, a last block of 6 rows
    (33, 300, 2, 80),       # channels left over from whole value tiles
    (5, 1, 2, 16),          # one key
    (1, 17, 1, 512),        # one query row; the VAE's one wide head
])
def test_fused_attention_matches_torch_sdpa_on_every_cpu_build(variant, L, lk, heads, d):
    if kernels.c_attention_head is None:
        pytest.skip("C kernels not built")
    q, k, v = randn(L, heads * d), randn(lk, heads * d), randn(lk, heads * d)
    out = np.empty_like(q)
    scaled = q * np.float32(1 / np.sqrt(d))
    work = np.empty(kernels.attention_work(lk, d), np.float32)
    for h in range(heads):
        cols = slice(h * d, (h + 1) * d)
        if not kernels.c_attention_head(scaled[:, cols], k[:, cols], v[:, cols], out[:, cols], work, variant):
            assert variant != 1, "the generic build runs wherever the kernel is built"
            pytest.skip(f"this CPU cannot run the {CPU_VARIANTS[variant]} build")
    close(out, sdpa(q, k, v, heads))


@pytest.mark.parametrize("L,lk,heads,d", [(300, 4096, 1, 64), (1024, 1024, 2, 64), (70, 77, 4, 32)])
def test_fused_attention_matches_the_blas_band_path_to_float32_rounding(L, lk, heads, d, monkeypatch):
    if not kernels.fused_attention(d):
        pytest.skip("the fused attention kernel is not built here")
    q, k, v = randn(L, heads * d), randn(lk, heads * d), randn(lk, heads * d)
    fused = ops.attention(q.copy(), k, v, heads, 4)
    monkeypatch.setattr(kernels, "fused_attention", lambda d: False)
    bands = ops.attention(q.copy(), k, v, heads, 4)
    # the sums run in another order (FMA, 32-key panels) than BLAS's: a few float32 ulps apart
    assert np.abs(fused - bands).max() <= 2e-6 * max(1.0, np.abs(bands).max())


def test_fused_attention_flushes_far_scores_and_keeps_a_nan_to_its_row():
    if not kernels.fused_attention(16):
        pytest.skip("the fused attention kernel is not built here")
    heads, d = 2, 16
    q, k, v = randn(40, heads * d, scale=4.0), randn(90, heads * d, scale=4.0), randn(90, heads * d)
    close(ops.attention(q.copy(), k, v, heads, 4), sdpa(q, k, v, heads))   # scores spread far past exp's flush
    q[7, 3] = np.nan
    got = ops.attention(q.copy(), k, v, heads, 4)
    assert np.isnan(got[7, :d]).all()
    assert not np.isnan(np.delete(got, 7, axis=0)).any() and not np.isnan(got[7, d:]).any()


def test_fused_attention_takes_heads_of_16_channel_multiples_only():
    if not kernels.fused_attention(16):
        pytest.skip("the fused attention kernel is not built here")
    assert [d for d in range(1, 129) if kernels.fused_attention(d)] == list(range(16, 129, 16))
    q = randn(4, 8)
    assert not kernels.c_attention_head(q, q, q, np.empty_like(q), np.empty(kernels.attention_work(4, 8), np.float32))


@pytest.mark.parametrize("bad,message", [
    (lambda q, k, v, o, w: (q.astype(np.float64), k, v, o, w), "q must be a 2-D float32 array"),
    (lambda q, k, v, o, w: (q, k[:, :8], v, o, w), "k and v must be (lk, d)"),
    (lambda q, k, v, o, w: (q, k, v[:5], o, w), "k and v must be (lk, d)"),
    (lambda q, k, v, o, w: (q, k, v, o[:, ::2], w), "unit column stride"),
    (lambda q, k, v, o, w: (q, k, v, q, w), "out overlaps an input"),
    (lambda q, k, v, o, w: (q, k, v, o, w[:10]), "needs attention_work"),
])
def test_fused_attention_refuses_arrays_it_cannot_take(bad, message):
    if kernels.c_attention_head is None:
        pytest.skip("C kernels not built")
    q, k, v = randn(6, 32), randn(9, 32), randn(9, 32)
    with pytest.raises(ValueError, match=re.escape(message)):
        kernels.c_attention_head(*bad(q, k, v, np.empty((6, 64), np.float32)[:, :32],
                                      np.empty(kernels.attention_work(9, 32), np.float32)))


@pytest.mark.parametrize("dim,flip,shift", [(320, True, 0.0), (8, True, 0.0), (256, False, 1.0), (7, True, 0.0)])
def test_timestep_embedding_matches_diffusers(dim, flip, shift):
    t = np.array([0.0, 1.5, 981.0, 1024.0], dtype=np.float32)
    got = ops.timestep_embedding(t, dim, flip, shift)
    expected = get_timestep_embedding(torch.from_numpy(t), dim, flip, shift)
    # sin/cos of t*freq: one float32 ulp of an argument near 1000 is 6e-5.
    close(got, expected, tol=1.3e-4)
    close(got[:2], expected[:2], tol=2e-6)


def test_attention_heads_on_worker_threads_match_one_thread(attention_path):
    heads, d, L = 6, 16, 70
    q, k, v = randn(L, heads * d), randn(L, heads * d), randn(L, heads * d)
    one = ops.attention(q.copy(), k, v, heads, 3, threads=1)
    for threads in (2, 4):
        assert np.allclose(ops.attention(q.copy(), k, v, heads, 3, threads=threads), one, rtol=1e-5, atol=1e-6)


def test_attention_takes_inputs_with_strided_columns(attention_path):
    heads, d, L = 2, 16, 40
    q, k, v = randn(L, heads * d), randn(30, heads * d), randn(30, heads * d)
    expected = ops.attention(q.copy(), k, v, heads, 4)
    got = ops.attention(np.asfortranarray(q), np.asfortranarray(k), np.asfortranarray(v), heads, 4)
    assert np.allclose(got, expected, rtol=1e-6, atol=1e-7)


def test_attention_bands_hold_at_least_min_score_bytes(monkeypatch):
    bands = []
    monkeypatch.setattr(kernels, "fused_attention", lambda d: False)
    monkeypatch.setattr(ops, "_attention_heads", lambda q, k, v, out, d, band, heads: bands.append(band))
    assert ops.MIN_SCORE_BYTES == 4 << 20
    q, kv = randn(2048, 128), randn(2048, 128)
    ops.attention(q, kv, kv, heads=2, slices=16, threads=1)
    assert bands == [(4 << 20) // (4 * 2048)]            # 512 rows, not 128
    ops.attention(randn(1024, 128), randn(1024, 128), randn(1024, 128), heads=2, slices=4, threads=1)
    assert bands[-1] == 1024                              # a 1024-token head is one band
    ops.attention(randn(4096, 128), randn(4096, 128), randn(4096, 128), heads=2, slices=16, threads=1)
    assert bands[-1] == 256                               # 16 slices of 4096 rows already hold 4 MB
    ops.attention(randn(300, 128), randn(77, 128), randn(77, 128), heads=2, slices=16, threads=1)
    assert bands[-1] == 300                               # a short prompt's scores: one band


@pytest.mark.parametrize("threads", [2, 3, 7])
def test_elementwise_ops_split_over_threads_give_the_same_bits_as_one_thread(threads, monkeypatch, conv_path):
    monkeypatch.setattr(parallel, "PARALLEL_MIN_ELEMENTS", 64)   # split even these small arrays
    x = randn(2, 12, 9, 11)
    image = Normalized(Concat(Dense(x[:, :8]), Compact(x[:, 8:], "fp16")), randn(12), randn(12), 4, 1e-5, True)
    wt = randn(10, 12, 3, 3, scale=0.1)
    for k, stride in ((3, 1), (3, 2), (1, 1)):
        w = wt[:, :, :k, :k]
        one = ops.conv2d(image, w, None, stride, 3000, threads=1)
        assert np.array_equal(ops.conv2d(image, w, None, stride, 3000, threads=threads), one)
    t = randn(37, 48)
    g, b = randn(48), randn(48)
    assert np.array_equal(ops.layer_norm(t, g, b, threads=threads), ops.layer_norm(t, g, b, threads=1))
    p = randn(37, 64)
    assert np.array_equal(ops.geglu(p, threads=threads), ops.geglu(p, threads=1))
