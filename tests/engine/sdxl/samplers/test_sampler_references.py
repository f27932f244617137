"""Every sampler against its reference, driving the tiny SDXL-shaped UNet from the same noise.

References: diffusers' scheduler of the same name where diffusers has one; k-diffusion's
sample_* (loaded by tests/k_diffusion_reference.py, with its CompVisDenoiser turning sigmas
into timesteps) for dpmpp_2s_a, dpmpp_3m_sde and as a second opinion on others; for ipndm,
which neither has, a plain torch transcription of the improved PNDM formulas (Zhang & Chen
2023, "Fast sampling of diffusion models with exponential integrator", and Zhou et al. 2024's
diff-sampler), written below. Stochastic samplers get the same noise on both sides: the
reference's random draws are replaced by draws from a generator seeded like ours, in the
order they are asked for.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from diffusers import (DDIMScheduler, DDPMScheduler, DPMSolverMultistepScheduler, EulerAncestralDiscreteScheduler,
                       EulerDiscreteScheduler, HeunDiscreteScheduler, KDPM2AncestralDiscreteScheduler,
                       KDPM2DiscreteScheduler, LCMScheduler, LMSDiscreteScheduler, TCDScheduler,
                       UniPCMultistepScheduler)

from conftest import pcc
from engine.convert.project_files import SCHEDULER_CONFIG
from engine.sdxl.samplers import NoiseSchedule, SamplerSpec, draw_noise
from k_diffusion_reference import external, sampling

SHAPE = (1, 4, 8, 8)
NOISE_SEED, STEP_SEED = 5, 11
SDXL_CONFIG = {k: v for k, v in SCHEDULER_CONFIG.items() if not k.startswith("_")}


class Denoiser:
    """The tiny UNet with fixed random conditioning: eps(x, t), numpy in and out."""

    def __init__(self, tiny_unet):
        self.unet = tiny_unet.ref
        _, _, ctx, text, ids = tiny_unet.inputs(batch=1, h=SHAPE[2], w=SHAPE[3], tokens=77, seed=3)
        self.cond = dict(encoder_hidden_states=torch.from_numpy(ctx),
                         added_cond_kwargs=dict(text_embeds=torch.from_numpy(text), time_ids=torch.from_numpy(ids)))

    def __call__(self, x, t) -> np.ndarray:
        with torch.no_grad():
            x = torch.as_tensor(np.asarray(x, dtype=np.float32))
            return self.unet(x, torch.as_tensor(float(t)), **self.cond).sample.numpy()


@pytest.fixture(scope="module")
def denoiser(tiny_unet) -> Denoiser:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)     # a tiny model: threads cost more than they give, on a busy machine far more
    yield Denoiser(tiny_unet)
    torch.set_num_threads(threads)


def initial_noise() -> np.ndarray:
    return np.random.default_rng(NOISE_SEED).standard_normal(SHAPE, dtype=np.float32)


def ours(spec: SamplerSpec, denoiser: Denoiser) -> np.ndarray:
    sampler = spec.build(NoiseSchedule())
    rng = np.random.Generator(np.random.PCG64(STEP_SEED))
    state = sampler.start(initial_noise())
    while not sampler.finished(state):
        x_in, t = sampler.model_input(state)
        sampler.advance(state, denoiser(x_in, t), rng)
    assert state.x.dtype == np.float32 and state.x.shape == SHAPE
    return state.x


def same_noise():
    """A function returning the draws our samplers make, in order, as torch tensors."""
    rng = np.random.Generator(np.random.PCG64(STEP_SEED))
    return lambda *_, **__: torch.from_numpy(draw_noise(rng, SHAPE))


# -- diffusers -------------------------------------------------------------------------

DIFFUSERS = {"euler": EulerDiscreteScheduler, "euler_a": EulerAncestralDiscreteScheduler,
             "heun": HeunDiscreteScheduler, "dpm2": KDPM2DiscreteScheduler, "dpm2_a": KDPM2AncestralDiscreteScheduler,
             "dpmpp_2m": DPMSolverMultistepScheduler, "dpmpp_2m_sde": DPMSolverMultistepScheduler,
             "lms": LMSDiscreteScheduler, "ddim": DDIMScheduler, "ddpm": DDPMScheduler,
             "unipc": UniPCMultistepScheduler, "lcm": LCMScheduler, "tcd": TCDScheduler}
SCHEDULE_OPTIONS = {"default": {}, "karras": {"use_karras_sigmas": True},
                    "exponential": {"use_exponential_sigmas": True}, "normal": {"timestep_spacing": "linspace"},
                    "trailing": {"timestep_spacing": "trailing"}, "explicit": {}}
SAMPLER_OPTIONS = {"dpmpp_2m": dict(algorithm_type="dpmsolver++", solver_order=2),
                   "dpmpp_2m_sde": dict(algorithm_type="sde-dpmsolver++", solver_order=2)}


def diffusers_reference(spec: SamplerSpec, denoiser: Denoiser, monkeypatch) -> np.ndarray:
    cls = DIFFUSERS[spec.sampler]
    config = {**SDXL_CONFIG, **SCHEDULE_OPTIONS[spec.schedule], **SAMPLER_OPTIONS.get(spec.sampler, {})}
    scheduler = cls.from_config(config)
    monkeypatch.setattr(sys.modules[cls.__module__], "randn_tensor", same_noise(), raising=False)
    if spec.timesteps is not None:
        scheduler.set_timesteps(timesteps=list(spec.timesteps))
    else:
        scheduler.set_timesteps(spec.steps)
    step_options = {"eta": spec.eta} if spec.sampler == "ddim" else {"eta": spec.gamma} if spec.sampler == "tcd" else {}
    x = torch.from_numpy(initial_noise()) * scheduler.init_noise_sigma
    for t in scheduler.timesteps:
        eps = denoiser(scheduler.scale_model_input(x, t).numpy(), float(t))
        x = scheduler.step(torch.from_numpy(eps), t, x, **step_options).prev_sample
    return x.numpy()


# diffusers' Euler, Heun, KDPM2 and LMS schedulers draw karras and exponential sigmas between
# the first and last *spaced* timestep's sigmas, not the model's extremes as k-diffusion (and
# DPMSolverMultistep, UniPC) do: those combinations are checked against k-diffusion below.
DIFFUSERS_CASES = [
    SamplerSpec("euler", "default", 6), SamplerSpec("euler", "normal", 5), SamplerSpec("euler", "trailing", 3),
    SamplerSpec("euler", "explicit", 4, (999, 749, 499, 249)),
    SamplerSpec("euler_a", "default", 5, eta=1.0), SamplerSpec("euler_a", "trailing", 4, eta=1.0),
    SamplerSpec("heun", "default", 4), SamplerSpec("heun", "trailing", 3),
    SamplerSpec("dpm2", "default", 4), SamplerSpec("dpm2", "normal", 3),
    SamplerSpec("dpm2_a", "default", 4, eta=1.0), SamplerSpec("dpm2_a", "trailing", 3, eta=1.0),
    SamplerSpec("dpmpp_2m", "karras", 6), SamplerSpec("dpmpp_2m", "trailing", 5),
    SamplerSpec("dpmpp_2m_sde", "karras", 6, eta=1.0), SamplerSpec("dpmpp_2m_sde", "trailing", 5, eta=1.0),
    SamplerSpec("lms", "default", 6), SamplerSpec("lms", "trailing", 5),
    SamplerSpec("ddim", "default", 5, eta=0.0), SamplerSpec("ddim", "trailing", 4, eta=0.0),
    SamplerSpec("ddim", "default", 5, eta=0.6),
    SamplerSpec("ddpm", "default", 6), SamplerSpec("ddpm", "explicit", 4, (999, 749, 499, 249)),
    SamplerSpec("unipc", "karras", 6), SamplerSpec("unipc", "trailing", 5), SamplerSpec("unipc", "karras", 2),
    SamplerSpec("lcm", "default", 4), SamplerSpec("lcm", "explicit", 4, (999, 749, 499, 249)),
    SamplerSpec("lcm", "default", 1),
    SamplerSpec("tcd", "default", 4, gamma=0.3), SamplerSpec("tcd", "default", 6, gamma=0.0),
    SamplerSpec("tcd", "explicit", 3, (999, 666, 333), gamma=0.7),
]


@pytest.mark.parametrize("spec", DIFFUSERS_CASES, ids=lambda s: f"{s.sampler}-{s.schedule}-{s.steps}")
def test_sampler_matches_the_diffusers_scheduler(spec, denoiser, monkeypatch):
    reference = diffusers_reference(spec, denoiser, monkeypatch)
    mine = ours(spec, denoiser)
    assert pcc(mine, reference) >= 0.999
    np.testing.assert_allclose(mine, reference, rtol=1e-3, atol=1e-3 * float(np.abs(reference).max()))


# -- k-diffusion -----------------------------------------------------------------------

K_SAMPLERS = {"euler": sampling.sample_euler, "euler_a": sampling.sample_euler_ancestral,
              "heun": sampling.sample_heun, "dpm2": sampling.sample_dpm_2,
              "dpm2_a": sampling.sample_dpm_2_ancestral, "lms": sampling.sample_lms,
              "dpmpp_2m": sampling.sample_dpmpp_2m, "dpmpp_2m_sde": sampling.sample_dpmpp_2m_sde,
              "dpmpp_2s_a": sampling.sample_dpmpp_2s_ancestral, "dpmpp_3m_sde": sampling.sample_dpmpp_3m_sde}


class CompVisModel(torch.nn.Module):
    """What k-diffusion's CompVisDenoiser wraps: a model with apply_model(x, t) and alphas_cumprod."""

    def __init__(self, denoiser: Denoiser):
        super().__init__()
        self.denoiser = denoiser
        self.alphas_cumprod = torch.from_numpy(NoiseSchedule().alphas_cumprod())

    def apply_model(self, x, t):
        return torch.from_numpy(self.denoiser(x.numpy(), float(t[0])))


