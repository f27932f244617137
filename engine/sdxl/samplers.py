"""Samplers: Euler, Euler ancestral, DPM++ 2M Karras and the SDXL-Turbo mode.

Each follows the diffusers scheduler of the same name step for step (same sigmas,
same timesteps, same float32 update), so given the same noise they give the same
latents. Unlike a diffusers scheduler, a sampler keeps no hidden state: everything
a step needs from earlier steps lives in a `SamplerState` the caller owns, which is
what makes a run resumable from a checkpoint bit for bit.

    sampler = make_sampler("dpmpp_2m_karras", steps=20, schedule=NoiseSchedule.from_model(root))
    x = noise * sampler.init_noise_sigma
    state = SamplerState()
    for i in range(sampler.steps):
        eps = unet(sampler.scale_input(i, x), sampler.timesteps[i], ...)
        x = sampler.step(i, x, eps, state, rng)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import InputError, ModelFileError

SAMPLERS = ("euler", "euler_a", "dpmpp_2m_karras")
SCHEDULER_CONFIG = Path("scheduler") / "scheduler_config.json"


@dataclass(frozen=True)
class NoiseSchedule:
    """The training noise schedule, from a model's scheduler_config.json (SDXL base's by default)."""

    num_train_timesteps: int = 1000
    beta_start: float = 0.00085
    beta_end: float = 0.012
    beta_schedule: str = "scaled_linear"
    timestep_spacing: str = "leading"
    steps_offset: int = 1
    prediction_type: str = "epsilon"

    @classmethod
    def from_model(cls, model_root: str | Path) -> "NoiseSchedule":
        """Read `scheduler/scheduler_config.json` under a model root; SDXL base's values if absent."""
        path = Path(model_root) / SCHEDULER_CONFIG
        if not path.is_file():
            return cls()
        try:
            cfg = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ModelFileError(f"{path}: not a readable JSON scheduler config ({e})") from None
        known = {k: cfg[k] for k in cls.__dataclass_fields__ if k in cfg}
        schedule = cls(**known)
        schedule.validate(path)
        return schedule

    def validate(self, where: object = "scheduler config") -> None:
        if self.beta_schedule not in ("scaled_linear", "linear"):
            raise ModelFileError(f"{where}: beta_schedule '{self.beta_schedule}' is not supported "
                                 "(SDXL uses scaled_linear)")
        if self.prediction_type != "epsilon":
            raise ModelFileError(f"{where}: prediction_type '{self.prediction_type}' is not supported "
                                 "(SDXL base and Turbo predict epsilon)")
        if self.timestep_spacing not in ("leading", "trailing", "linspace"):
            raise ModelFileError(f"{where}: timestep_spacing '{self.timestep_spacing}' is not one of "
                                 "leading, trailing, linspace")
        if self.num_train_timesteps < 2:
            raise ModelFileError(f"{where}: num_train_timesteps must be at least 2")

    def train_sigmas(self) -> np.ndarray:
        """sigma_t = sqrt((1 - alphabar_t) / alphabar_t) for every training timestep, float32."""
        n = self.num_train_timesteps
        if self.beta_schedule == "scaled_linear":
            betas = _linspace_f32(self.beta_start ** 0.5, self.beta_end ** 0.5, n) ** 2
        else:
            betas = _linspace_f32(self.beta_start, self.beta_end, n)
        # float32 products accumulated in float64, as torch.cumprod does on the CPU
        alphas_cumprod = np.cumprod((np.float32(1.0) - betas).astype(np.float64)).astype(np.float32)
        return np.sqrt((1 - alphas_cumprod) / alphas_cumprod).astype(np.float32)

    def spaced_timesteps(self, steps: int, spacing: str | None = None) -> np.ndarray:
        """The training timesteps a run of `steps` visits, highest first (float64)."""
        n = self.num_train_timesteps
        spacing = spacing or self.timestep_spacing
        if spacing == "linspace":
            return np.linspace(0, n - 1, steps, dtype=np.float32)[::-1].astype(np.float64)
        if spacing == "leading":
            ratio = n // steps
            return (np.arange(steps) * ratio).round()[::-1].astype(np.float32).astype(np.float64) + self.steps_offset
        ratio = n / steps
        return np.arange(n, 0, -ratio).round().astype(np.float32).astype(np.float64) - 1


