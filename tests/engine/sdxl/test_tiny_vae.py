"""The tiny decoder (TAESDXL) against diffusers' AutoencoderTiny on the same random weights,
its banded decoding, and what it says about folders that are not a tiny decoder."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
import torch

from conftest import pcc
from engine.errors import InputError, ModelFileError
from engine.safetensors import SafetensorsWriter, read_header, read_raw
from engine.sdxl.tiny_vae import TinyVAEDecoder
from engine.sdxl.tiny_vae_config import layers, param_shapes, parse_config
from tiny_models import edit_config, make_tiny_vae

WEIGHTS = "diffusion_pytorch_model.safetensors"


@pytest.fixture(scope="module")
def taesdxl(tmp_path_factory):
    """(folder, fp32 reference) of a random AutoencoderTiny with TAESDXL's sizes."""
    folder = tmp_path_factory.mktemp("tiny") / "vae_tiny"
    return folder, make_tiny_vae(folder)


def latents(batch: int, h: int, w: int, seed: int = 0) -> np.ndarray:
    """Latents as the sampler leaves them (about unit variance times a few), past tanh's knee."""
    return (2.5 * np.random.default_rng(seed).standard_normal((batch, 4, h, w))).astype(np.float32)


def reference(model, z: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model.decode(torch.from_numpy(z)).sample.numpy()


@pytest.mark.parametrize("batch,h,w", [(1, 16, 16), (2, 12, 20), (1, 24, 8)])
def test_decode_matches_diffusers(taesdxl, batch, h, w):
    folder, ref = taesdxl
    z = latents(batch, h, w)
    with TinyVAEDecoder.load(folder) as tiny:
        x = tiny.decode(z / tiny.scaling_factor)
    expected = reference(ref, z)
    assert x.shape == expected.shape == (batch, 3, 8 * h, 8 * w)
    assert expected.std() > 0.2      # the random decoder draws something, not a flat colour
    assert pcc(x, expected) >= 0.9999
    assert np.abs(x - expected).max() < 1e-5 * np.abs(expected).max() * 10


@pytest.mark.parametrize("band", [1, 4])
def test_bands_of_any_height_match_diffusers(taesdxl, band):
    folder, ref = taesdxl
    z = latents(1, 13, 10, seed=band)
    with TinyVAEDecoder.load(folder, preset="rpi-lowmem") as tiny:
        x = tiny.decode(z, band_latents=band)
    assert pcc(x, reference(ref, z)) >= 0.9999
    assert np.abs(x - reference(ref, z)).max() < 1e-4


@pytest.fixture(scope="module")
def narrow(tmp_path_factory):
    """TAESDXL's layers at a quarter of the width: a 1024x1024 decode in seconds."""
    folder = tmp_path_factory.mktemp("narrow") / "vae_tiny"
    make_tiny_vae(folder, decoder_block_out_channels=(16,) * 4)
    return folder


def test_banded_1024_decode_equals_the_unbanded_one_within_a_memory_bound(narrow):
    """Equal to the last bits, not bit for bit: OpenBLAS's sgemm rounds a column
    differently depending on the matrix's width, and a band's GEMMs are narrower than a
    whole picture's. A halo one row short would differ by ~1e-2 near every band border."""
    z = latents(1, 128, 128, seed=7)
    with TinyVAEDecoder.load(narrow, preset="rpi-lowmem") as tiny:
        tracemalloc.start()
        try:
            banded = tiny.decode(z, band_latents=8)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        whole = tiny.decode(z, band_latents=128)
    assert np.abs(banded - whole).max() <= 4e-6 * np.abs(whole).max()
    assert pcc(banded, whole) >= 0.99999999
    # One 16-channel full-resolution activation of the whole picture alone is 67 MB; the
    # output 12.6 MB.
    assert peak < 45e6, f"banded decode traced {peak / 1e6:.0f} MB"


def test_bands_are_sized_by_full_resolution_rows(taesdxl):
    with TinyVAEDecoder.load(taesdxl[0]) as tiny:
        assert tiny.rows_per_band(128) == 8         # 64 channels x 64 rows x 1024 columns x 4 bytes = 16 MB
        assert tiny.rows_per_band(64) == 16
    with TinyVAEDecoder.load(taesdxl[0], band_latents=3) as tiny:
        assert tiny.rows_per_band(128) == 3


def test_output_is_not_clipped_and_to_image_clips_it(taesdxl):
    folder, ref = taesdxl
    z = latents(1, 8, 8, seed=3)
    with TinyVAEDecoder.load(folder) as tiny:
        x = tiny.decode(z)
        image = tiny.to_image(x)
    expected = np.clip(reference(ref, z)[0] / 2 + 0.5, 0, 1) * 255
    assert image.mode == "RGB" and image.size == (64, 64)
    assert np.abs(np.asarray(image, dtype=np.float32) - expected.transpose(1, 2, 0)).max() <= 1.0


def test_layers_and_tensor_names_follow_the_checkpoint(taesdxl):
    folder, ref = taesdxl
    cfg = parse_config(json.loads((folder / "config.json").read_text()))
    assert (cfg.channels, cfg.blocks, cfg.scaling_factor, cfg.scale) == (64, (3, 3, 3, 1), 1.0, 8)
    decoder = {n: tuple(p.shape) for n, p in ref.state_dict().items() if n.startswith("decoder.")}
    assert param_shapes(cfg) == decoder
    kinds = "".join({"conv": "c", "block": "b", "upsample": "u"}[layer.kind] for layer in layers(cfg))
    assert kinds == "cbbbucbbbucbbbucbc"


def test_weights_stay_in_ram_whatever_the_preset(taesdxl):
    folder, _ = taesdxl
    with TinyVAEDecoder.load(folder, preset="rpi-lowmem") as tiny:
        assert tiny.options.weights == "ram"
        assert tiny.options.band_bytes == 4 << 20     # the preset's other options hold


# -- bad input -------------------------------------------------------------------


def copy_folder(src, dst, rename=None, drop=()):
    """A copy of a tiny decoder folder with tensors renamed or left out."""
    dst.mkdir()
    (dst / "config.json").write_text((src / "config.json").read_text())
    tensors = {n: i for n, i in read_header(src / WEIGHTS).items() if n not in drop}
    name = rename or (lambda n: n)
    with open(dst / WEIGHTS, "wb") as f:
        writer = SafetensorsWriter(f, [(name(n), i.dtype, i.shape) for n, i in tensors.items()])
        for n, info in tensors.items():
            writer.write(name(n), read_raw(info).view(np.float16))
        writer.close()
    return dst


def test_missing_folder_names_what_was_expected(tmp_path):
    with pytest.raises(ModelFileError, match=r"vae_tiny: no such folder; expected a tiny decoder folder.*taesdxl"):
        TinyVAEDecoder.load(tmp_path / "vae_tiny")


def test_the_full_vae_is_not_a_tiny_decoder(tmp_path):
    folder = tmp_path / "vae"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"_class_name": "AutoencoderKL", "scaling_factor": 0.13025}))
    with pytest.raises(ModelFileError, match=r"vae/config.json: _class_name is 'AutoencoderKL'; the tiny decoder "
                                             r"needs an AutoencoderTiny"):
        TinyVAEDecoder.load(folder)


