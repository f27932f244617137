"""Bad latents, bad pictures and bad VAE folders get clear errors before any work is done."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from engine.errors import InputError, ModelFileError
from engine.safetensors import SafetensorsWriter, read_header, read_raw
from engine.sdxl import VAEDecoder
from tiny_models import FP16_WEIGHTS, TinyVAE, edit_config


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> TinyVAE:
    return TinyVAE("tiny", tmp_path_factory.mktemp("vae") / "tiny")


@pytest.fixture
def vae(tiny, monkeypatch):
    """A decoder whose weights must not be read: every check has to come first."""
    with VAEDecoder.load(tiny.folder, preset="rpi-lowmem") as decoder:
        def no_reads(*args):
            raise AssertionError("weights were read before the input was checked")

        monkeypatch.setattr(decoder.store, "read_rows", no_reads)
        yield decoder


@pytest.fixture
def vae_copy(tiny, tmp_path):
    dst = tmp_path / "vae"
    shutil.copytree(tiny.folder, dst)
    return dst


def good_latents() -> np.ndarray:
    return np.zeros((1, 4, 8, 8), dtype=np.float32)


@pytest.mark.parametrize("tiled", [True, False])
def test_wrong_channel_count_says_what_the_vae_expects(vae, tiled):
    with pytest.raises(InputError, match=r"latents have 3 channels .*decodes 4"):
        vae.decode(np.zeros((1, 3, 8, 8), dtype=np.float32), tiled=tiled)


@pytest.mark.parametrize("bad", [np.zeros((1, 4, 8, 8), dtype=np.int64), np.zeros((1, 4, 8, 8), dtype=bool),
                                 np.zeros((1, 4, 8, 8), dtype=np.complex64)])
def test_non_float_latents_are_refused(vae, bad):
    with pytest.raises(InputError, match="float"):
        vae.decode(bad)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_latents_are_refused_with_their_position(vae, value):
    z = good_latents()
    z[0, 2, 5, 1] = value
    with pytest.raises(InputError, match=r"NaN or infinite.*\(0, 2, 5, 1\)"):
        vae.decode(z)


@pytest.mark.parametrize("shape", [(4, 8, 8), (1, 4, 0, 8), (0, 4, 8, 8)])
def test_wrong_rank_or_empty_latents_are_refused(vae, shape):
    with pytest.raises(InputError, match="latents"):
        vae.decode(np.zeros(shape, dtype=np.float32))


def test_float64_and_float16_latents_are_accepted_as_float32(tiny):
    z = tiny.latents(1, 4, 4)
    with VAEDecoder.load(tiny.folder) as vae:
        expected = vae.decode(z)
        np.testing.assert_array_equal(vae.decode(z.astype(np.float64)), expected)
        assert vae.decode(z.astype(np.float16)).shape == expected.shape


def test_to_image_refuses_a_batch_and_non_finite_values(vae):
    with pytest.raises(InputError, match=r"one picture at a time, e.g. x\[0\]"):
        vae.to_image(np.zeros((2, 3, 8, 8), dtype=np.float32))
    with pytest.raises(InputError, match=r"\(3, H, W\)"):
        vae.to_image(np.zeros((4, 8, 8), dtype=np.float32))
    x = np.zeros((3, 8, 8), dtype=np.float32)
    x[1, 2, 3] = np.nan
    with pytest.raises(InputError, match="finite"):
        vae.to_image(x)


def test_bad_tile_options_are_refused_at_load(tiny):
    with pytest.raises(InputError, match="tile overlap"):
        VAEDecoder.load(tiny.folder, tile_size=16, tile_overlap=16)


# -- model folders -----------------------------------------------------------------


def test_a_whole_model_folder_points_to_its_vae(vae_copy, tmp_path):
    model = tmp_path / "sdxl"
    model.mkdir()
    shutil.move(vae_copy, model / "vae")
    with pytest.raises(ModelFileError, match=r"whole model folder; pass its VAE: .*sdxl/vae"):
        VAEDecoder.load(model)


def test_a_unet_config_is_not_a_vae(vae_copy):
    edit_config(vae_copy, _class_name="UNet2DConditionModel")
    with pytest.raises(ModelFileError, match="config.json: _class_name is 'UNet2DConditionModel'.*AutoencoderKL"):
        VAEDecoder.load(vae_copy)


def test_a_shifted_latent_space_is_refused(vae_copy):
    edit_config(vae_copy, shift_factor=0.0609)
    with pytest.raises(ModelFileError, match="shift_factor=0.0609 is not supported"):
        VAEDecoder.load(vae_copy)


def test_an_unknown_up_block_type_is_refused(vae_copy):
    edit_config(vae_copy, up_block_types=["UpDecoderBlock2D"] * 3 + ["AttnUpDecoderBlock2D"])
    with pytest.raises(ModelFileError, match="'AttnUpDecoderBlock2D' is not supported"):
        VAEDecoder.load(vae_copy)


def rewrite(path, transform) -> None:
    """Rewrite a safetensors file with tensors changed by transform(name, array) -> (name, array) | None."""
    items = [out for name, info in read_header(path).items()
             if (out := transform(name, read_raw(info).view(np.float16))) is not None]
    with open(path, "wb") as f:
        writer = SafetensorsWriter(f, [(n, "F16", a.shape) for n, a in items])
        for n, a in items:
            writer.write(n, a)
        writer.close()


def test_a_missing_tensor_names_the_file_and_the_tensor(vae_copy):
    gone = "decoder.up_blocks.2.resnets.0.conv_shortcut.weight"
    rewrite(vae_copy / FP16_WEIGHTS, lambda n, a: None if n == gone else (n, a))
    with pytest.raises(ModelFileError, match=rf"{FP16_WEIGHTS}.*'{gone}' is missing"):
        VAEDecoder.load(vae_copy)


def test_a_shape_mismatch_names_the_tensor_and_both_shapes(vae_copy):
    bad = "decoder.mid_block.attentions.0.to_v.weight"
    rewrite(vae_copy / FP16_WEIGHTS, lambda n, a: (n, a[:, :32]) if n == bad else (n, a))
    with pytest.raises(ModelFileError, match=rf"'{bad}' has shape \[64, 32\] but config.json implies \[64, 64\]"):
        VAEDecoder.load(vae_copy)
