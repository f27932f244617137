"""The sampler interface: one checkpointable state, "what to evaluate next" and "advance with the model's output".

A sampler is a small object over fixed sigmas and timesteps that keeps no hidden state:
everything a run needs to continue lives in a `SamplerState` the caller owns and
checkpoints after every UNet evaluation, so a run killed at any moment resumes to the
same bytes. Samplers that evaluate the UNet more than once per step (heun, dpm2, dpm2_a,
dpmpp_2s_a) keep the stage within the step and its intermediate results in the state too.

    sampler = make_sampler("dpmpp_2m", steps=20, schedule="karras")
    state = sampler.start(noise)
    while not sampler.finished(state):
        x_in, t = sampler.model_input(state)
        sampler.advance(state, unet(x_in, t, ...), rng)
    latents = state.x

Random noise (ancestral and SDE samplers, ddpm, lcm, tcd) comes from `draw_noise` on the
run's numpy PCG64 generator: one draw of the latents' shape at each step that adds noise,
in step order (dpm2_a and dpmpp_2s_a after their second evaluation), none where the
noise would be multiplied by zero (the last step of most samplers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from engine.sdxl.samplers.schedules import Schedule, sigma_to_t

MEMORY = "memory."   # checkpoint array names of the state's memory start with this


def draw_noise(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Unit Gaussian noise, float32, from numpy's PCG64-based Generator (the same bits on
    every platform for a given numpy major version)."""
    return rng.standard_normal(shape, dtype=np.float32)


@dataclass
class SamplerState:
    """Everything a sampler needs to continue a run (all of it but `denoised` is checkpointed)."""

    x: np.ndarray
    """The latents at the start of step `step`, float32, in the sampler's space (x0 + sigma * noise,
    or the variance-preserving form for ddim, ddpm, lcm, tcd); after the last step, the result."""
    step: int = 0
    """Steps completed."""
    stage: int = 0
    """UNet evaluations already done within step `step` (multi-evaluation samplers)."""
    memory: dict[str, np.ndarray] = field(default_factory=dict)
    """Multistep history and the current step's intermediate results, by name."""
    denoised: np.ndarray | None = None
    """The sampler's current estimate of the final latents (x0), set when a step completes;
    None until one does in this process."""

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays a checkpoint holds: "latents" and the memory."""
        return {"latents": self.x, **{MEMORY + k: v for k, v in self.memory.items()}}

    def scalars(self) -> dict[str, int]:
        """The JSON values a checkpoint holds."""
        return {"step": self.step, "stage": self.stage}

    @classmethod
    def restore(cls, arrays: dict[str, np.ndarray], scalars: dict) -> "SamplerState":
        """The state saved as `arrays()` and `scalars()`."""
        memory = {k[len(MEMORY):]: v for k, v in arrays.items() if k.startswith(MEMORY)}
        return cls(arrays["latents"], int(scalars["step"]), int(scalars["stage"]), memory)

    def next_stage(self, **memory: np.ndarray) -> None:
        """One more evaluation of this step is done; keep what the next one needs."""
        self.stage += 1
        self.memory.update(memory)

    def finish_step(self, x: np.ndarray, denoised: np.ndarray, **memory: np.ndarray) -> None:
        """The step is done: its result `x`, its estimate `denoised`, and what later steps need."""
        self.x = np.asarray(x, dtype=np.float32)
        self.denoised = np.asarray(denoised, dtype=np.float32)
        self.step += 1
        self.stage = 0
        self.memory.update(memory)


class Sampler:
    """A sampler over a fixed schedule. Subclasses say what to evaluate next and how to move on."""

    name: str = ""            # the canonical name (SAMPLERS)
    options: dict[str, float] = {}   # what the sampler takes ("eta", tcd's "gamma") and its default

    def __init__(self, schedule: Schedule, eta: float | None = None, gamma: float | None = None):
        self.schedule = schedule
        self.eta = eta
        self.gamma = gamma
        self._before = np.concatenate([[0], np.cumsum([self.stages(i) for i in range(self.steps)])]).astype(int)

    @property
    def steps(self) -> int:
        return self.schedule.steps

    @property
    def sigmas(self) -> np.ndarray:
        return self.schedule.sigmas

    @property
    def timesteps(self) -> np.ndarray:
        return self.schedule.timesteps

    @property
    def init_noise_sigma(self) -> float:
        return self.schedule.init_noise_sigma

    @property
    def evaluations(self) -> int:
        """UNet evaluations in the whole run (each guided evaluation counted once)."""
        return int(self._before[-1])

    def evaluations_before(self, step: int) -> int:
        """UNet evaluations done before step `step` starts."""
        return int(self._before[step])

    def stages(self, step: int) -> int:
        """UNet evaluations step `step` takes."""
        return 1

    def start(self, noise: np.ndarray) -> SamplerState:
        """The state at the start of a run from unit Gaussian `noise`."""
        return SamplerState((np.asarray(noise, dtype=np.float32) * np.float32(self.init_noise_sigma)))

    def finished(self, state: SamplerState) -> bool:
        return state.step >= self.steps

    def model_input(self, state: SamplerState) -> tuple[np.ndarray, float]:
        """The UNet's input latents and timestep for the next evaluation."""
        raise NotImplementedError

    def advance(self, state: SamplerState, eps: np.ndarray, rng: np.random.Generator | None = None) -> None:
        """Move `state` on with the (guided) noise prediction for `model_input(state)`."""
        raise NotImplementedError