@pytest.mark.parametrize("changes,message", [
    ({"shift_factor": 0.1159}, r"shift_factor=0.1159.*taesd3, taef1.*taesdxl"),
    ({"act_fn": "silu"}, r"act_fn='silu' is not supported; TAESDXL has act_fn='relu'"),
    ({"decoder_block_out_channels": [64, 64, 32, 64]}, r"must all be equal"),
    ({"num_decoder_blocks": [3, 3, 3]}, r"num_decoder_blocks must list a block count .* of the 4"),
])
def test_a_config_of_another_architecture_is_refused(taesdxl, tmp_path, changes, message):
    folder = copy_folder(taesdxl[0], tmp_path / "other")
    edit_config(folder, **changes)
    with pytest.raises(ModelFileError, match=message):
        TinyVAEDecoder.load(folder)


def test_weights_of_another_architecture_name_the_tensor(taesdxl, tmp_path):
    folder = copy_folder(taesdxl[0], tmp_path / "fewer")
    edit_config(folder, num_decoder_blocks=[3, 3, 3, 2])    # the file has one block in the last stage
    with pytest.raises(ModelFileError, match=r"tensor 'decoder.layers.18.conv.0.weight' is missing"):
        TinyVAEDecoder.load(folder)


def test_tensors_under_other_names_are_refused_naming_the_one_expected(taesdxl, tmp_path):
    folder = copy_folder(taesdxl[0], tmp_path / "renamed", rename=lambda n: n.replace("decoder.layers.", "layers."))
    with pytest.raises(ModelFileError, match=r"tensor 'decoder.layers.0.weight' is missing"):
        TinyVAEDecoder.load(folder)


def test_bad_latents_and_bands(taesdxl):
    with TinyVAEDecoder.load(taesdxl[0]) as tiny:
        with pytest.raises(InputError, match="latents have 3 channels"):
            tiny.decode(np.zeros((1, 3, 8, 8), np.float32))
        with pytest.raises(InputError, match="NaN"):
            tiny.decode(np.full((1, 4, 8, 8), np.nan, np.float32))
        with pytest.raises(InputError, match="band_latents must be a whole number of latent rows, at least 1"):
            tiny.decode(np.zeros((1, 4, 8, 8), np.float32), band_latents=0)
    with pytest.raises(InputError, match="band_latents must be a whole number"):
        TinyVAEDecoder.load(taesdxl[0], band_latents=-1)