def k_diffusion_reference(spec: SamplerSpec, denoiser: Denoiser) -> np.ndarray:
    sampler = spec.build(NoiseSchedule())
    model = external.CompVisDenoiser(CompVisModel(denoiser), quantize=getattr(sampler, "whole_timesteps", False))
    sigmas = torch.from_numpy(sampler.sigmas)
    x = torch.from_numpy(initial_noise()) * sampler.init_noise_sigma
    options = {"disable": True}
    if spec.eta is not None:
        options.update(eta=spec.eta, noise_sampler=same_noise())
    return K_SAMPLERS[spec.sampler](model, x, sigmas, **options).numpy()


K_CASES = [
    SamplerSpec("euler", "karras", 5), SamplerSpec("euler", "exponential", 4), SamplerSpec("heun", "karras", 4),
    SamplerSpec("dpm2", "karras", 4), SamplerSpec("lms", "karras", 6), SamplerSpec("euler_a", "karras", 5, eta=1.0),
    SamplerSpec("dpmpp_2s_a", "karras", 5, eta=1.0), SamplerSpec("dpmpp_2s_a", "default", 4, eta=0.5),
    SamplerSpec("dpmpp_3m_sde", "karras", 7, eta=1.0), SamplerSpec("dpmpp_3m_sde", "exponential", 6, eta=0.5),
    SamplerSpec("dpmpp_3m_sde", "trailing", 2, eta=1.0),
    SamplerSpec("dpmpp_2m_sde", "karras", 6, eta=0.4), SamplerSpec("euler_a", "sgm_uniform", 5, eta=0.7),
    SamplerSpec("heun", "simple", 4), SamplerSpec("dpm2", "exponential", 4), SamplerSpec("lms", "sgm_uniform", 6),
    SamplerSpec("dpm2_a", "karras", 4, eta=0.8), SamplerSpec("dpmpp_2m", "simple", 6),
    SamplerSpec("dpmpp_2m", "exponential", 5),
]


