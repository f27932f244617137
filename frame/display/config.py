"""The ``display:`` settings and their one validator: which backend and panel, how pictures are fitted and dithered.

KEYS is the table of keys (what each holds, which values it takes, what it means);
DisplayConfig holds the values with their defaults. ``check_value`` checks one key's
value and ``DisplayConfig`` checks the whole set when built, so the config file's
``display:`` section (frame.config, which adds file positions) and ``open_display(mapping)``
run the same rules and report them in the same words.
"""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from frame.display.dither import DEFAULT_METHOD, METHODS, TONE_MODES
from frame.display.errors import DisplayError
from frame.display.fit import CROP_MODES, FIT_MODES
from frame.display.panels import PANELS

BACKENDS = ("inky", "file")
ORIENTATIONS = {"landscape": 0, "portrait": 90, "landscape-flipped": 180, "portrait-flipped": 270}
AUTO_PANEL = "auto"   # read the HAT's EEPROM (the inky backend only)


@dataclass(frozen=True)
class DisplayKey:
    """One ``display:`` key: the type of its value, which values it takes, what it means.

    ``choices``: the allowed names (``also``: names accepted without being listed); ``bad``:
    for numbers, why a value is out of range (None when it is in range); ``words``: names a
    number key takes instead of a number.
    """

    type: type
    doc: str
    choices: tuple[str, ...] = ()
    also: tuple[str, ...] = ()
    bad: Callable[[float], str | None] | None = None
    words: tuple[str, ...] = ()

    def check(self, key: str, value, strict: bool = False) -> None:
        """DisplayError saying what is allowed when ``value`` is not; ``strict``: the ``also`` names are not."""
        if self.choices and value not in (self.choices if strict else self.choices + self.also):
            raise DisplayError(f"display.{key}: {reprlib.repr(value)} is not one of {', '.join(self.choices)}")
        if isinstance(value, str) and self.words:
            if value not in self.words:
                raise DisplayError(f"display.{key}: expected a number or one of {', '.join(self.words)}, "
                                   f"got {reprlib.repr(value)}")
        elif self.bad is not None and (why := self.bad(value)):
            raise DisplayError(f"display.{key}: {value} {why}")


KEYS: dict[str, DisplayKey] = {   # in DisplayConfig's order
    "backend": DisplayKey(str, '"inky" (the panel on the HAT) or "file" (PNGs in ``output``; for a PC and tests)',
                          BACKENDS),
    "panel": DisplayKey(str, '"auto" (read the HAT\'s EEPROM; inky only) or a name from ``slowframe panels``',
                        tuple(PANELS), also=(AUTO_PANEL,)),
    "orientation": DisplayKey(str, "how the panel hangs: landscape, portrait (turned 90 degrees clockwise), "
                                   "landscape-flipped, portrait-flipped", tuple(ORIENTATIONS)),
    "flip_horizontal": DisplayKey(bool, "mirror the picture left to right (for panels mounted behind glass etc.)"),
    "flip_vertical": DisplayKey(bool, "mirror the picture top to bottom"),
    "fit": DisplayKey(str, '"cover" (fill, crop the rest), "contain" (letterbox) or "none" (1:1 pixels)', FIT_MODES),
    "crop": DisplayKey(str, 'what "cover" keeps: "centre" or "saliency"', CROP_MODES),
    "method": DisplayKey(str, "the error-diffusion kernel (``slowframe dither --help`` lists them)", tuple(METHODS)),
    "saturation": DisplayKey(float, "0..1 as in inky: 1 aims with the measured inks (faithful), 0 with pure colours",
                             bad=lambda v: None if 0.0 <= v <= 1.0 else "is not between 0 and 1"),
    "tone": DisplayKey(str, '"compress" (default), "stretch" (auto-levels first) or "off"', TONE_MODES),
    "palette": DisplayKey(dict, 'this unit\'s measured inks, e.g. {"white": [185, 202, 205]} (checked against '
                                "the panel's inks by Palette.for_panel)"),
    "caption": DisplayKey(bool, "put the prompt under each picture"),
    "min_interval": DisplayKey(float, "seconds from the end of one refresh to the start of the next (e-ink needs "
                                      "rest)", bad=lambda v: "seconds cannot be negative" if v < 0 else None),
    "preview": DisplayKey(float, "how often the panel shows the picture being made, with a strip saying theme, "
                                 'step and ready time: every N minutes, "auto" (a quarter of the picture\'s making '
                                 'time, so about 3 times per picture) or "off"; never more often than min_interval',
                          words=("auto", "off"), bad=lambda v: None if v > 0 else "minutes must be more than 0"),
    "browse_timeout": DisplayKey(float, "minutes a picture you chose with the buttons (or `slowframe show`) stays "
                                        "before a preview may replace it",
                                 bad=lambda v: "minutes cannot be negative" if v < 0 else None),
    "busy_retries": DisplayKey(int, "how often to retry a refresh whose BUSY line timed out",
                               bad=lambda v: "cannot be negative" if v < 0 else None),
    "output": DisplayKey(str, "folder for the file backend"),
}


