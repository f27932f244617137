"""Schedules: which noise levels (sigmas) and training timesteps a run of N steps visits.

    default      the model's own spacing (scheduler_config.json's timestep_spacing: "leading"
                 for SDXL base, "trailing" for SDXL-Turbo), as diffusers' Euler schedulers space it
    normal       timesteps evenly spaced from the last training timestep to 0 (diffusers "linspace")
    karras       sigmas of Karras et al. (2022), rho 7, between the model's smallest and largest sigma
    exponential  sigmas evenly spaced in log sigma
    sgm_uniform  timesteps evenly spaced from the last to 0, the last step left out (ComfyUI's sgm_uniform)
    simple       every (1000/N)th training sigma from the top (ComfyUI's simple)
    trailing     timesteps evenly spaced, counted back from the last one (diffusers "trailing")
    explicit     a list of training timesteps, e.g. 999,749,499,249 (`timesteps=`)

A timestep between training timesteps gets its sigma by linear interpolation of the
training sigmas, and a sigma its fractional timestep by interpolating log sigma, as
diffusers does. The run starts from noise scaled by `init_noise_sigma`: the largest sigma
for the normal and trailing spacings, sqrt(sigma^2 + 1) otherwise (as diffusers' Euler
schedulers do; the difference is a fraction of a percent).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.errors import InputError
from engine.sdxl.samplers.noise_schedule import NoiseSchedule

SCHEDULES = ("default", "normal", "karras", "exponential", "sgm_uniform", "simple", "trailing")
EXPLICIT = "explicit"
MAX_STEPS = 1000


@dataclass(frozen=True)
class Schedule:
    """The noise levels of one run: step i goes from sigmas[i] to sigmas[i + 1]."""

    name: str                  # one of SCHEDULES, or "explicit"
    sigmas: np.ndarray         # steps + 1 values, float32, descending, the last 0
    timesteps: np.ndarray      # steps training timesteps, float64 (fractional for sigma-defined schedules)
    init_noise_sigma: float
    noise: NoiseSchedule       # the model's training schedule

    @property
    def steps(self) -> int:
        return len(self.timesteps)


def make_schedule(name: str, steps: int, noise: NoiseSchedule) -> Schedule:
    """The schedule `name` (one of SCHEDULES) for `steps` steps of a model with training schedule `noise`."""
    check_steps(steps)
    table = noise.train_sigmas()
    n = noise.num_train_timesteps
    if name in ("karras", "exponential"):
        sigma_min, sigma_max = float(table[0]), float(table[-1])
        if name == "karras":
            rho = 7.0
            ramp = np.linspace(0, 1, steps)
            sigmas = (sigma_max ** (1 / rho) + ramp * (sigma_min ** (1 / rho) - sigma_max ** (1 / rho))) ** rho
        else:
            sigmas = np.exp(np.linspace(math.log(sigma_max), math.log(sigma_min), steps))
        return Schedule(name, _ending_at_zero(sigmas), sigma_to_t(sigmas, table), _init_sigma(sigmas, False), noise)
    if name == "default":
        timesteps = noise.spaced_timesteps(steps)
    elif name == "normal":
        timesteps = noise.spaced_timesteps(steps, "linspace")
    elif name == "trailing":
        timesteps = noise.spaced_timesteps(steps, "trailing")
    elif name == "sgm_uniform":
        timesteps = np.linspace(n - 1, 0, steps + 1)[:-1]
    elif name == "simple":
        stride = n / steps
        timesteps = np.array([n - 1 - int(i * stride) for i in range(steps)], dtype=np.float64)
    else:
        raise ValueError(f"not a schedule: {name!r}")
    spacing = {"default": noise.timestep_spacing, "normal": "linspace", "trailing": "trailing"}.get(name)
    return _from_timesteps(name, timesteps, noise, spacing in ("linspace", "trailing"))


def explicit_schedule(timesteps: Sequence[int], noise: NoiseSchedule) -> Schedule:
    """The schedule that visits exactly these training timesteps, highest first."""
    return _from_timesteps(EXPLICIT, np.asarray(check_timesteps(timesteps, noise), dtype=np.float64), noise, False)


def consistency_schedule(steps: int, noise: NoiseSchedule, distilled_steps: int = 50) -> Schedule:
    """lcm's and tcd's own spacing ("default" for them): `steps` of the 50 timesteps the model was
    distilled on (19, 39, ..., 999), evenly spaced by index from the top, as diffusers' LCMScheduler."""
    check_steps(steps)
    if steps > distilled_steps:
        raise InputError(f"lcm and tcd take at most {distilled_steps} steps on their own schedule, got {steps}; "
                         "use fewer steps (they are made for 1-8) or another schedule")
    stride = noise.num_train_timesteps // distilled_steps
    origin = (np.arange(1, distilled_steps + 1) * stride - 1)[::-1]
    picked = origin[np.floor(np.linspace(0, distilled_steps, steps, endpoint=False)).astype(np.int64)]
    return _from_timesteps("default", picked.astype(np.float64), noise, False)


