"""The settings a config file describes, as frozen dataclasses with their defaults.

``Config`` holds one section's settings per field; frame.config.sections and
frame.config.prompts say which keys each section takes and build these from a file.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from engine import defaults
from frame.config.reader import Problem
from frame.display.config import DisplayConfig
from frame.paths import DEFAULT_MODEL_PATH, LORA_DIR
from frame.themes import Template

# the Inky Impression's four buttons (BCM); on the 13.3" panel C is on 25 because 16 is a chip select
DEFAULT_BUTTONS = {"A": (5, "previous", "latest"), "B": (6, "next", "latest"),
                   "C": (16, "skip", "regenerate"), "D": (24, "status", "none")}
LARGE_PANEL_BUTTON_C = 25


@dataclass(frozen=True)
class ModelSettings:
    path: Path = DEFAULT_MODEL_PATH
    preset: str = "rpi-lowmem"
    lora_folder: Path = LORA_DIR   # where <lora:NAME:WEIGHT> in a prompt finds NAME.safetensors
    decoder: str = "full"       # or "tiny": the model's vae_tiny/ decodes the finished pictures


@dataclass(frozen=True)
class Theme:
    """One kind of picture: its prompt templates and generation settings."""

    name: str
    templates: tuple[Template, ...]
    negative: str = "text, watermark, signature, blurry, lowres"
    recipe: str = "sdxl"                  # engine.sdxl.recipes: the kind of model the sampling is made for
    steps: int = defaults.STEPS             # the sdxl recipe's, as `slowframe generate --help` says
    guidance: float = defaults.GUIDANCE
    sampler: str = "euler"                # engine.sdxl.samplers' canonical name
    schedule: str = "default"             # or "explicit": the recipe's timesteps
    size: tuple[int, int] | None = None   # None: the panel's best size
    images_per_pass: int = 1              # pictures made together (seeds in a row), all kept in the history
    lora: Path | None = None
    lora_weight: float = 1.0
    weight: float = 1.0


@dataclass(frozen=True)
class QuietHours:
    """No refreshes from ``start`` until ``end`` (which may be after midnight)."""

    start: dt.time
    end: dt.time

    def contains(self, t: dt.time) -> bool:
        if self.start <= self.end:
            return self.start <= t < self.end
        return t >= self.start or t < self.end

    def __str__(self) -> str:
        return f"{self.start:%H:%M}-{self.end:%H:%M}"


@dataclass(frozen=True)
class ScheduleSettings:
    times: tuple[dt.time, ...] = ()         # empty: continuous
    quiet_hours: tuple[QuietHours, ...] = ()


@dataclass(frozen=True)
class HistorySettings:
    folder: Path | None = None   # None: <state directory>/history
    keep: int = 200
    max_mb: float = 1000.0


@dataclass(frozen=True)
class ButtonSpec:
    name: str
    pin: int | None   # None: the panel's default pin for A-D (C depends on the panel)
    press: str
    hold: str


@dataclass(frozen=True)
class ButtonSettings:
    enabled: bool = True
    hold_time: float = 1.0
    buttons: tuple[ButtonSpec, ...] = tuple(ButtonSpec(n, None, p, h) for n, (_, p, h) in DEFAULT_BUTTONS.items())

    def pins_for(self, panel_name: str | None) -> dict[str, int]:
        """Each button's BCM pin on ``panel_name`` (C moves to 25 on the 13.3" panel)."""
        pins = {}
        for spec in self.buttons:
            if spec.pin is not None:
                pins[spec.name] = spec.pin
            elif spec.name == "C" and panel_name == "spectra6-13.3":
                pins[spec.name] = LARGE_PANEL_BUTTON_C
            else:
                pins[spec.name] = DEFAULT_BUTTONS[spec.name][0]
        return pins


@dataclass(frozen=True)
class Config:
    """Everything the daemon needs; built by ``frame.config.load_config`` or ``default_config``."""

    source: Path | None
    model: ModelSettings
    display: DisplayConfig
    themes: tuple[Theme, ...]
    wildcards: dict[str, tuple[Template, ...]]
    order: str = "shuffle"
    no_repeat: int = 20
    schedule: ScheduleSettings = ScheduleSettings()
    history: HistorySettings = HistorySettings()
    buttons: ButtonSettings = ButtonSettings()
    log_level: str = "info"
    warnings: tuple[Problem, ...] = ()
    watched_files: tuple[Path, ...] = field(default=(), compare=False)

    def theme(self, name: str) -> Theme | None:
        return next((t for t in self.themes if t.name == name), None)
