"""The training noise schedule (betas, alphas, sigmas per training timestep), from a model's scheduler_config.json."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import ModelFileError

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
    set_alpha_to_one: bool = False    # DDIM's last step ends at alphabar 1 (True) or at timestep 0's (SDXL: False)

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

    def alphas_cumprod(self) -> np.ndarray:
        """alphabar_t, the share of the picture left at every training timestep, float32 (as diffusers)."""
        n = self.num_train_timesteps
        if self.beta_schedule == "scaled_linear":
            betas = _linspace_f32(self.beta_start ** 0.5, self.beta_end ** 0.5, n) ** 2
        else:
            betas = _linspace_f32(self.beta_start, self.beta_end, n)
        # float32 products accumulated in float64, as torch.cumprod does on the CPU
        return np.cumprod((np.float32(1.0) - betas).astype(np.float64)).astype(np.float32)

    def train_sigmas(self) -> np.ndarray:
        """sigma_t = sqrt((1 - alphabar_t) / alphabar_t) for every training timestep, float32."""
        alphas_cumprod = self.alphas_cumprod()
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
