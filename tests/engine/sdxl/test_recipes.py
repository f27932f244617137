"""Few-step recipes: each LoRA recipe's sampling against its model card's diffusers example
(the LoRA fused into the tiny model, kohya and diffusers key formats), and what a recipe
refuses: unknown names, steps it does not support, a LoRA it needs and does not have."""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest
import torch
from diffusers import DDIMScheduler, EulerDiscreteScheduler, LCMScheduler, TCDScheduler

from conftest import pcc
from engine.errors import InputError
from engine.sdxl import Pipeline
from engine.sdxl.recipes import RECIPES, find_recipe
from engine.sdxl.samplers import draw_noise
from lora_files import kohya_lora, peft_lora
from tiny_models import load_pipeline

WIDTH, HEIGHT = 96, 64
PROMPT = "a lighthouse at dusk, oil painting"
SEED = 77

# What each model card's diffusers example does: scheduler, its options, the pipeline's arguments.
CARDS = {
    "lightning-4": (EulerDiscreteScheduler, {"timestep_spacing": "trailing"},
                    dict(num_inference_steps=4, guidance_scale=0.0)),
    "lightning-2": (EulerDiscreteScheduler, {"timestep_spacing": "trailing"},
                    dict(num_inference_steps=2, guidance_scale=0.0)),
    "hyper-1": (TCDScheduler, {}, dict(num_inference_steps=1, guidance_scale=0.0, eta=1.0)),
    "hyper-2": (DDIMScheduler, {"timestep_spacing": "trailing"}, dict(num_inference_steps=2, guidance_scale=0.0)),
    "hyper-8": (DDIMScheduler, {"timestep_spacing": "trailing"}, dict(num_inference_steps=8, guidance_scale=0.0)),
    "dmd2": (LCMScheduler, {}, dict(num_inference_steps=4, guidance_scale=0.0, timesteps=[999, 749, 499, 249])),
    "lcm-lora": (LCMScheduler, {}, dict(num_inference_steps=4, guidance_scale=1.0)),
}
FORMATS = ("kohya-sgm-names", "kohya-diffusers-names", "peft")


@pytest.fixture(scope="module")
def loras(tiny_single_file, tmp_path_factory):
    """A random LoRA in each key format, on the tiny single-file model."""
    folder = tmp_path_factory.mktemp("recipe-loras")
    paths = {}
    for name in FORMATS:
        path = folder / f"{name}.safetensors"
        if name == "peft":
            peft_lora(tiny_single_file.folder, path)
        else:
            kohya_lora(path, spelling=name.split("-")[1])
        paths[name] = path
    return paths


def card_reference(folder, lora, recipe: str, noise: np.ndarray, monkeypatch) -> np.ndarray:
    """diffusers' final latents for the card's example: the LoRA fused, our initial noise and
    (lcm, tcd) our per-step noise, the seed's stream after the injected initial noise."""
    cls, options, call = CARDS[recipe]
    pipe = load_pipeline(folder)
    pipe.load_lora_weights(str(lora))
    pipe.fuse_lora(lora_scale=1.0)
    pipe.scheduler = cls.from_config(pipe.scheduler.config, **options)
    rng = np.random.Generator(np.random.PCG64(SEED))
    monkeypatch.setattr(sys.modules[cls.__module__], "randn_tensor",
                        lambda shape, **kw: torch.from_numpy(draw_noise(rng, tuple(shape))), raising=False)
    with torch.no_grad():
        return pipe(prompt=PROMPT, width=WIDTH, height=HEIGHT, latents=torch.from_numpy(noise), output_type="latent",
                    **call).images.numpy()


@pytest.mark.parametrize("recipe,lora_format", [(r, f) for r in CARDS for f in FORMATS
                                                if r in ("lightning-4", "dmd2") or f == FORMATS[len(r) % 3]])