def _linspace_f32(start: float, end: float, n: int) -> np.ndarray:
    """torch.linspace in float32, value for value (diffusers builds its betas with it): a
    float32 step, fused multiply-add from the start for the first half, from the end after."""
    a, b = np.float32(start), np.float32(end)
    step = np.float64(np.float32((b - a) / np.float32(max(n - 1, 1))))
    i = np.arange(n)
    return np.where(i < n // 2, np.float64(a) + step * i, np.float64(b) - step * (n - 1 - i)).astype(np.float32)


@dataclass
class SamplerState:
    """What a multistep sampler carries from one step to the next (checkpointed with the latents)."""

    previous_denoised: np.ndarray | None = None
    """DPM++ 2M: the denoised estimate of the previous step."""

    def arrays(self) -> dict[str, np.ndarray]:
        return {} if self.previous_denoised is None else {"previous_denoised": self.previous_denoised}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "SamplerState":
        return cls(previous_denoised=arrays.get("previous_denoised"))


@dataclass
class Sampler:
    """A sampler over fixed sigmas: `timesteps[i]` goes to the UNet at step i."""

    name: str
    sigmas: np.ndarray           # steps + 1 values, float32, ending at 0
    timesteps: np.ndarray        # steps values (float64; integers for DPM++)
    init_noise_sigma: float
    ancestral: bool = False

    @property
    def steps(self) -> int:
        return len(self.timesteps)

    def scale_input(self, i: int, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def step(self, i: int, x: np.ndarray, eps: np.ndarray, state: SamplerState,
             rng: np.random.Generator | None = None) -> np.ndarray:
        raise NotImplementedError


class EulerSampler(Sampler):
    """diffusers EulerDiscreteScheduler (s_churn 0) and EulerAncestralDiscreteScheduler."""

    def scale_input(self, i: int, x: np.ndarray) -> np.ndarray:
        sigma = self.sigmas[i]
        return (x / np.sqrt(sigma * sigma + np.float32(1.0))).astype(np.float32)

    def step(self, i: int, x: np.ndarray, eps: np.ndarray, state: SamplerState,
             rng: np.random.Generator | None = None) -> np.ndarray:
        sigma, sigma_next = self.sigmas[i], self.sigmas[i + 1]
        denoised = x - sigma * eps
        derivative = (x - denoised) / sigma
        if not self.ancestral:
            return (x + derivative * (sigma_next - sigma)).astype(np.float32)
        sigma_up = np.sqrt(sigma_next ** 2 * (sigma ** 2 - sigma_next ** 2) / sigma ** 2)
        sigma_down = np.sqrt(sigma_next ** 2 - sigma_up ** 2)
        out = x + derivative * (sigma_down - sigma)
        if rng is None:
            raise ValueError("an ancestral sampler needs a random generator")
        out += draw_noise(rng, x.shape) * sigma_up
        return out.astype(np.float32)


class DPMPP2MSampler(Sampler):
    """diffusers DPMSolverMultistepScheduler: dpmsolver++, order 2, midpoint, Karras sigmas,
    lower_order_final, final sigma 0. Works in the variance-preserving latent space
    (init_noise_sigma 1, model input unscaled)."""

    def scale_input(self, i: int, x: np.ndarray) -> np.ndarray:
        return x

    def step(self, i: int, x: np.ndarray, eps: np.ndarray, state: SamplerState,
             rng: np.random.Generator | None = None) -> np.ndarray:
        alpha_s, sigma_s = _alpha_sigma(self.sigmas[i])
        alpha_t, sigma_t = _alpha_sigma(self.sigmas[i + 1])
        denoised = ((x - sigma_s * eps) / alpha_s).astype(np.float32)
        h = _lambda(alpha_t, sigma_t) - _lambda(alpha_s, sigma_s)
        first_order = state.previous_denoised is None or i == self.steps - 1
        if first_order:
            out = (sigma_t / sigma_s) * x - (alpha_t * (np.exp(-h) - np.float32(1.0))) * denoised
        else:
            alpha_p, sigma_p = _alpha_sigma(self.sigmas[i - 1])
            r0 = (_lambda(alpha_s, sigma_s) - _lambda(alpha_p, sigma_p)) / h
            d1 = (np.float32(1.0) / r0) * (denoised - state.previous_denoised)
            c = alpha_t * (np.exp(-h) - np.float32(1.0))
            out = (sigma_t / sigma_s) * x - c * denoised - np.float32(0.5) * c * d1
        state.previous_denoised = denoised
        return out.astype(np.float32)


def _alpha_sigma(sigma: np.float32) -> tuple[np.float32, np.float32]:
    alpha = np.float32(1.0) / np.sqrt(sigma * sigma + np.float32(1.0))
    return alpha, sigma * alpha


def _lambda(alpha: np.float32, sigma: np.float32) -> np.float32:
    # At the final sigma 0 this is +inf, as in diffusers, so exp(-h) = 0 and the step lands on denoised.
    with np.errstate(divide="ignore"):
        return np.log(alpha) - np.log(sigma)


def draw_noise(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Unit Gaussian noise, float32, from numpy's PCG64-based Generator (the same bits on
    every platform for a given numpy major version)."""
    return rng.standard_normal(shape, dtype=np.float32)


def make_sampler(name: str, steps: int, schedule: NoiseSchedule | None = None, turbo: bool = False) -> Sampler:
    """A sampler for `steps` steps. `turbo` is SDXL-Turbo's setting: Euler ancestral with
    trailing timestep spacing (use it with guidance 0, 1-4 steps)."""
    schedule = schedule or NoiseSchedule()
    if name not in SAMPLERS:
        raise InputError(f"unknown sampler '{name}'; choose one of: {', '.join(SAMPLERS)}")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise InputError(f"steps must be a whole number of at least 1, got {steps!r}")
    if turbo and name != "euler_a":
        raise InputError(f"turbo mode uses the euler_a sampler, not '{name}'")
    table = schedule.train_sigmas()
    if name == "dpmpp_2m_karras":
        return _karras_dpmpp(table, steps)
    spacing = "trailing" if turbo else schedule.timestep_spacing
    timesteps = schedule.spaced_timesteps(steps, spacing)
    sigmas = np.interp(timesteps, np.arange(len(table)), table.astype(np.float64))
    sigmas = np.concatenate([sigmas, [0.0]]).astype(np.float32)
    init = float(sigmas.max()) if spacing in ("linspace", "trailing") else math.sqrt(float(sigmas.max()) ** 2 + 1)
    return EulerSampler(name, sigmas, timesteps, init, ancestral=name == "euler_a")


def _karras_dpmpp(table: np.ndarray, steps: int) -> Sampler:
    log_table = np.log(table).astype(np.float64)
    sigma_min, sigma_max = float(table[0]), float(table[-1])
    rho = 7.0
    ramp = np.linspace(0, 1, steps)
    sigmas = (sigma_max ** (1 / rho) + ramp * (sigma_min ** (1 / rho) - sigma_max ** (1 / rho))) ** rho
    timesteps = np.round(_sigma_to_t(sigmas, log_table))
    return DPMPP2MSampler("dpmpp_2m_karras", np.concatenate([sigmas, [0.0]]).astype(np.float32), timesteps, 1.0)


def _sigma_to_t(sigmas: np.ndarray, log_table: np.ndarray) -> np.ndarray:
    """The fractional training timestep of each sigma, interpolating log sigma linearly."""
    log_sigma = np.log(np.maximum(sigmas, 1e-10))
    dists = log_sigma[None, :] - log_table[:, None]
    low = np.cumsum(dists >= 0, axis=0).argmax(axis=0).clip(max=len(log_table) - 2)
    w = np.clip((log_table[low] - log_sigma) / (log_table[low] - log_table[low + 1]), 0, 1)
    return (1 - w) * low + w * (low + 1)
