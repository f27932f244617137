"""Samplers against the diffusers schedulers they reimplement, on a fake denoiser."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from diffusers import DPMSolverMultistepScheduler, EulerAncestralDiscreteScheduler, EulerDiscreteScheduler
from diffusers.schedulers import scheduling_euler_ancestral_discrete

from engine.errors import InputError, ModelFileError
from engine.sdxl.samplers import NoiseSchedule, SamplerState, draw_noise, make_sampler

SDXL_SCHEDULER = dict(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                      timestep_spacing="leading", steps_offset=1, prediction_type="epsilon", interpolation_type="linear",
                      use_karras_sigmas=False)


def reference_scheduler(name: str, turbo: bool = False):
    cfg = dict(SDXL_SCHEDULER)
    if name == "euler":
        return EulerDiscreteScheduler(**cfg)
    if name == "euler_a":
        if turbo:
            cfg["timestep_spacing"] = "trailing"
        cfg.pop("interpolation_type"), cfg.pop("use_karras_sigmas")
        return EulerAncestralDiscreteScheduler(**cfg)
    cfg.pop("interpolation_type")
    return DPMSolverMultistepScheduler(**{**cfg, "use_karras_sigmas": True, "algorithm_type": "dpmsolver++",
                                          "solver_order": 2})


def fake_eps(x: np.ndarray, t: float) -> np.ndarray:
    """A smooth stand-in for the UNet that depends on both the input and the timestep."""
    return (np.tanh(0.7 * x) + np.float32(t / 1000.0) * np.cos(x)).astype(np.float32)


CASES = [("euler", False), ("euler_a", False), ("dpmpp_2m_karras", False), ("euler_a", True)]


@pytest.mark.parametrize("steps", [1, 2, 4, 13, 30])
@pytest.mark.parametrize("name,turbo", CASES)
def test_sigmas_and_timesteps_match_diffusers(name, turbo, steps):
    ref = reference_scheduler(name, turbo)
    ref.set_timesteps(steps)
    ours = make_sampler(name, steps, turbo=turbo)
    np.testing.assert_allclose(ours.sigmas, ref.sigmas.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(ours.timesteps, ref.timesteps.numpy().astype(np.float64))
    assert ours.init_noise_sigma == pytest.approx(float(ref.init_noise_sigma), rel=1e-6)


@pytest.mark.parametrize("steps", [1, 4, 10])
@pytest.mark.parametrize("name,turbo", CASES)
def test_sampling_loop_matches_diffusers_given_the_same_noise(name, turbo, steps, monkeypatch):
    shape = (1, 4, 8, 12)
    noise = np.random.default_rng(7).standard_normal(shape, dtype=np.float32)

    ref = reference_scheduler(name, turbo)
    ref.set_timesteps(steps)
    ref_rng = np.random.default_rng(11)
    monkeypatch.setattr(scheduling_euler_ancestral_discrete, "randn_tensor",
                        lambda shape, **kw: torch.from_numpy(draw_noise(ref_rng, tuple(shape))))
    x_ref = torch.from_numpy(noise) * ref.init_noise_sigma
    for t in ref.timesteps:
        eps = fake_eps(ref.scale_model_input(x_ref, t).numpy(), float(t))
        x_ref = ref.step(torch.from_numpy(eps), t, x_ref).prev_sample

    sampler = make_sampler(name, steps, turbo=turbo)
    rng = np.random.default_rng(11)
    state = SamplerState()
    x = noise * np.float32(sampler.init_noise_sigma)
    for i in range(sampler.steps):
        x = sampler.step(i, x, fake_eps(sampler.scale_input(i, x), float(sampler.timesteps[i])), state, rng)

    assert x.dtype == np.float32
    np.testing.assert_allclose(x, x_ref.numpy(), rtol=1e-4, atol=1e-5)


def test_dpmpp_state_carries_the_previous_estimate_so_a_resumed_loop_is_identical():
    sampler = make_sampler("dpmpp_2m_karras", 6)
    noise = np.random.default_rng(3).standard_normal((1, 4, 6, 6), dtype=np.float32)

    def run(start_x, start_state, first, last):
        x, state = start_x, start_state
        for i in range(first, last):
            x = sampler.step(i, x, fake_eps(x, float(sampler.timesteps[i])), state)
        return x, state

    whole, _ = run(noise, SamplerState(), 0, 6)
    half, state = run(noise, SamplerState(), 0, 3)
    restored = SamplerState.from_arrays({k: v.copy() for k, v in state.arrays().items()})
    resumed, _ = run(half.copy(), restored, 3, 6)
    np.testing.assert_array_equal(resumed, whole)
    lost, _ = run(half.copy(), SamplerState(), 3, 6)
    assert not np.array_equal(lost, whole), "without the carried estimate step 4 would be first order"


def test_schedule_is_read_from_the_model_scheduler_config(tmp_path):
    (tmp_path / "scheduler").mkdir()
    (tmp_path / "scheduler" / "scheduler_config.json").write_text(
        '{"_class_name": "EulerDiscreteScheduler", "timestep_spacing": "trailing", "beta_end": 0.02, "steps_offset": 0}')
    schedule = NoiseSchedule.from_model(tmp_path)
    assert schedule.timestep_spacing == "trailing" and schedule.beta_end == 0.02
    ref = EulerDiscreteScheduler(**{**SDXL_SCHEDULER, "timestep_spacing": "trailing", "beta_end": 0.02,
                                    "steps_offset": 0})
    ref.set_timesteps(5)
    np.testing.assert_allclose(make_sampler("euler", 5, schedule).sigmas, ref.sigmas.numpy(), rtol=1e-6)
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


@pytest.mark.parametrize("kwargs,message", [
    (dict(name="heun", steps=4), "unknown sampler 'heun'"),
    (dict(name="euler", steps=0), "at least 1"),
    (dict(name="euler", steps=2.5), "whole number"),
    (dict(name="euler", steps=4, turbo=True), "turbo mode uses the euler_a"),
])
def test_bad_sampler_requests_say_what_is_allowed(kwargs, message):
    with pytest.raises(InputError, match=message):
        make_sampler(**kwargs)