def check_timesteps(timesteps: Sequence[int], noise: NoiseSchedule) -> tuple[int, ...]:
    """Explicit timesteps as a tuple of ints; a clear InputError if they are not whole, in range and descending."""
    last = noise.num_train_timesteps - 1
    if isinstance(timesteps, (str, bytes)) or not isinstance(timesteps, Sequence) or not timesteps:
        raise InputError(f"timesteps must be a list of whole numbers from {last} down to 0, e.g. 999,749,499,249; "
                         f"got {timesteps!r}")
    bad = [t for t in timesteps if not isinstance(t, (int, np.integer)) or isinstance(t, bool)]
    if bad:
        raise InputError(f"timesteps must be whole numbers, got {bad[0]!r} in {list(timesteps)}")
    values = tuple(int(t) for t in timesteps)
    outside = [t for t in values if not 0 <= t <= last]
    if outside:
        raise InputError(f"timestep {outside[0]} is outside the model's training timesteps 0..{last} "
                         f"(in {list(values)})")
    for a, b in zip(values, values[1:]):
        if b >= a:
            raise InputError(f"timesteps must go down, highest (noisiest) first, e.g. 999,749,499,249; "
                             f"{a} is followed by {b} in {list(values)}")
    check_steps(len(values))
    return values


def parse_timesteps(text: str) -> tuple[int, ...]:
    """Timesteps written as text, "999,749,499,249" (commas and/or spaces between them)."""
    words = text.replace(",", " ").split()
    bad = [w for w in words if not w.isdigit()]
    if not words or bad:
        raise InputError(f"timesteps must be whole numbers separated by commas, e.g. 999,749,499,249; "
                         f"got {text!r}" + (f" ({bad[0]!r} is not a whole number)" if bad else ""))
    return tuple(int(w) for w in words)


def check_steps(steps: object) -> None:
    if not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= MAX_STEPS:
        raise InputError(f"steps must be a whole number from 1 to {MAX_STEPS}, got {steps!r}")


def _from_timesteps(name: str, timesteps: np.ndarray, noise: NoiseSchedule, spaced: bool) -> Schedule:
    table = noise.train_sigmas()
    sigmas = np.interp(timesteps, np.arange(len(table)), table.astype(np.float64))
    return Schedule(name, _ending_at_zero(sigmas), timesteps, _init_sigma(sigmas, spaced), noise)


def _ending_at_zero(sigmas: np.ndarray) -> np.ndarray:
    return np.concatenate([sigmas, [0.0]]).astype(np.float32)


def _init_sigma(sigmas: np.ndarray, spaced: bool) -> float:
    top = float(np.float32(sigmas.max()))
    return top if spaced else math.sqrt(top * top + 1)


def sigma_to_t(sigmas: np.ndarray, table: np.ndarray) -> np.ndarray:
    """The fractional training timestep of each sigma, interpolating log sigma linearly (diffusers' _sigma_to_t)."""
    log_table = np.log(table).astype(np.float64)
    log_sigma = np.log(np.maximum(np.asarray(sigmas, dtype=np.float64), 1e-10))
    dists = log_sigma[None, :] - log_table[:, None]
    low = np.cumsum(dists >= 0, axis=0).argmax(axis=0).clip(max=len(log_table) - 2)
    w = np.clip((log_table[low] - log_sigma) / (log_table[low] - log_table[low + 1]), 0, 1)
    return (1 - w) * low + w * (low + 1)
