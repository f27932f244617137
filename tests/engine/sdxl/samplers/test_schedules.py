"""Schedules against diffusers, k-diffusion and ComfyUI's definitions; the training schedule from a model's config."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from diffusers import (DPMSolverMultistepScheduler, EulerAncestralDiscreteScheduler, EulerDiscreteScheduler,
                       LCMScheduler)

from engine.convert.project_files import SCHEDULER_CONFIG
from engine.errors import InputError, ModelFileError
from engine.sdxl.samplers import NoiseSchedule, SamplerSpec, make_sampler
from engine.sdxl.samplers.schedules import explicit_schedule, make_schedule
from k_diffusion_reference import sampling

SDXL_CONFIG = {k: v for k, v in SCHEDULER_CONFIG.items() if not k.startswith("_")}
STEPS = [1, 2, 4, 13, 30]


def diffusers_euler(steps: int, **config) -> EulerDiscreteScheduler:
    scheduler = EulerDiscreteScheduler.from_config({**SDXL_CONFIG, **config})
    scheduler.set_timesteps(steps)
    return scheduler


@pytest.mark.parametrize("steps", STEPS)
@pytest.mark.parametrize("name,spacing", [("default", "leading"), ("normal", "linspace"), ("trailing", "trailing")])
def test_spaced_schedules_match_diffusers_euler(name, spacing, steps):
    ref = diffusers_euler(steps, timestep_spacing=spacing)
    ours = make_schedule(name, steps, NoiseSchedule())
    np.testing.assert_allclose(ours.sigmas, ref.sigmas.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(ours.timesteps, ref.timesteps.numpy().astype(np.float64))
    assert ours.init_noise_sigma == pytest.approx(float(ref.init_noise_sigma), rel=1e-6)


@pytest.mark.parametrize("steps", STEPS)
@pytest.mark.parametrize("name", ["karras", "exponential"])
def test_sigma_schedules_match_k_diffusion_and_diffusers_dpm_solver(name, steps):
    table = NoiseSchedule().train_sigmas()
    make = sampling.get_sigmas_karras if name == "karras" else sampling.get_sigmas_exponential
    reference = make(steps, float(table[0]), float(table[-1])).numpy()
    ours = make_schedule(name, steps, NoiseSchedule())
    np.testing.assert_allclose(ours.sigmas, reference, rtol=1e-5)
    # diffusers' DPMSolverMultistep spans the same sigmas and gives the UNet their rounded timesteps
    ref = DPMSolverMultistepScheduler.from_config({**SDXL_CONFIG, f"use_{name}_sigmas": True})
    ref.set_timesteps(steps)
    np.testing.assert_allclose(ours.sigmas, ref.sigmas.numpy(), rtol=1e-5)
    # (diffusers' float32 exp(log(sigma_max)) lands just under the top timestep: 998 where we give 999)
    np.testing.assert_allclose(np.round(ours.timesteps), ref.timesteps.numpy(), rtol=0,
                               atol=1 if name == "exponential" else 0)


@pytest.mark.parametrize("steps", STEPS)
def test_simple_and_sgm_uniform_follow_comfyui(steps):
    """ComfyUI's definitions, transcribed: simple takes every (1000/N)th training sigma from the
    top; sgm_uniform spaces N + 1 timesteps from the last to 0 and drops the last."""
    table = NoiseSchedule().train_sigmas()
    stride = len(table) / steps
    simple = [float(table[-(1 + int(i * stride))]) for i in range(steps)] + [0.0]
    np.testing.assert_allclose(make_schedule("simple", steps, NoiseSchedule()).sigmas, simple, rtol=1e-6)
    t = torch.linspace(999, 0, steps + 1)[:-1].numpy()
    sgm = list(np.interp(t, np.arange(1000), table)) + [0.0]
    np.testing.assert_allclose(make_schedule("sgm_uniform", steps, NoiseSchedule()).sigmas, sgm, rtol=1e-5)


def test_explicit_timesteps_match_diffusers_custom_timesteps():
    timesteps = [999, 749, 499, 249]
    ref = EulerDiscreteScheduler.from_config(SDXL_CONFIG)
    ref.set_timesteps(timesteps=timesteps)
    ours = explicit_schedule(timesteps, NoiseSchedule())
    np.testing.assert_allclose(ours.sigmas, ref.sigmas.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(ours.timesteps, timesteps)


@pytest.mark.parametrize("steps", [1, 2, 4, 8, 50])
def test_lcm_and_tcd_default_to_the_distilled_timesteps(steps):
    ref = LCMScheduler.from_config(SDXL_CONFIG)
    ref.set_timesteps(steps)
    for name in ("lcm", "tcd"):
        np.testing.assert_array_equal(make_sampler(name, steps).timesteps, ref.timesteps.numpy())


def test_turbo_schedule_is_euler_ancestral_trailing():
    ref = EulerAncestralDiscreteScheduler.from_config({**SDXL_CONFIG, "timestep_spacing": "trailing"})
    ref.set_timesteps(2)
    ours = make_sampler("euler_a", 2, "trailing")
    np.testing.assert_allclose(ours.sigmas, ref.sigmas.numpy(), rtol=1e-6)
    assert ours.init_noise_sigma == pytest.approx(float(ref.init_noise_sigma), rel=1e-6)


def test_training_schedule_is_read_from_the_model_scheduler_config(tmp_path):
    (tmp_path / "scheduler").mkdir()
    (tmp_path / "scheduler" / "scheduler_config.json").write_text(
        '{"_class_name": "EulerDiscreteScheduler", "timestep_spacing": "trailing", "beta_end": 0.02, "steps_offset": 0,'
        ' "set_alpha_to_one": true}')
    noise = NoiseSchedule.from_model(tmp_path)
    assert noise.timestep_spacing == "trailing" and noise.beta_end == 0.02 and noise.set_alpha_to_one
    ref = EulerDiscreteScheduler.from_config({**SDXL_CONFIG, "timestep_spacing": "trailing", "beta_end": 0.02,
                                              "steps_offset": 0})
    ref.set_timesteps(5)
    np.testing.assert_allclose(make_sampler("euler", 5, noise=noise).sigmas, ref.sigmas.numpy(), rtol=1e-6)
    assert NoiseSchedule.from_model(tmp_path / "absent") == NoiseSchedule()


@pytest.mark.parametrize("text,message", [
    ("{not json", "not a readable JSON"),
    ('{"prediction_type": "v_prediction"}', "v_prediction"),
    ('{"beta_schedule": "squaredcos_cap_v2"}', "squaredcos_cap_v2"),
])
def test_unsupported_scheduler_configs_are_refused_with_the_file_named(tmp_path, text, message):
    (tmp_path / "scheduler").mkdir()
    (tmp_path / "scheduler" / "scheduler_config.json").write_text(text)
    with pytest.raises(ModelFileError, match=message) as err:
        NoiseSchedule.from_model(tmp_path)
    assert "scheduler_config.json" in str(err.value)


@pytest.mark.parametrize("timesteps,message", [
    ([999, 1000], "outside the model's training timesteps 0..999"),
    ([-1], "outside the model's training timesteps"),
    ([999, 499, 499], "must go down.*499 is followed by 499"),
    ([249, 499, 999], "must go down.*249 is followed by 499"),
    ([999, 2.5], "whole numbers, got 2.5"),
    ([], "a list of whole numbers"),
    ("999;749", "'999;749' is not a whole number"),
    ("", "whole numbers separated by commas"),
])
def test_bad_explicit_timesteps_say_what_is_wrong(timesteps, message):
    with pytest.raises(InputError, match=message):
        SamplerSpec.parse("lcm", timesteps=timesteps)


def test_explicit_timesteps_set_the_steps_and_exclude_a_schedule():
    spec = SamplerSpec.parse("lcm", timesteps="999, 749,499 249")
    assert (spec.schedule, spec.steps, spec.timesteps) == ("explicit", 4, (999, 749, 499, 249))
    with pytest.raises(InputError, match="either the karras schedule or explicit timesteps"):
        SamplerSpec.parse("euler", "karras", timesteps=[999, 499])
    with pytest.raises(InputError, match="2 timesteps were given but 4 steps"):
        SamplerSpec.parse("euler", steps=4, timesteps=[999, 499])


def test_a_schedule_that_repeats_a_whole_timestep_is_refused_for_timestep_samplers():
    with pytest.raises(InputError, match="visits timestep .* twice.*ddim"):
        make_sampler("ddim", 200, "karras")
    assert make_sampler("euler", 200, "karras").steps == 200, "sigma-space samplers take fractional timesteps"


def test_lcm_schedule_has_at_most_the_distilled_steps():
    with pytest.raises(InputError, match="at most 50 steps"):
        make_sampler("lcm", 60)
    assert make_sampler("lcm", 60, "trailing").steps == 60
