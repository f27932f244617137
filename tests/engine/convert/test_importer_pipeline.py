"""End to end: a single-file SGM model imported with `slowframe models import` generates,
in slowframe's own pipeline, the latents diffusers generates from the folder it came from."""

from __future__ import annotations

import numpy as np
import torch

from conftest import pcc
from engine.convert.importer import import_model
from engine.sdxl import Pipeline

PROMPT = dict(prompt="a lighthouse at dusk, oil painting", negative_prompt="blurry")


def test_imported_single_file_generates_the_latents_of_the_diffusers_folder(tiny_single_file, tmp_path):
    dest = tmp_path / "tiny"
    import_model(tiny_single_file.sgm, dest, log=lambda *_: None)
    noise = np.random.default_rng(3).standard_normal((1, 4, 8, 8)).astype(np.float32)
    run = dict(steps=3, guidance=5.0, seed=1, width=64, height=64, init_noise=noise)
    got = Pipeline.load(dest).generate(**PROMPT, **run).latents
    same_weights = Pipeline.load(tiny_single_file.folder).generate(**PROMPT, **run).latents
    assert np.array_equal(got, same_weights)
    with torch.no_grad():
        want = tiny_single_file.pipe(**PROMPT, num_inference_steps=3, guidance_scale=5.0, height=64, width=64,
                                    latents=torch.from_numpy(noise), output_type="latent").images.numpy()
    assert pcc(got, want) >= 0.99999