def test_a_lora_recipe_samples_as_its_model_card_does(tiny_single_file, loras, recipe, lora_format, monkeypatch):
    noise = np.random.default_rng(5).standard_normal((1, 4, HEIGHT // 8, WIDTH // 8), dtype=np.float32)
    want = card_reference(tiny_single_file.folder, loras[lora_format], recipe, noise, monkeypatch)
    pipe = Pipeline.load(tiny_single_file.folder, loras=[(loras[lora_format], 1.0)])
    result = pipe.generate(PROMPT, seed=SEED, width=WIDTH, height=HEIGHT, recipe=recipe, init_noise=noise)
    assert pcc(result.latents, want) >= 0.999
    meta = result.metadata
    assert (meta["recipe"], meta["steps"], meta["guidance"]) == (recipe, RECIPES[recipe].steps,
                                                                 RECIPES[recipe].guidance)
    assert f"Recipe: {recipe}" in result.parameters


def test_without_the_lora_the_recipe_gives_another_picture(tiny_single_file, loras, monkeypatch):
    """The comparison above can fail: the LoRA changes the final latents measurably."""
    noise = np.random.default_rng(5).standard_normal((1, 4, HEIGHT // 8, WIDTH // 8), dtype=np.float32)
    want = card_reference(tiny_single_file.folder, loras["peft"], "lightning-4", noise, monkeypatch)
    plain = Pipeline.load(tiny_single_file.folder).generate(PROMPT, seed=SEED, width=WIDTH, height=HEIGHT,
                                                           sampler="euler", schedule="trailing", steps=4,
                                                           guidance=0.0, init_noise=noise)
    assert pcc(plain.latents, want) < 0.999


def test_every_recipe_builds_its_sampler_within_its_steps():
    for recipe in RECIPES.values():
        lo, hi = recipe.step_range
        assert lo <= recipe.spec().steps <= hi and recipe.spec().build().steps == recipe.steps, recipe.name
        assert recipe.files and all(f.repo.count("/") == 1 for f in recipe.files), recipe.name
        assert recipe.needs_distillation == (recipe.name not in ("sdxl", "turbo", "hyper-1-unet"))


def test_the_sdxl_recipe_is_the_old_default():
    spec = find_recipe("sdxl").spec()
    assert (spec.sampler, spec.schedule, spec.steps, find_recipe("sdxl").guidance) == ("euler", "default", 20, 5.0)


def test_recipe_names_are_read_forgivingly():
    assert find_recipe(" Lightning_4 ").name == "lightning-4"
    assert find_recipe("LCM LoRA").name == "lcm-lora"


def test_an_unknown_recipe_lists_the_valid_ones_nearest_first():
    with pytest.raises(InputError, match=r"unknown recipe 'lightnin-8'; choose one of: lightning-8, ") as exc:
        find_recipe("lightnin-8")
    assert all(name in str(exc.value) for name in RECIPES)


@pytest.mark.parametrize("recipe,kwargs,message", [
    ("lightning-4", dict(steps=8), "recipe lightning-4 supports 4 steps, not 8; for 8 steps use lightning-8 "
                                   "(its LoRA is sdxl_lightning_8step_lora.safetensors)"),
    ("turbo", dict(steps=6), "recipe turbo supports 1-4 steps, not 6"),
    ("dmd2", dict(steps=2), "recipe dmd2 samples at timesteps 999,749,499,249, which are 4 steps, not 2"),
    ("lcm-lora", dict(steps=2), "recipe lcm-lora supports 4-8 steps, not 2"),
    ("dmd2", dict(timesteps="999,499"), "recipe dmd2 supports 4 steps, not 2"),
    ("hyper-4", dict(sampler="euler", eta=0.5), "sampler euler takes no eta"),
])
def test_settings_a_recipe_does_not_support_are_refused(recipe, kwargs, message):
    with pytest.raises(InputError, match=re.escape(message)):
        find_recipe(recipe).spec(**kwargs)


def test_what_is_given_replaces_the_recipe_setting():
    dmd2 = find_recipe("dmd2")
    tcd = dmd2.spec(sampler="tcd", gamma=0.3)       # another sampler keeps the recipe's timesteps
    assert (tcd.sampler, tcd.timesteps, tcd.gamma) == ("tcd", (999, 749, 499, 249), 0.3)
    karras = find_recipe("lightning-8").spec(sampler="dpmpp_2m_karras")   # a shorthand's schedule wins
    assert (karras.sampler, karras.schedule, karras.steps) == ("dpmpp_2m", "karras", 8)
    assert find_recipe("hyper-1").spec(steps=4).gamma == 1.0


def test_a_lora_recipe_without_its_lora_says_which_file_it_needs(tiny_single_file):
    pipe = Pipeline.load(tiny_single_file.folder)
    with pytest.raises(InputError) as exc:
        pipe.generate(PROMPT, seed=1, width=WIDTH, height=HEIGHT, recipe="lightning-4")
    assert str(exc.value) == (
        "recipe lightning-4 is for SDXL-Lightning 4-step: it needs the LoRA sdxl_lightning_4step_lora.safetensors "
        "(ByteDance/SDXL-Lightning) (--lora FILE, or a theme's lora:), or import a model from "
        "sdxl_lightning_4step_unet.safetensors (ByteDance/SDXL-Lightning)")
    with pytest.raises(InputError, match="needs the LoRA pytorch_lora_weights.safetensors "
                                         r"\(latent-consistency/lcm-lora-sdxl\) \(--lora FILE, or a theme's lora:\)$"):
        pipe.generate(PROMPT, seed=1, width=WIDTH, height=HEIGHT, recipe="lcm-lora")


def test_a_model_imported_with_the_recipe_lora_merged_needs_no_lora(tmp_path):
    root = tmp_path / "lightning"
    root.mkdir()
    manifest = {"source": {"files": [{"path": "/m/sd_xl_base_1.0.safetensors"}]},
                "loras": [{"path": "/m/loras/sdxl_lightning_4step_lora.safetensors", "weight": 1.0}]}
    (root / "slowframe-model.json").write_text(json.dumps(manifest))
    assert find_recipe("lightning-4").missing_file(root, []) is None
    assert "lightning-8" in find_recipe("lightning-8").missing_file(root, [])
    merged_unet = {"source": {"files": [{"path": "/m/dmd2_sdxl_4step_unet_fp16.bin"}]}, "loras": []}
    (root / "slowframe-model.json").write_text(json.dumps(merged_unet))
    assert find_recipe("dmd2").missing_file(root, []) is None
