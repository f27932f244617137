"""The tile grid of tiled VAE decoding and its blend weights (no model needed)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import InputError
from engine.sdxl.tiles import Tiling

SDXL = Tiling()   # 32-latent tiles, 8-latent overlap
SCALE = 8


def test_sdxl_1024x1024_is_5x5_tiles_with_the_last_moved_back_to_the_edge():
    assert SDXL.origins(128) == [0, 24, 48, 72, 96]
    grid = SDXL.grid(128, 128)
    assert len(grid) == 25
    assert grid[:6] == [(0, 0), (0, 24), (0, 48), (0, 72), (0, 96), (24, 0)]     # raster order
    assert grid[-1] == (96, 96)


def test_512x512_has_9_tiles_like_onnxstream():
    assert SDXL.origins(64) == [0, 24, 32]
    assert len(SDXL.grid(64, 64)) == 9


def test_non_square_1344x768():
    # 1344x768 pixels: 96 latent rows, 168 latent columns.
    assert SDXL.origins(168) == [0, 24, 48, 72, 96, 120, 136]
    assert SDXL.origins(96) == [0, 24, 48, 64]
    grid = SDXL.grid(96, 168)
    assert len(grid) == 4 * 7
    assert (64, 136) in grid and (96, 0) not in grid


def test_40x33_sides_just_over_a_tile():
    assert SDXL.origins(40) == [0, 8]
    assert SDXL.origins(33) == [0, 1]
    assert SDXL.grid(40, 33) == [(0, 0), (0, 1), (8, 0), (8, 1)]


@pytest.mark.parametrize("n", [1, 20, 31, 32])
def test_a_side_of_at_most_one_tile_is_decoded_whole(n):
    (tile,) = SDXL.axis(n, SCALE)
    assert (tile.start, tile.length) == (0, n)
    assert np.array_equal(tile.weights, np.ones(n * SCALE, dtype=np.float32))


@pytest.mark.parametrize("n", [33, 40, 56, 60, 64, 96, 100, 128, 168, 200])
def test_tiles_cover_the_side_within_bounds_at_most_a_stride_apart(n):
    starts = SDXL.origins(n)
    assert starts[0] == 0 and starts[-1] + 32 == n
    assert all(0 < b - a <= 24 for a, b in zip(starts, starts[1:]))


def test_tile_size_and_overlap_are_options():
    assert Tiling(16, 4).origins(40) == [0, 12, 24]
    assert Tiling(32, 0).origins(96) == [0, 32, 64]
    assert Tiling(48, 16).origins(128) == [0, 32, 64, 80]


@pytest.mark.parametrize("size,overlap", [(0, 0), (32, 32), (32, 40), (32, -1), (32.0, 8), (32, True)])
def test_bad_tile_options_are_refused_with_a_message(size, overlap):
    with pytest.raises(InputError, match="tile"):
        Tiling(size, overlap)


@pytest.mark.parametrize("tiling", [SDXL, Tiling(16, 4), Tiling(32, 0)])
@pytest.mark.parametrize("n", [20, 33, 40, 60, 64, 96, 128, 168])
def test_blend_weights_sum_to_one_at_every_pixel(tiling, n):
    total = np.zeros(n * SCALE)
    for t in tiling.axis(n, SCALE):
        assert t.weights.shape == (t.length * SCALE,) and t.weights.dtype == np.float32
        assert (t.weights > 0).all()
        total[t.start * SCALE:(t.start + t.length) * SCALE] += t.weights
    np.testing.assert_allclose(total, 1.0, atol=1e-6)


def test_2d_weights_of_a_non_square_grid_sum_to_one():
    total = np.zeros((96 * SCALE, 168 * SCALE))
    for ty in SDXL.axis(96, SCALE):
        for tx in SDXL.axis(168, SCALE):
            total[ty.pixels, tx.pixels] += ty.weights[:, None] * tx.weights[None, :]
    np.testing.assert_allclose(total, 1.0, atol=1e-6)


def test_weights_ramp_linearly_across_each_overlap_on_both_sides_and_are_one_elsewhere():
    first, second, middle = SDXL.axis(128, SCALE)[:3]
    ramp = (np.arange(64) + 0.5) / 64          # the 8-latent overlap is 64 pixels
    # The image's own edge is not blended: the first tile starts at full weight.
    np.testing.assert_allclose(first.weights[:192], 1.0)
    np.testing.assert_allclose(first.weights[192:], ramp[::-1], rtol=1e-6)
    np.testing.assert_allclose(second.weights[:64], ramp, rtol=1e-6)             # rises on its left/top...
    np.testing.assert_allclose(second.weights[64:192], 1.0)
    np.testing.assert_allclose(second.weights[192:], ramp[::-1], rtol=1e-6)      # ...and falls on its right/bottom
    np.testing.assert_allclose(middle.weights, second.weights)


def test_the_moved_back_tile_blends_across_its_whole_larger_overlap():
    a, b = SDXL.axis(40, SCALE)                # tiles at 0 and 8: they share 24 latents
    ramp = (np.arange(192) + 0.5) / 192
    np.testing.assert_allclose(a.weights[64:], ramp[::-1], rtol=1e-6)
    np.testing.assert_allclose(b.weights[:192], ramp, rtol=1e-6)
    np.testing.assert_allclose(b.weights[192:], 1.0)


def test_each_tile_knows_its_latent_and_pixel_ranges():
    second = SDXL.axis(128, SCALE)[1]
    assert (second.latents, second.pixels) == (slice(24, 56), slice(192, 448))


def test_borders_are_where_tiles_start_or_end_inside_the_image():
    assert SDXL.borders(64, SCALE).tolist() == [192, 256, 448]
    assert SDXL.borders(32, SCALE).tolist() == []
