"""The streamed VAE decoder against diffusers' AutoencoderKL on the same random weights,
and what tiled decoding does: one tile at a time, blended without seams."""

from __future__ import annotations

import threading
import tracemalloc

import numpy as np
import pytest
import torch

from conftest import pcc
from engine.errors import Cancelled
from engine.sdxl import VAEDecoder
from engine.sdxl.tiles import Tiling, seam_ratio
from tiny_models import VAE_CONFIGS, TinyVAE, copy_as_fp32, copy_with_old_attention_names, smooth_latents

SCALE = 8


@pytest.fixture(scope="module")
def tiny_vaes(tmp_path_factory) -> dict[str, TinyVAE]:
    root = tmp_path_factory.mktemp("vaes")
    return {name: TinyVAE(name, root / name) for name in VAE_CONFIGS}


@pytest.fixture(scope="module")
def tiny(tiny_vaes) -> TinyVAE:
    return tiny_vaes["tiny"]


# -- untiled: the reference path -------------------------------------------------


@pytest.mark.parametrize("name,batch,h,w", [("tiny", 1, 16, 16), ("tiny", 2, 12, 20), ("varied", 1, 12, 20)])
def test_untiled_decode_matches_diffusers(tiny_vaes, name, batch, h, w):
    model = tiny_vaes[name]
    z = model.latents(batch, h, w)
    with VAEDecoder.load(model.folder) as vae:
        got = vae.decode(z, tiled=False)
    expected = model.reference(z)
    assert got.shape == expected.shape == (batch, 3, h * SCALE, w * SCALE)
    assert got.dtype == np.float32
    assert pcc(got, expected) >= 0.9999


@pytest.mark.parametrize("preset", ["rpi", "rpi-lowmem"])
def test_pi_presets_match_diffusers_with_banded_weights_and_sliced_attention(tiny, preset):
    z = tiny.latents(1, 12, 20, seed=2)
    # Weights over 32 KB are read a band of output channels at a time in rpi-lowmem.
    overrides = {"weight_chunk_bytes": 32 << 10} if preset == "rpi-lowmem" else {}
    with VAEDecoder.load(tiny.folder, preset=preset, **overrides) as vae:
        got = vae.decode(z, tiled=False)
    assert pcc(got, tiny.reference(z)) >= 0.9999


def test_old_attention_names_decode_the_same(tiny, tmp_path):
    old = copy_with_old_attention_names(tiny.folder, tmp_path / "vae-old-names")
    z = tiny.latents(1, 8, 12, seed=3)
    with VAEDecoder.load(tiny.folder) as vae, VAEDecoder.load(old) as legacy:
        assert legacy.attention_names["q"] == "decoder.mid_block.attentions.0.query"
        np.testing.assert_array_equal(legacy.decode(z, tiled=False), vae.decode(z, tiled=False))


def test_fp32_weights_decode_like_diffusers(tiny, tmp_path):
    folder = copy_as_fp32(tiny.ref, tmp_path / "vae-fp32")
    z = tiny.latents(1, 8, 12, seed=4)
    with VAEDecoder.load(folder) as vae:
        assert pcc(vae.decode(z, tiled=False), tiny.reference(z)) >= 0.9999


def test_scaling_factor_comes_from_config(tiny):
    with VAEDecoder.load(tiny.folder) as vae:
        assert vae.scaling_factor == pytest.approx(0.13025)


# -- blocks, against diffusers' own inputs and outputs ------------------------------


@pytest.fixture(scope="module")
def captured(tiny):
    """Inputs and outputs of a few decoder modules, recorded with forward hooks."""
    dec = tiny.ref.decoder
    modules = {"attention": dec.mid_block.attentions[0], "resnet_shortcut": dec.up_blocks[2].resnets[0],
               "resnet": dec.up_blocks[0].resnets[1], "upsampler": dec.up_blocks[1].upsamplers[0]}
    seen = {}
    handles = [m.register_forward_hook(lambda mod, args, out, key=key: seen.__setitem__(key, (args[0], out)))
               for key, m in modules.items()]
    try:
        tiny.reference(tiny.latents(1, 8, 8, seed=5))
    finally:
        for h in handles:
            h.remove()
    with VAEDecoder.load(tiny.folder) as vae:
        yield vae, {k: (a.numpy(), o.numpy()) for k, (a, o) in seen.items()}


def test_mid_attention_block(captured):
    vae, seen = captured
    x, expected = seen["attention"]
    assert pcc(vae.attention_block(x), expected) >= 0.99999


@pytest.mark.parametrize("key,name", [("resnet_shortcut", "decoder.up_blocks.2.resnets.0"),
                                      ("resnet", "decoder.up_blocks.0.resnets.1")])
def test_resnet_block(captured, key, name):
    vae, seen = captured
    x, expected = seen[key]
    assert pcc(vae.resnet(name, x), expected) >= 0.99999


def test_upsampler(captured):
    vae, seen = captured
    x, expected = seen["upsampler"]
    got = vae.upsample("decoder.up_blocks.1.upsamplers.0.conv", x)
    assert got.shape == expected.shape
    assert pcc(got, expected) >= 0.99999


# -- tiled decoding ------------------------------------------------------------------


@pytest.fixture(scope="module")
def smooth(tiny):
    """A smooth 56x56 latent (2x2 SDXL-size tiles) decoded tiled, and each of its tiles alone."""
    z = smooth_latents(56, 56, seed=1)
    with VAEDecoder.load(tiny.folder) as vae:
        blended = vae.decode(z, tiled=True)[0]
        tiles = {(y, x): vae.decode(z[:, :, y:y + 32, x:x + 32], tiled=True)[0] for y, x in vae.tiling.grid(56, 56)}
    return z, blended, tiles


