"""Every general-purpose sampler on a model whose answer is known: Gaussian data and its exact denoiser.

For data x0 ~ N(MU, S^2) the ideal denoiser is linear and the probability-flow ODE has a
closed-form solution, so without any reference implementation: a deterministic sampler must
converge to that solution as the steps grow, and a stochastic one must draw from the data's
distribution. A wrong input scaling, a wrong sigma or timestep, or too much or too little fresh
noise each break one of these. (lcm and tcd are for consistency-distilled models, which this is
not; their references are in test_sampler_references.py.)
"""

from __future__ import annotations

import numpy as np
import pytest

from engine.sdxl.samplers import NoiseSchedule, SamplerSpec

MU, S = 0.7, 0.5
NOISE = NoiseSchedule(set_alpha_to_one=True)      # ddim ends at sigma 0 like the others
TABLE = NOISE.train_sigmas().astype(np.float64)


def exact_eps(x_in: np.ndarray, t: float) -> np.ndarray:
    """The ideal noise prediction for the UNet's input at timestep t: every sampler passes
    (x0 + sigma * noise) / sqrt(sigma^2 + 1), the scaling the UNet was trained on."""
    sigma = float(np.interp(t, np.arange(len(TABLE)), TABLE))
    x = x_in.astype(np.float64) * np.sqrt(sigma * sigma + 1)
    denoised = (S * S * x + sigma * sigma * MU) / (S * S + sigma * sigma)
    return ((x - denoised) / sigma).astype(np.float32)


def sample(spec: SamplerSpec, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(the sampler's results from n unit noises, the exact ODE solution from the same start)."""
    sampler = spec.build(NOISE)
    rng = np.random.Generator(np.random.PCG64(1))
    state = sampler.start(rng.standard_normal((n, 1), dtype=np.float32))
    sigma_start = float(sampler.sigmas[0])
    start = state.x.astype(np.float64) * (np.sqrt(sigma_start ** 2 + 1) if sampler.init_noise_sigma == 1 else 1)
    exact = MU + (start - MU) * S / np.sqrt(S * S + sigma_start ** 2)
    while not sampler.finished(state):
        x_in, t = sampler.model_input(state)
        sampler.advance(state, exact_eps(x_in, t), rng)
    return state.x.astype(np.float64), exact


@pytest.mark.parametrize("name", ["euler", "heun", "dpm2", "dpmpp_2m", "lms", "ipndm", "unipc", "ddim"])
def test_deterministic_samplers_converge_to_the_exact_solution(name):
    errors = []
    for steps in (10, 40):   # the trailing schedule: whole timesteps, so every sampler sees its own sigmas
        x, exact = sample(SamplerSpec.parse(name, "trailing", steps, eta=0.0 if name == "ddim" else None), 2000)
        errors.append(float(np.abs(x - exact).max()))
    assert errors[1] < 0.15
    assert errors[0] / errors[1] > 3, f"errors {errors}: four times the steps should cut the error at least 3x"


@pytest.mark.parametrize("name,eta", [("euler_a", None), ("dpm2_a", None), ("dpmpp_2s_a", None),
                                      ("dpmpp_2m_sde", None), ("dpmpp_3m_sde", None), ("dpmpp_2m_sde", 0.5),
                                      ("ddpm", None), ("ddim", 1.0)])
def test_stochastic_samplers_draw_from_the_data_distribution(name, eta):
    x, _ = sample(SamplerSpec.parse(name, "karras", 40, eta=eta), 20000)
    assert abs(x.mean() - MU) < 0.02, f"mean {x.mean():.3f}, the data's {MU}"
    assert abs(x.std() - S) < 0.1 * S, f"standard deviation {x.std():.3f}, the data's {S}"
