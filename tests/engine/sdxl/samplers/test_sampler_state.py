"""The one sampler state: stopped after any evaluation and restored from its checkpoint arrays, every
sampler continues to the same bytes; the evaluation counts; the old diffusers-exact samplers stay exact."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch
from diffusers import DPMSolverMultistepScheduler, EulerAncestralDiscreteScheduler, EulerDiscreteScheduler

from engine.convert.project_files import SCHEDULER_CONFIG
from engine.sdxl.samplers import SAMPLERS, SamplerSpec, SamplerState, draw_noise, make_sampler

SHAPE = (1, 4, 6, 5)


def fake_eps(x: np.ndarray, t: float) -> np.ndarray:
    """A smooth stand-in for the UNet that depends on both the input and the timestep."""
    return (np.tanh(0.7 * x) + np.float32(t / 1000.0) * np.cos(x)).astype(np.float32)


def noise() -> np.ndarray:
    return np.random.default_rng(3).standard_normal(SHAPE, dtype=np.float32)


def run(sampler, state, rng, stop_after: int | None = None) -> int:
    """Evaluate and advance until the end, or until `stop_after` evaluations; the count done."""
    done = 0
    while not sampler.finished(state) and done != stop_after:
        x_in, t = sampler.model_input(state)
        sampler.advance(state, fake_eps(x_in, t), rng)
        done += 1
    return done


def through_a_checkpoint(state: SamplerState, rng: np.random.Generator):
    """The state and generator as a resumed process gets them: arrays copied, scalars through JSON."""
    arrays = {k: np.array(v, copy=True) for k, v in state.arrays().items()}
    scalars = json.loads(json.dumps({**state.scalars(), "rng": rng.bit_generator.state}))
    restored = np.random.Generator(np.random.PCG64())
    restored.bit_generator.state = scalars["rng"]
    return SamplerState.restore(arrays, scalars), restored


SETTINGS = [SamplerSpec.parse(name, schedule, 5) for name in SAMPLERS for schedule in ("karras", "trailing")] + \
    [SamplerSpec.parse("ddim", "default", 4, eta=0.5), SamplerSpec.parse("tcd", steps=4, gamma=0.6),
     SamplerSpec.parse("dpmpp_2m_sde", "exponential", 6, eta=0.3)]


@pytest.mark.parametrize("spec", SETTINGS, ids=lambda s: f"{s.sampler}-{s.schedule}-eta{s.eta}-gamma{s.gamma}")
def test_a_run_restored_after_any_evaluation_ends_in_the_same_bytes(spec):
    sampler = spec.build()
    whole = sampler.start(noise())
    assert run(sampler, whole, np.random.default_rng(9)) == sampler.evaluations
    for stop in range(1, sampler.evaluations):
        state, rng = sampler.start(noise()), np.random.default_rng(9)
        run(sampler, state, rng, stop)
        assert sampler.evaluations_before(state.step) + state.stage == stop
        state, rng = through_a_checkpoint(state, rng)
        assert state.denoised is None, "the estimate is not checkpointed: unknown right after a resume"
        run(sampler, state, rng)
        assert state.x.tobytes() == whole.x.tobytes(), f"resumed after evaluation {stop}"


@pytest.mark.parametrize("name", ["dpmpp_2m", "dpmpp_3m_sde", "lms", "ipndm", "unipc"])
def test_multistep_samplers_need_their_history(name):
    sampler = make_sampler(name, 6, "karras", eta=0.0 if name == "dpmpp_3m_sde" else None)
    whole = sampler.start(noise())
    run(sampler, whole, None)
    state = sampler.start(noise())
    run(sampler, state, None, 3)
    state.memory = {k: np.zeros_like(v) for k, v in state.memory.items()}
    run(sampler, state, None)
    assert not np.allclose(state.x, whole.x, atol=1e-4), "the history kept in the state changes the result"


@pytest.mark.parametrize("name,per_step", [("euler", 1), ("heun", 2), ("dpm2", 2), ("dpm2_a", 2),
                                           ("dpmpp_2s_a", 2), ("lcm", 1)])
def test_two_evaluation_samplers_count_both_and_one_on_the_last_step(name, per_step):
    sampler = make_sampler(name, 4, "karras")
    assert sampler.evaluations == 4 * per_step - (per_step - 1)
    assert [sampler.stages(i) for i in range(4)] == [per_step] * 3 + [1]


def test_every_completed_step_leaves_its_estimate_of_the_picture():
    sampler = make_sampler("heun", 3, "karras")
    state = sampler.start(noise())
    estimates = []
    while not sampler.finished(state):
        x_in, t = sampler.model_input(state)
        step = state.step
        sampler.advance(state, fake_eps(x_in, t), None)
        estimates.append(None if state.step == step else state.denoised)
    assert [e is None for e in estimates] == [True, False, True, False, False]
    assert all(e.dtype == np.float32 and e.shape == SHAPE for e in estimates if e is not None)
    np.testing.assert_array_equal(estimates[-1], state.x)


# -- the three samplers there were before, still as exact as they were ------------------

SDXL_CONFIG = {k: v for k, v in SCHEDULER_CONFIG.items() if not k.startswith("_")}


def diffusers_scheduler(name: str):
    if name == "euler":
        return EulerDiscreteScheduler.from_config(SDXL_CONFIG)
    if name in ("euler_a", "turbo"):
        return EulerAncestralDiscreteScheduler.from_config(
            SDXL_CONFIG, timestep_spacing="trailing" if name == "turbo" else "leading")
    return DPMSolverMultistepScheduler.from_config(SDXL_CONFIG, use_karras_sigmas=True, algorithm_type="dpmsolver++",
                                                   solver_order=2)


@pytest.mark.parametrize("steps", [1, 4, 10])
@pytest.mark.parametrize("name,sampler,schedule", [("euler", "euler", None), ("euler_a", "euler_a", None),
                                                   ("dpmpp_2m_karras", "dpmpp_2m_karras", None),
                                                   ("turbo", "euler_a", "trailing")])
def test_the_first_samplers_still_match_diffusers_to_float32_rounding(name, sampler, schedule, steps, monkeypatch):
    ref = diffusers_scheduler(name)
    ref.set_timesteps(steps)
    ref_rng = np.random.default_rng(11)
    monkeypatch.setattr(sys.modules[type(ref).__module__], "randn_tensor",
                        lambda shape, **kw: torch.from_numpy(draw_noise(ref_rng, tuple(shape))))
    x_ref = torch.from_numpy(noise()) * ref.init_noise_sigma
    for t in ref.timesteps:
        eps = fake_eps(ref.scale_model_input(x_ref, t).numpy(), float(t))
        x_ref = ref.step(torch.from_numpy(eps), t, x_ref).prev_sample

    sampler = make_sampler(sampler, steps, schedule)
    state, rng, seen = sampler.start(noise()), np.random.default_rng(11), []
    while not sampler.finished(state):
        x_in, t = sampler.model_input(state)
        seen.append(t)
        sampler.advance(state, fake_eps(x_in, t), rng)
    assert seen == ref.timesteps.numpy().astype(np.float64).tolist()
    np.testing.assert_allclose(state.x, x_ref.numpy(), rtol=1e-4, atol=1e-5)