class SigmaSampler(Sampler):
    """A sampler on the Karras et al. ODE in sigma space, as k-diffusion writes them: the state
    holds x = x0 + sigma * noise, the UNet sees x / sqrt(sigma^2 + 1), and each update works
    on the denoised estimate x - sigma * eps."""

    whole_timesteps = False   # as diffusers' DPMSolverMultistep and UniPC: whole timesteps, unit noise to start

    def __init__(self, schedule: Schedule, eta: float | None = None, gamma: float | None = None):
        super().__init__(schedule, eta, gamma)
        self.train_sigmas = schedule.noise.train_sigmas()

    @property
    def init_noise_sigma(self) -> float:
        if not self.whole_timesteps:
            return self.schedule.init_noise_sigma
        # diffusers' multistep samplers start from unit noise in the model's own space, whatever the spacing
        top = float(self.sigmas[0])
        return math.sqrt(top * top + 1)

    def point(self, state: SamplerState) -> tuple[np.ndarray, float]:
        """Where the UNet evaluates next: latents and sigma. Most samplers: the step's start."""
        return state.x, float(self.sigmas[state.step])

    def update(self, state: SamplerState, denoised: np.ndarray, rng: np.random.Generator | None) -> None:
        raise NotImplementedError

    def landed(self, state: SamplerState, denoised: np.ndarray, **memory: np.ndarray) -> bool:
        """On a step to sigma 0, finish it on the denoised estimate (what the exponential
        integrators' update gives there) and say so."""
        if self.sigmas[state.step + 1] != 0:
            return False
        state.finish_step(denoised, denoised, **memory)
        return True

    def model_input(self, state: SamplerState) -> tuple[np.ndarray, float]:
        x, sigma = self.point(state)
        scaled = x / np.float32(np.sqrt(np.float32(sigma) ** 2 + np.float32(1.0)))
        return scaled.astype(np.float32), self.timestep(sigma)

    def advance(self, state: SamplerState, eps: np.ndarray, rng: np.random.Generator | None = None) -> None:
        x, sigma = self.point(state)
        self.update(state, (x - np.float32(sigma) * eps).astype(np.float32), rng)

    def timestep(self, sigma: float) -> float:
        """The training timestep of `sigma`: the schedule's own where it has one, else interpolated."""
        hit = np.flatnonzero(self.sigmas[:-1] == np.float32(sigma))
        if len(hit):
            t = float(self.timesteps[hit[0]])
        else:
            t = float(sigma_to_t(np.array([sigma]), self.train_sigmas)[0])
        return float(round(t)) if self.whole_timesteps else t


class MidpointSampler(SigmaSampler):
    """Two evaluations a step: at its start, and halfway in log sigma to where it goes (sigma_next,
    or for an ancestral sampler sigma_down, after which it adds sigma_up of fresh noise). A step
    that goes to sigma 0 takes the first evaluation only."""

    ancestral = False

    def target(self, step: int) -> tuple[float, float]:
        """(the sigma step `step` goes down to, the noise it adds back)."""
        sigma, sigma_next = float(self.sigmas[step]), float(self.sigmas[step + 1])
        return ancestral_step(sigma, sigma_next, self.eta) if self.ancestral else (sigma_next, 0.0)

    def stages(self, step: int) -> int:
        return 1 if self.target(step)[0] == 0 else 2

    def midpoint(self, step: int) -> float:
        return math.exp((math.log(float(self.sigmas[step])) + math.log(self.target(step)[0])) / 2)

    def point(self, state: SamplerState) -> tuple[np.ndarray, float]:
        if state.stage == 0:
            return super().point(state)
        return state.memory["x_mid"], self.midpoint(state.step)


def ancestral_step(sigma: float, sigma_next: float, eta: float) -> tuple[float, float]:
    """(sigma_down, sigma_up): how far an ancestral step goes down deterministically and how much
    fresh noise it adds back (k-diffusion's get_ancestral_step)."""
    if not eta:
        return sigma_next, 0.0
    sigma_up = min(sigma_next, eta * (sigma_next ** 2 * (sigma ** 2 - sigma_next ** 2) / sigma ** 2) ** 0.5)
    return (sigma_next ** 2 - sigma_up ** 2) ** 0.5, sigma_up


def noise_for(rng: np.random.Generator | None, like: np.ndarray) -> np.ndarray:
    """The next noise draw for a stochastic sampler."""
    if rng is None:
        raise ValueError("a stochastic sampler needs the run's random generator")
    return draw_noise(rng, like.shape)