def test_a_single_32x32_tile_matches_diffusers_decoding_that_tile(tiny, smooth):
    z, _, tiles = smooth
    assert list(tiles) == [(0, 0), (0, 24), (24, 0), (24, 24)]
    assert pcc(tiles[(24, 24)], tiny.reference(z[:, :, 24:56, 24:56])[0]) >= 0.9999


def test_tiled_output_is_the_tiles_weighted_by_their_ramps(smooth):
    _, blended, tiles = smooth
    expected = np.zeros_like(blended)
    axis = Tiling().axis(56, SCALE)
    for ty in axis:
        for tx in axis:
            expected[:, ty.pixels, tx.pixels] += tiles[(ty.start, tx.start)] * ty.weights[:, None] * tx.weights[None, :]
    np.testing.assert_allclose(blended, expected, atol=1e-5)
    # Where no other tile reaches, the picture is the tile itself.
    np.testing.assert_array_equal(blended[:, :192, :192], tiles[(0, 0)][:, :192, :192])


def test_no_seam_shows_where_tiles_are_blended(smooth):
    _, blended, _ = smooth
    assert seam_ratio(blended, Tiling(), SCALE) <= 1.1


def test_the_same_tiles_pasted_without_blending_show_seams(smooth):
    """The seam test has teeth: OnnxStream's order (raster, later tiles over earlier ones) without the ramps."""
    _, blended, tiles = smooth
    pasted = np.zeros_like(blended)
    for (y, x), tile in tiles.items():
        pasted[:, y * SCALE:(y + 32) * SCALE, x * SCALE:(x + 32) * SCALE] = tile
    assert seam_ratio(pasted, Tiling(), SCALE) > 1.1


def test_batch_items_are_decoded_tile_by_tile_each_as_alone(tiny):
    z = tiny.latents(2, 12, 20, seed=6)
    with VAEDecoder.load(tiny.folder, tile_size=12, tile_overlap=4) as vae:
        both = vae.decode(z, tiled=True)
        np.testing.assert_allclose(both[1:], vae.decode(z[1:], tiled=True), atol=1e-6)


def test_a_set_cancel_event_stops_a_tiled_decode(tiny):
    with VAEDecoder.load(tiny.folder, preset="rpi-lowmem", tile_size=12, tile_overlap=4) as vae:
        vae.cancel = threading.Event()
        vae.cancel.set()
        with pytest.raises(Cancelled):
            vae.decode(tiny.latents(1, 20, 28), tiled=True)


def test_pi_presets_tile_like_the_default_preset(tiny):
    z = tiny.latents(1, 20, 28, seed=7)
    with VAEDecoder.load(tiny.folder, tile_size=12, tile_overlap=4) as vae:
        expected = vae.decode(z, tiled=True)
    for preset in ("rpi", "rpi-lowmem"):
        with VAEDecoder.load(tiny.folder, preset=preset, tile_size=12, tile_overlap=4) as vae:
            assert pcc(vae.decode(z, tiled=True), expected) >= 0.99999


# -- memory ------------------------------------------------------------------------


def traced_peak(vae: VAEDecoder, z: np.ndarray) -> int:
    """Peak bytes of Python and numpy allocations while decoding z tiled."""
    tracemalloc.start()
    try:
        vae.decode(z, tiled=True)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_256x256_tile_never_builds_a_full_im2col_in_rpi_lowmem(tiny):
    z = tiny.latents(1, 32, 32, seed=8)
    with VAEDecoder.load(tiny.folder, preset="rpi-lowmem") as vae:
        peak = traced_peak(vae, z)
    c = VAE_CONFIGS["tiny"]["block_out_channels"][0]
    activation = 4 * c * 256 * 256                  # one 32-channel 256x256 tensor, 8.4 MB
    full_im2col = 9 * activation                     # the patch matrix of a 3x3 conv at that size, 75 MB
    assert peak < 4 * activation + 2 * (4 << 20) < full_im2col


def test_tiled_decoding_holds_one_tiles_activations_at_a_time(tiny):
    with VAEDecoder.load(tiny.folder, preset="rpi-lowmem", tile_size=16, tile_overlap=4) as vae:
        one_tile = traced_peak(vae, tiny.latents(1, 16, 16, seed=9))
        five_tiles = traced_peak(vae, tiny.latents(1, 16, 64, seed=9))
    output = 4 * 3 * (16 * SCALE) * (64 * SCALE)
    assert five_tiles <= one_tile + output + (1 << 20)


# -- the picture -------------------------------------------------------------------


def test_to_image_matches_diffusers_postprocessing(tiny):
    from diffusers.image_processor import VaeImageProcessor

    rng = np.random.default_rng(10)
    x = (1.3 * rng.standard_normal((1, 3, 16, 24))).astype(np.float32)
    x[0, 0, 0, :4] = [-1.0, 1.0, 2 * (0.5 / 255) - 1, 2 * (1.5 / 255) - 1]   # ends and exact halves
    expected = VaeImageProcessor().postprocess(torch.from_numpy(x), output_type="pil")[0]
    with VAEDecoder.load(tiny.folder) as vae:
        for picture in (x, x[0]):
            img = vae.to_image(picture)
            assert img.mode == "RGB" and img.size == (24, 16)
            np.testing.assert_array_equal(np.asarray(img), np.asarray(expected))
