"""A convolution's input band is built in place: the skip join, the uint8 skip's
expansion, GroupNorm and SiLU write straight into the padded band, with no band-sized
temporaries (on a Pi each one is fresh pages the kernel faults in and zeroes)."""

from __future__ import annotations

import tracemalloc

import numpy as np

from engine import ops
from engine.bands import Compact, Concat, Dense, Normalized, Upsampled


def randn(*shape):
    return np.random.default_rng(len(shape)).standard_normal(shape, dtype=np.float32)


def peak_traced_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_normalised_skip_join_fills_a_band_without_band_sized_temporaries():
    C, H, W = 192, 48, 64
    image = Normalized(Concat(Upsampled(Dense(randn(1, 128, H // 2, W // 2)), (H, W)), Compact(randn(1, 64, H, W), "uint8")),
                       randn(C), randn(C), 32, 1e-5, True)
    padded = np.zeros((C, H + 2, W + 2), dtype=np.float32)
    band = padded[:, 1:H + 1, 1:W + 1]
    peak = peak_traced_bytes(lambda: image.fill(0, 0, H, band))
    assert peak < band.nbytes / 4      # a few channels' worth at a time
    assert np.array_equal(band, image.rows(0, 0, H))


def test_a_conv_over_a_normalised_banded_image_allocates_little_beyond_its_output():
    image = Normalized(Concat(Dense(randn(1, 96, 64, 64)), Compact(randn(1, 96, 64, 64), "fp16")),
                       randn(192), randn(192), 32, 1e-5, True)
    w = randn(64, 192, 1, 1) * 0.1
    band_bytes = 1 << 20                                    # 3 bands of the 3 MB input
    out = np.zeros((1, 64, 64, 64), dtype=np.float32)
    peak = peak_traced_bytes(lambda: ops.conv2d(image, w, None, 1, band_bytes, out=out, threads=1))
    assert peak < 2 * band_bytes                            # the band's buffer and its GEMM result
    expected = w.reshape(64, 192) @ image.dense()[0].reshape(192, -1)
    assert np.allclose(out[0].reshape(64, -1), expected, rtol=1e-5, atol=1e-4)


def test_uint8_skips_keep_each_channel_to_half_its_own_step():
    # channels a million times apart in size: one scale for the tensor would flatten the small ones to 0
    x = randn(2, 8, 9, 13) * (10.0 ** np.arange(-3, 5, dtype=np.float32))[None, :, None, None]
    stored = Compact(x, "uint8")
    lo = np.minimum(x.min(axis=(0, 2, 3)), 0)
    hi = np.maximum(x.max(axis=(0, 2, 3)), 0)
    error = np.abs(stored.dense() - x).max(axis=(0, 2, 3))
    assert (error <= (hi - lo) / 255 * 0.5001).all()
    assert stored.nbytes == x.size                       # one byte a value; the scales are 2 x 8 floats


def test_uint8_skips_hold_no_more_than_their_bytes_and_a_band_while_stored():
    x = randn(2, 320, 64, 64)
    peak = peak_traced_bytes(lambda: Compact(x, "uint8"))
    assert peak < x.size + (1 << 20) + 64 * 1024         # the uint8 data, one 1 MB float32 band, the ranges


def test_a_uint8_activation_stores_each_picture_of_a_batch_as_it_stores_it_alone():
    quiet, loud = randn(1, 32, 8, 16), 40 * randn(1, 32, 8, 16)   # far apart ranges: one scale would blur `quiet`
    batch = Compact(np.concatenate([quiet, loud]), "uint8")
    for b, alone in enumerate((Compact(quiet, "uint8"), Compact(loud, "uint8"))):
        got, want = np.empty((32, 8, 16), np.float32), np.empty((32, 8, 16), np.float32)
        batch.fill(b, 0, 8, got)
        alone.fill(0, 0, 8, want)
        assert np.array_equal(got, want), b
