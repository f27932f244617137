"""Samplers on the training timesteps: ddim, ddpm, lcm and tcd, as diffusers' schedulers of the same names.

These work in the variance-preserving space the model was trained in: the state holds
x = sqrt(alphabar_t) x0 + sqrt(1 - alphabar_t) noise, the run starts from unit noise, the
UNet sees x unchanged at whole timestep t, and each step goes to the next timestep of
the schedule (after the last: alphabar 1, or timestep 0's for ddim with SDXL's
set_alpha_to_one false, and for tcd).
"""

from __future__ import annotations

import numpy as np

from engine.errors import InputError
from engine.sdxl.samplers.sampler import Sampler, SamplerState, noise_for
from engine.sdxl.samplers.schedules import Schedule

F32 = np.float32
ONE = F32(1.0)


class DiscreteSampler(Sampler):
    """The shared part: whole timesteps, alphabar at each, the model's x0 estimate."""

    def __init__(self, schedule: Schedule, eta: float | None = None, gamma: float | None = None):
        self.whole = [int(t) for t in np.round(schedule.timesteps)]
        for a, b in zip(self.whole, self.whole[1:]):
            if b >= a:
                raise InputError(f"the {schedule.name} schedule at {schedule.steps} steps visits timestep {a} "
                                 f"twice, which {self.name} cannot do (it steps between whole timesteps); "
                                 "use fewer steps or another schedule")
        super().__init__(schedule, eta, gamma)
        self.alphas_cumprod = schedule.noise.alphas_cumprod()

    @property
    def init_noise_sigma(self) -> float:
        return 1.0

    def model_input(self, state: SamplerState) -> tuple[np.ndarray, float]:
        return state.x, float(self.whole[state.step])

    def next_timestep(self, step: int) -> int:
        """The timestep step `step` goes to; -1 after the last."""
        return self.whole[step + 1] if step + 1 < self.steps else -1

    def advance(self, state: SamplerState, eps: np.ndarray, rng: np.random.Generator | None = None) -> None:
        alpha = self.alphas_cumprod[self.whole[state.step]]
        x0 = ((state.x - (ONE - alpha) ** F32(0.5) * eps) / alpha ** F32(0.5)).astype(np.float32)
        self.update(state, eps, x0, rng)

    def update(self, state: SamplerState, eps: np.ndarray, x0: np.ndarray, rng: np.random.Generator | None) -> None:
        raise NotImplementedError


class DDIM(DiscreteSampler):
    """DDIM; eta 0 is deterministic, eta 1 adds as much noise as DDPM."""

    name = "ddim"
    options = {"eta": 0.0}

    def update(self, state: SamplerState, eps: np.ndarray, x0: np.ndarray, rng: np.random.Generator | None) -> None:
        i = state.step
        alpha = self.alphas_cumprod[self.whole[i]]
        after = self.next_timestep(i)
        final = ONE if self.schedule.noise.set_alpha_to_one else self.alphas_cumprod[0]
        alpha_prev = self.alphas_cumprod[after] if after >= 0 else final
        variance = (ONE - alpha_prev) / (ONE - alpha) * (ONE - alpha / alpha_prev)
        std = F32(self.eta) * variance ** F32(0.5)
        x = alpha_prev ** F32(0.5) * x0 + (ONE - alpha_prev - std ** 2) ** F32(0.5) * eps
        if std > 0:
            x = x + std * noise_for(rng, x)
        state.finish_step(x, x0)


class DDPM(DiscreteSampler):
    """DDPM's ancestral step (the posterior mean plus its "fixed small" variance of fresh noise)."""

    name = "ddpm"

    def update(self, state: SamplerState, eps: np.ndarray, x0: np.ndarray, rng: np.random.Generator | None) -> None:
        i = state.step
        t = self.whole[i]
        alpha = self.alphas_cumprod[t]
        after = self.next_timestep(i)
        alpha_prev = self.alphas_cumprod[after] if after >= 0 else ONE
        step_alpha = alpha / alpha_prev
        step_beta = ONE - step_alpha
        x = (alpha_prev ** F32(0.5) * step_beta / (ONE - alpha)) * x0 \
            + (step_alpha ** F32(0.5) * (ONE - alpha_prev) / (ONE - alpha)) * state.x
        if t > 0:   # diffusers' rule: fresh noise at every timestep above 0, however small its variance
            variance = max((ONE - alpha_prev) / (ONE - alpha) * step_beta, F32(1e-20))
            x = x + variance ** F32(0.5) * noise_for(rng, x)
        state.finish_step(x, x0)


def consistency_scalings(t: int) -> tuple[np.float32, np.float32]:
    """(c_skip, c_out): LCM's boundary condition at timestep t (sigma_data 0.5, timestep scaling 10)."""
    scaled = F32(t * 10.0)
    data = F32(0.5) ** 2
    return data / (scaled ** 2 + data), scaled / (scaled ** 2 + data) ** F32(0.5)


class LCM(DiscreteSampler):
    """Latent consistency: jump to the consistency model's x0, then noise it to the next timestep."""

    name = "lcm"

    def update(self, state: SamplerState, eps: np.ndarray, x0: np.ndarray, rng: np.random.Generator | None) -> None:
        i = state.step
        c_skip, c_out = consistency_scalings(self.whole[i])
        denoised = (c_out * x0 + c_skip * state.x).astype(np.float32)
        if i == self.steps - 1:
            state.finish_step(denoised, denoised)
            return
        alpha_prev = self.alphas_cumprod[self.next_timestep(i)]
        state.finish_step(alpha_prev ** F32(0.5) * denoised + (ONE - alpha_prev) ** F32(0.5) * noise_for(rng, denoised),
                          denoised)


class TCD(DiscreteSampler):
    """Trajectory consistency distillation: go to timestep s = (1 - gamma) * next along the
    model's trajectory, then forward-noise to the next timestep; gamma 0 is deterministic."""

    name = "tcd"
    options = {"gamma": 0.3}

    def update(self, state: SamplerState, eps: np.ndarray, x0: np.ndarray, rng: np.random.Generator | None) -> None:
        i = state.step
        gamma = self.gamma
        after = self.next_timestep(i) if i + 1 < self.steps else 0
        s = int(np.floor(F32(1 - gamma) * F32(after)))
        alpha_prev, alpha_s = self.alphas_cumprod[after], self.alphas_cumprod[s]
        x = alpha_s ** F32(0.5) * x0 + (ONE - alpha_s) ** F32(0.5) * eps
        if gamma > 0 and i < self.steps - 1:
            x = (alpha_prev / alpha_s) ** F32(0.5) * x + (ONE - alpha_prev / alpha_s) ** F32(0.5) * noise_for(rng, x)
        state.finish_step(x, x0)
