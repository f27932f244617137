"""The linear latent-to-RGB preview: the published SDXL factors applied, clamped, 8x upscaled."""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import InputError, ModelFileError
from engine.sdxl.preview import PREVIEW_DECODERS, linear_preview, linear_rgb, open_preview_decoder


def test_the_linear_map_is_the_published_factor_matrix_applied():
    latents = np.zeros((1, 4, 1, 2), np.float32)
    latents[0, 0, 0, 0] = 1.0     # channel 0 alone: its row of the factors plus the bias
    latents[0, 3, 0, 1] = -2.0    # channel 3 times -2: minus twice its row, plus the bias
    rgb = linear_rgb(latents)
    # by hand from ComfyUI's SDXL latent_rgb_factors / latent_rgb_factors_bias
    assert rgb[0, 0] == pytest.approx([0.3651 + 0.1084, 0.4232 - 0.0175, 0.4341 - 0.0011], abs=1e-6)
    assert rgb[0, 1] == pytest.approx([0.6330 + 0.1084, 0.4984 - 0.0175, 0.4376 - 0.0011], abs=1e-6)


def test_the_preview_is_the_map_in_0_255_at_8x_the_latent_size():
    latents = np.zeros((1, 4, 3, 5), np.float32)
    latents[0, 0] = 1.0
    picture = linear_preview(latents)
    assert picture.mode == "RGB" and picture.size == (40, 24)
    # a uniform latent stays uniform under the smooth upscale: (0.4735, 0.4057, 0.4330) -> (rgb + 1) * 127.5
    assert np.all(np.asarray(picture) == [188, 179, 183])


def test_the_preview_clamps_and_survives_a_diverged_sampler():
    latents = np.zeros((1, 4, 1, 2), np.float32)
    latents[0, 0, 0, 0] = 100.0
    latents[0, 0, 0, 1] = -100.0
    pixels = np.asarray(linear_preview(latents))
    assert pixels[0, 0].tolist() == [255, 255, 255] and pixels[0, 15].tolist() == [0, 0, 0]
    diverged = np.full((1, 4, 2, 2), np.nan, np.float32)
    assert np.all(np.asarray(linear_preview(diverged)) == 128)   # mid-grey, not noise or an exception


def test_the_upscale_is_smooth_between_latent_pixels():
    latents = np.zeros((1, 4, 1, 2), np.float32)
    latents[0, 0, 0, 1] = 1.0
    row = np.asarray(linear_preview(latents))[0, :, 0].astype(int)
    assert row[0] < row[-1] and np.all(np.diff(row) >= 0)   # a ramp, not a hard step
    assert len(set(row.tolist())) > 2


@pytest.mark.parametrize("shape", [(4, 8, 8), (1, 3, 8, 8), (2, 4, 8, 8)])
def test_a_preview_of_the_wrong_shape_says_what_it_needs(shape):
    with pytest.raises(InputError, match=r"shape \(1, 4, height, width\)"):
        linear_preview(np.zeros(shape, np.float32))


def test_an_unknown_preview_decoder_names_the_ones_there_are():
    assert open_preview_decoder("linear") is linear_preview
    with pytest.raises(InputError, match="no preview decoder 'fancy'.*linear"):
        open_preview_decoder("fancy")


def test_a_decoder_that_cannot_load_falls_back_to_the_linear_map_saying_why(monkeypatch, tmp_path):
    def missing(model):
        raise ModelFileError(f"{model / 'vae_tiny'}: no such folder")

    monkeypatch.setitem(PREVIEW_DECODERS, "tiny", missing)
    told = []
    assert open_preview_decoder("tiny", tmp_path, on_fallback=told.append) is linear_preview
    assert told == [f"{tmp_path / 'vae_tiny'}: no such folder; previews use the linear map instead"]
    with pytest.raises(ModelFileError):
        open_preview_decoder("tiny", tmp_path)


def test_the_tiny_preview_is_the_tiny_decoder_at_half_size_brought_to_full_size(tmp_path):
    from PIL import Image

    from engine.sdxl.preview import half_size
    from engine.sdxl.tiny_vae import TINY_VAE, TinyVAEDecoder
    from tiny_models import make_tiny_vae

    make_tiny_vae(tmp_path / TINY_VAE)
    latents = np.random.default_rng(3).standard_normal((1, 4, 6, 10)).astype(np.float32) * 2.5
    preview = open_preview_decoder("tiny", tmp_path)(latents)
    assert preview.size == (80, 48)
    cells = half_size(latents)
    assert cells.shape == (1, 4, 3, 5) and np.isclose(cells[0, 1, 2, 4], latents[0, 1, 4:6, 8:10].mean())
    with TinyVAEDecoder.load(tmp_path / TINY_VAE) as tiny:
        expected = tiny.to_image(tiny.decode(cells / np.float32(tiny.scaling_factor)))
    assert expected.size == (40, 24)
    assert np.array_equal(np.asarray(preview), np.asarray(expected.resize((80, 48), Image.Resampling.BICUBIC)))
    assert not np.array_equal(np.asarray(preview), np.asarray(linear_preview(latents)))


def test_a_model_without_a_tiny_decoder_previews_with_the_linear_map_saying_where_it_looked(tmp_path):
    with pytest.raises(ModelFileError, match="vae_tiny"):
        open_preview_decoder("tiny", tmp_path)
    said = []
    assert open_preview_decoder("tiny", tmp_path, on_fallback=said.append) is linear_preview
    assert len(said) == 1 and "vae_tiny" in said[0] and "linear map instead" in said[0]