@pytest.mark.parametrize("spec", K_CASES, ids=lambda s: f"{s.sampler}-{s.schedule}-{s.steps}-eta{s.eta}")
def test_sampler_matches_k_diffusion(spec, denoiser):
    reference = k_diffusion_reference(spec, denoiser)
    mine = ours(spec, denoiser)
    assert pcc(mine, reference) >= 0.999
    np.testing.assert_allclose(mine, reference, rtol=1e-3, atol=1e-3 * float(np.abs(reference).max()))


# -- ipndm -----------------------------------------------------------------------------


def ipndm_reference(model, x: torch.Tensor, sigmas: torch.Tensor, max_order: int = 4) -> torch.Tensor:
    """Improved PNDM from its formulas: an Euler step, then Adams-Bashforth steps of order 2, 3
    and 4 with the fixed weights (3, -1)/2, (23, -16, 5)/12 and (55, -59, 37, -9)/24 over the
    derivatives d = (x - denoised) / sigma of this and the previous steps."""
    history: list[torch.Tensor] = []
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        d = (x - model(x, sigma.reshape(1))) / sigma
        order = min(max_order, i + 1)
        if order == 1:
            slope = d
        elif order == 2:
            slope = (3 * d - history[-1]) / 2
        elif order == 3:
            slope = (23 * d - 16 * history[-1] + 5 * history[-2]) / 12
        else:
            slope = (55 * d - 59 * history[-1] + 37 * history[-2] - 9 * history[-3]) / 24
        x = x + (sigma_next - sigma) * slope
        history = (history + [d])[-(max_order - 1):]
    return x


@pytest.mark.parametrize("schedule,steps", [("karras", 7), ("default", 5), ("exponential", 3)])
def test_ipndm_matches_its_formulas(schedule, steps, denoiser):
    spec = SamplerSpec("ipndm", schedule, steps)
    sampler = spec.build(NoiseSchedule())
    model = external.CompVisDenoiser(CompVisModel(denoiser))
    x = torch.from_numpy(initial_noise()) * sampler.init_noise_sigma
    reference = ipndm_reference(model, x, torch.from_numpy(sampler.sigmas)).numpy()
    mine = ours(spec, denoiser)
    assert pcc(mine, reference) >= 0.999
    np.testing.assert_allclose(mine, reference, rtol=1e-3, atol=1e-3 * float(np.abs(reference).max()))
    if steps > 4:
        euler = ours(SamplerSpec("euler", schedule, steps), denoiser)
        assert not np.allclose(mine, euler, atol=1e-3), "the multistep history changes the result"