@dataclass(frozen=True)
class DisplayConfig:
    """Display settings (KEYS says what each means); the defaults suit an Inky Impression found by its EEPROM."""

    backend: str = "inky"
    panel: str = AUTO_PANEL
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
    preview: float | str = "auto"
    browse_timeout: float = 60.0
    busy_retries: int = 2
    output: str = "slowframe-display"

    def __post_init__(self):
        # named values first, then numbers: the first problem found is the one reported
        for key in [k for k, s in KEYS.items() if s.choices] + [k for k, s in KEYS.items() if s.bad or s.words]:
            # the file backend has no EEPROM to read, so it needs a panel name, not "auto"
            KEYS[key].check(key, getattr(self, key), strict=key == "panel" and self.backend == "file")

    @property
    def rotation(self) -> int:
        """Degrees clockwise the picture is turned relative to the panel's native landscape."""
        return ORIENTATIONS[self.orientation]

    @classmethod
    def from_mapping(cls, values: Mapping | None) -> DisplayConfig:
        """Settings from a YAML mapping; DisplayError naming ``display.key`` for a bad one."""
        if values is None:
            return cls()
        if not isinstance(values, Mapping):
            raise DisplayError(f"display: expected a mapping of settings, got {type(values).__name__}")
        kwargs = {}
        for key, value in values.items():
            if key not in KEYS:
                close = difflib.get_close_matches(str(key), KEYS, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else f"; known keys: {', '.join(KEYS)}"
                raise DisplayError(f"display: unknown key {key!r}{hint}")
            kwargs[key] = _typed(key, value)
        return cls(**kwargs)


def check_value(key: str, value) -> object:
    """``value`` for ``display.key`` as DisplayConfig holds it, checked on its own (without the other keys)."""
    value = _typed(key, value)
    KEYS[key].check(key, value)
    return value


def _typed(key: str, value) -> object:
    """``value`` as the type of ``display.key`` (ints become floats for numbers); DisplayError when it is not."""
    where, kind = f"display.{key}", KEYS[key].type
    if kind is dict:
        if not isinstance(value, Mapping):
            raise DisplayError(f"{where}: expected ink: [r, g, b] entries, got {type(value).__name__}")
        return dict(value)
    if kind is bool:
        if not isinstance(value, bool):
            raise DisplayError(f"{where}: expected true or false, got {reprlib.repr(value)}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise DisplayError(f"{where}: expected a whole number, got {reprlib.repr(value)}")
        return value
    if kind is float:
        words = KEYS[key].words
        if isinstance(value, str) and value in words:
            return value
        if value is False and "off" in words:   # YAML reads a bare off (or no) as false
            return "off"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            expected = f"a number or one of {', '.join(words)}" if words else "a number"
            raise DisplayError(f"{where}: expected {expected}, got {reprlib.repr(value)}")
        return float(value)
    if not isinstance(value, str):
        raise DisplayError(f"{where}: expected text, got {reprlib.repr(value)}")
    return value
