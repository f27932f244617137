"""A panel's inks as they look: the default measured palette, or a unit's own measurements."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from frame.display.errors import DisplayError
from frame.display.panels import RGB, Panel


@dataclass(frozen=True)
class Palette:
    """The inks of one panel in native order: what they look like and their pure colours."""

    inks: tuple[str, ...]
    shown: tuple[RGB, ...]    # sRGB of each ink as seen on the panel
    nominal: tuple[RGB, ...]  # the pure colour each ink stands for (inky's desaturated palette)

    @classmethod
    def for_panel(cls, panel: Panel, overrides: Mapping[str, Sequence[int]] | None = None) -> Palette:
        """The panel's measured palette with some inks replaced, e.g. ``{"white": (185, 202, 205)}``.

        Measure a unit by photographing a full-screen patch of each ink next to a grey card
        (or with a colorimeter) and give the sRGB values here: the closer these are to what
        the panel really shows, the better the dithering.
        """
        shown = dict(zip(panel.inks, panel.measured))
        for ink, rgb in (overrides or {}).items():
            if ink not in shown:
                raise DisplayError(f"palette: {panel.name} has no ink {ink!r}; its inks are {', '.join(panel.inks)}")
            shown[ink] = _rgb(f"palette.{ink}", rgb)
        return cls(panel.inks, tuple(shown[ink] for ink in panel.inks), panel.nominal)

    def __len__(self) -> int:
        return len(self.inks)

    def aimed(self, saturation: float) -> np.ndarray:
        """The sRGB palette (n, 3) the ditherer aims with, blended as inky's ``saturation`` does.

        1 aims with what the panel really shows (faithful); 0 with the pure colours, as if the
        inks were more vivid than they are, so the picture comes out paler and harsher.
        """
        if not 0.0 <= saturation <= 1.0:
            raise DisplayError(f"saturation {saturation}: use a number from 0 to 1 (1 = the measured palette)")
        return saturation * np.asarray(self.shown, np.float64) + (1 - saturation) * np.asarray(self.nominal, np.float64)

    def render(self, indices: np.ndarray) -> np.ndarray:
        """What the panel will look like: (h, w) ink indices -> (h, w, 3) sRGB uint8."""
        return np.asarray(self.shown, dtype=np.uint8)[indices]

    def flat(self) -> list[int]:
        """The shown colours as a flat [r, g, b, r, g, b, ...] list, for a PIL "P" image."""
        return [c for rgb in self.shown for c in rgb]


def _rgb(where: str, value) -> RGB:
    if (not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 3
            or not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 255 for c in value)):
        raise DisplayError(f"{where}: {value!r} is not a colour; write three integers 0-255, e.g. [179, 182, 171]")
    return (int(value[0]), int(value[1]), int(value[2]))
