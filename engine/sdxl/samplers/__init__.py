"""Samplers and schedules: what a run's sampling is (`SamplerSpec`), and the samplers it builds.

    spec = SamplerSpec.parse("dpmpp_2m", schedule="karras", steps=20)     # names as users write them
    sampler = spec.build(NoiseSchedule.from_model(root))
    state = sampler.start(noise)
    while not sampler.finished(state):
        x_in, t = sampler.model_input(state)
        sampler.advance(state, unet(x_in, t, ...), rng)

Samplers (SAMPLERS): euler, euler_a, heun, dpm2, dpm2_a, dpmpp_2m, dpmpp_2m_sde,
dpmpp_2s_a, dpmpp_3m_sde, lms, ipndm, unipc (sigma space, karras.py and dpm_solver.py),
ddim, ddpm, lcm, tcd (training timesteps, discrete.py). Schedules (SCHEDULES, schedules.py):
default, normal, karras, exponential, sgm_uniform, simple, trailing, or explicit timesteps.
`eta` (euler_a, dpm2_a, dpmpp_2s_a, dpmpp_2m_sde, dpmpp_3m_sde: default 1; ddim: default 0)
scales the fresh noise each step adds; tcd's `gamma` (default 0.3; diffusers calls it eta)
does the same for tcd. The state and the order noise is drawn in: sampler.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine import defaults
from engine.errors import InputError
from engine.sdxl.samplers.discrete import DDIM, DDPM, LCM, TCD
from engine.sdxl.samplers.dpm_solver import DPMPP2M, DPMPP2MSDE, DPMPP3MSDE, DPMPP2SAncestral, UniPC
from engine.sdxl.samplers.karras import DPM2, IPNDM, LMS, DPM2Ancestral, Euler, EulerAncestral, Heun
from engine.sdxl.samplers.names import (SAMPLER_LABELS, SAMPLERS, SCHEDULE_LABELS, nearest_first, sampler_name,
                                        schedule_name)
from engine.sdxl.samplers.noise_schedule import NoiseSchedule
from engine.sdxl.samplers.sampler import Sampler, SamplerState, draw_noise
from engine.sdxl.samplers.schedules import (EXPLICIT, SCHEDULES, Schedule, check_steps, check_timesteps,
                                            consistency_schedule, explicit_schedule, make_schedule, parse_timesteps)

__all__ = ["SAMPLERS", "SCHEDULES", "SAMPLER_LABELS", "SCHEDULE_LABELS", "EXPLICIT", "NoiseSchedule", "Sampler",
           "SamplerSpec", "SamplerState", "Schedule", "draw_noise", "make_sampler", "nearest_first",
           "parse_timesteps"]

KINDS: dict[str, type[Sampler]] = {cls.name: cls for cls in (
    Euler, EulerAncestral, Heun, DPM2, DPM2Ancestral, DPMPP2M, DPMPP2MSDE, DPMPP2SAncestral, DPMPP3MSDE, LMS, DDIM,
    DDPM, IPNDM, UniPC, LCM, TCD)}
CONSISTENCY = ("lcm", "tcd")     # their "default" schedule is their own (consistency_schedule)
DEFAULT_STEPS = defaults.STEPS


@dataclass(frozen=True)
class SamplerSpec:
    """Everything that decides a run's sampling, checked and in canonical names (a recipe fills one)."""

    sampler: str = "euler"
    schedule: str = "default"                   # one of SCHEDULES, or "explicit" with `timesteps`
    steps: int = DEFAULT_STEPS
    timesteps: tuple[int, ...] | None = None    # explicit training timesteps, highest first
    eta: float | None = None                    # the sampler's (default filled in); None if it takes none
    gamma: float | None = None                  # tcd's (default 0.3); None for the others

    @classmethod
    def parse(cls, sampler: str = "euler", schedule: str | None = None, steps: int | None = None,
              timesteps: object = None, eta: float | None = None, gamma: float | None = None) -> "SamplerSpec":
        """Read a sampler setting as a user gives it: names in any spelling (dpmpp_2m_karras means
        dpmpp_2m with karras), timesteps as a list or "999,749,499,249", defaults filled in.
        Anything that does not fit raises InputError saying what would."""
        name, shorthand = sampler_name(sampler)
        if schedule is not None:
            schedule = schedule_name(schedule)
            if shorthand is not None and shorthand != schedule:
                raise InputError(f"sampler '{sampler}' already names the {shorthand} schedule, which is not the "
                                 f"{schedule} schedule asked for; give the sampler as '{name}'")
        schedule = schedule or shorthand
        if timesteps is not None:
            if isinstance(timesteps, str):
                timesteps = parse_timesteps(timesteps)
            timesteps = check_timesteps(timesteps, NoiseSchedule())
            if schedule not in (None, "default"):
                raise InputError(f"give either the {schedule} schedule or explicit timesteps, not both")
            if steps is not None and steps != len(timesteps):
                raise InputError(f"{len(timesteps)} timesteps were given but {steps} steps; the steps are the "
                                 "timesteps' count (leave steps out)")
            schedule, steps = EXPLICIT, len(timesteps)
        steps = DEFAULT_STEPS if steps is None else steps
        check_steps(steps)
        kind = KINDS[name]
        values = {}
        for option, value in (("eta", eta), ("gamma", gamma)):
            if value is not None and option not in kind.options:
                takers = [n for n, k in KINDS.items() if option in k.options]
                instead = " (tcd's amount of noise is its gamma)" if name == "tcd" else ""
                raise InputError(f"sampler {name} takes no {option}{instead}; {option} is for "
                                 f"{', '.join(takers)}")
            if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)
                                      or not math.isfinite(value) or not 0 <= value <= 1):
                raise InputError(f"{option} must be a number from 0 to 1, got {value!r}")
            values[option] = float(value) if value is not None else kind.options.get(option)
        return cls(name, schedule or "default", steps, timesteps, values["eta"], values["gamma"])

    def build(self, noise: NoiseSchedule | None = None) -> Sampler:
        """The sampler for a model with training schedule `noise` (SDXL base's by default)."""
        noise = noise or NoiseSchedule()
        if self.timesteps is not None:
            schedule = explicit_schedule(self.timesteps, noise)
        elif self.schedule == "default" and self.sampler in CONSISTENCY:
            schedule = consistency_schedule(self.steps, noise)
        else:
            schedule = make_schedule(self.schedule, self.steps, noise)
        return KINDS[self.sampler](schedule, self.eta, self.gamma)

    @property
    def label(self) -> str:
        """The sampler's A1111 name, e.g. "DPM++ 2M"."""
        return SAMPLER_LABELS[self.sampler]


def make_sampler(name: str = "euler", steps: int | None = None, schedule: str | None = None,
                 noise: NoiseSchedule | None = None, timesteps: object = None, eta: float | None = None,
                 gamma: float | None = None) -> Sampler:
    """SamplerSpec.parse(...).build(noise) in one call."""
    return SamplerSpec.parse(name, schedule, steps, timesteps, eta, gamma).build(noise)
