"""The pipeline's choice of decoder for the final picture: the model's VAE, or the tiny
decoder from the model's vae_tiny/ or a folder named; the full VAE when the tiny one is missing."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from PIL import Image

from engine.errors import InputError
from engine.sdxl import Pipeline
from engine.sdxl.tiny_vae import TinyVAEDecoder
from frame.cli import main
from tiny_models import make_sdxl, make_tiny_vae

SIZE = dict(width=128, height=64)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """(model folder with vae_tiny/, a tiny decoder folder elsewhere) of a tiny SDXL model."""
    root = tmp_path_factory.mktemp("sdxl")
    make_sdxl(root)
    make_tiny_vae(root / "vae_tiny")
    elsewhere = tmp_path_factory.mktemp("taesdxl") / "taesdxl"
    make_tiny_vae(elsewhere, seed=5)
    return root, elsewhere


def tiny_picture(folder, latents):
    with TinyVAEDecoder.load(folder) as tiny:
        return np.asarray(tiny.to_image(tiny.decode(latents / tiny.scaling_factor)))


def test_the_tiny_decoder_makes_the_final_picture_from_the_same_latents(model):
    root, _ = model
    pipe = Pipeline.load(root)
    tiny = pipe.generate("a lighthouse", steps=2, seed=3, decoder="tiny", **SIZE)
    full = pipe.generate("a lighthouse", steps=2, seed=3, **SIZE)
    assert np.array_equal(tiny.latents, full.latents)
    assert np.array_equal(np.asarray(tiny.image), tiny_picture(root / "vae_tiny", tiny.latents))
    assert not np.array_equal(np.asarray(tiny.image), np.asarray(full.image))
    assert tiny.metadata["decoder"] == "tiny" and "decoder" not in full.metadata


def test_a_tiny_decoder_named_by_path(model):
    root, elsewhere = model
    latents = (2 * np.random.default_rng(1).standard_normal((1, 4, 8, 16))).astype(np.float32)
    image = Pipeline.load(root, tiny_vae=elsewhere).decode(latents, decoder="tiny")
    assert np.array_equal(np.asarray(image), tiny_picture(elsewhere, latents))
    assert not np.array_equal(np.asarray(image), tiny_picture(root / "vae_tiny", latents))


def test_a_missing_tiny_decoder_falls_back_to_the_full_vae_saying_so_once(model, tmp_path, caplog):
    root, _ = model
    pipe = Pipeline.load(root, tiny_vae=tmp_path / "nothing-here")
    with caplog.at_level(logging.WARNING, logger="engine.sdxl.pipeline"):
        result = pipe.generate("a lighthouse", steps=1, seed=3, decoder="tiny", **SIZE)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "nothing-here: no such folder; expected a tiny decoder folder" in warnings[0]
    assert "Decoding with the full VAE instead" in warnings[0] and "models import --tiny-vae" in warnings[0]
    full = pipe.decode(result.latents)
    assert np.array_equal(np.asarray(result.image), np.asarray(full))
    assert "decoder" not in result.metadata


def test_an_unknown_decoder_is_refused_before_any_work(model):
    with pytest.raises(InputError, match="unknown decoder 'taesd'; choose one of: full, tiny"):
        Pipeline.load(model[0]).generate("x", steps=1, decoder="taesd", **SIZE)


def test_cli_decodes_saved_latents_with_the_tiny_decoder(model, tmp_path):
    root, elsewhere = model
    latents = (2 * np.random.default_rng(2).standard_normal((1, 4, 8, 8))).astype(np.float32)
    np.save(tmp_path / "z.npy", latents)
    out = tmp_path / "tiny.png"
    assert main(["generate", "--models-path", str(root), "--prompt", "x", "--decode-latents",
                 str(tmp_path / "z.npy"), "--decoder", "tiny", "--tiny-vae", str(elsewhere),
                 "--output", str(out)]) == 0
    assert np.array_equal(np.asarray(Image.open(out)), tiny_picture(elsewhere, latents))
