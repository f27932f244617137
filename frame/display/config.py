"""The ``display:`` settings: which backend and panel, how pictures are fitted and dithered.

``DisplayConfig.from_mapping`` reads the YAML mapping (every key optional) and checks
each value, naming the key and what is allowed when one is wrong.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from frame.display.dither import DEFAULT_METHOD, METHODS, TONE_MODES
from frame.display.errors import DisplayError
from frame.display.fit import CROP_MODES, FIT_MODES
from frame.display.panels import PANELS

BACKENDS = ("inky", "file")
ORIENTATIONS = {"landscape": 0, "portrait": 90, "landscape-flipped": 180, "portrait-flipped": 270}


@dataclass(frozen=True)
class DisplayConfig:
    """Display settings; the defaults suit an Inky Impression found through its EEPROM.

    backend        "inky" (the panel on the HAT) or "file" (PNGs in ``output``; for a PC and tests)
    panel          "auto" (read the HAT's EEPROM; inky only) or a name from ``slowframe panels``
    orientation    how the panel hangs: landscape, portrait (turned 90 degrees clockwise),
                   landscape-flipped, portrait-flipped
    flip_horizontal, flip_vertical   mirror the picture (for panels mounted behind glass etc.)
    fit, crop      "cover" (fill, crop the rest: "centre" or "saliency"), "contain" (letterbox)
                   or "none" (1:1 pixels)
    method         the error-diffusion kernel (``slowframe dither --help`` lists them)
    saturation     0..1 as in inky: 1 aims with the measured inks (faithful), 0 with pure colours
    tone           "compress" (default), "stretch" (auto-levels first) or "off"
    palette        this unit's measured inks, e.g. {"white": [185, 202, 205]}
    caption        put the prompt under each picture
    min_interval   seconds from the end of one refresh to the start of the next (e-ink needs rest)
    busy_retries   how often to retry a refresh whose BUSY line timed out
    output         folder for the file backend
    """

    backend: str = "inky"
    panel: str = "auto"
    orientation: str = "landscape"
    flip_horizontal: bool = False
    flip_vertical: bool = False
    fit: str = "cover"
    crop: str = "saliency"
    method: str = DEFAULT_METHOD
    saturation: float = 1.0
    tone: str = "compress"
    palette: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)
    caption: bool = False
    min_interval: float = 180.0
    busy_retries: int = 2
    output: str = "slowframe-display"

    def __post_init__(self):
        _choice("backend", self.backend, BACKENDS)
        if self.panel != "auto" or self.backend == "file":
            _choice("panel", self.panel, tuple(PANELS))
        _choice("orientation", self.orientation, tuple(ORIENTATIONS))
        _choice("fit", self.fit, FIT_MODES)
        _choice("crop", self.crop, CROP_MODES)
        _choice("method", self.method, tuple(METHODS))
        _choice("tone", self.tone, TONE_MODES)
        if not 0.0 <= self.saturation <= 1.0:
            raise DisplayError(f"display.saturation: {self.saturation} is not between 0 and 1")
        if self.min_interval < 0:
            raise DisplayError(f"display.min_interval: {self.min_interval} seconds cannot be negative")
        if self.busy_retries < 0:
            raise DisplayError(f"display.busy_retries: {self.busy_retries} cannot be negative")

    @property
    def rotation(self) -> int:
        """Degrees clockwise the picture is turned relative to the panel's native landscape."""
        return ORIENTATIONS[self.orientation]

    @classmethod
    def from_mapping(cls, values: Mapping | None, where: str = "display") -> DisplayConfig:
        """Settings from a YAML mapping; DisplayError naming ``where.key`` for a bad one."""
        if values is None:
            return cls()
        if not isinstance(values, Mapping):
            raise DisplayError(f"{where}: expected a mapping of settings, got {type(values).__name__}")
        known = {f.name: f for f in fields(cls)}
        kwargs = {}
        for key, value in values.items():
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else f"; known keys: {', '.join(known)}"
                raise DisplayError(f"{where}: unknown key {key!r}{hint}")
            kwargs[key] = _typed(f"{where}.{key}", key, value, getattr(cls, key, None))
        return cls(**kwargs)


def _choice(key: str, value, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise DisplayError(f"display.{key}: {value!r} is not one of {', '.join(allowed)}")


def _typed(where: str, key: str, value, default):
    if key == "palette":
        if not isinstance(value, Mapping):
            raise DisplayError(f"{where}: expected ink: [r, g, b] entries, got {type(value).__name__}")
        return dict(value)  # checked against the panel's inks by Palette.for_panel
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise DisplayError(f"{where}: expected true or false, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise DisplayError(f"{where}: expected a whole number, got {value!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise DisplayError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise DisplayError(f"{where}: expected text, got {value!r}")
    return value
