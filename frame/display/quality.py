"""Judging a dithered picture, and the inky library's own pipeline to compare against.

``score`` renders ink indices with the measured palette (what the panel shows) and
compares them, with S-CIELAB dE2000, against the tone-compressed original (what it
should ideally show). ``inky_indices`` reproduces what inky's ``set_image`` does with
an RGB picture: Pillow's Floyd-Steinberg in sRGB against
saturation * SATURATED_PALETTE + (1 - saturation) * DESATURATED_PALETTE. (inky 2.6's
7-colour drivers were written for an older Pillow: with Pillow 13 (here) their set_image of
an RGB picture raises "empty palette", as the palette never reaches Pillow's core; these
are the indices they give where it does, see tests/frame/display/test_quality.py.)
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from frame.display.colour import srgb_to_linear
from frame.display.dither import _rgb_array, target_linear
from frame.display.palette import Palette
from frame.display.panels import Panel
from frame.display.scielab import DEFAULT_PPD, Score, scielab


def inky_palette(panel: Panel, saturation: float = 0.5) -> list[int]:
    """inky's ``_palette_blend(saturation)``: flat sRGB list, truncated to integers as inky does."""
    flat = []
    for sat, des in zip(panel.inky_saturated, panel.nominal):
        flat += [int(s * saturation + d * (1.0 - saturation)) for s, d in zip(sat, des)]
    return flat


def inky_indices(image, panel: Panel, saturation: float = 0.5) -> np.ndarray:
    """Ink indices (our native order) that inky's ``set_image(image, saturation)`` would send.

    On the 7-colour drivers inky pads its palette with a "clean" white and 248 blacks, so
    Pillow may pick index 7 (shown here as white) or 8+ (not a panel colour; shown as black).
    """
    rgb = Image.fromarray(_rgb_array(image), "RGB")
    palette = Image.new("P", (1, 1))
    if panel.family == "spectra6":
        palette.putpalette(inky_palette(panel, saturation))
        idx = np.asarray(rgb.quantize(6, palette=palette, dither=Image.Dither.FLOYDSTEINBERG))
    else:
        palette.putpalette(inky_palette(panel, saturation) + [255, 255, 255] + [0, 0, 0] * 248)
        idx = np.asarray(rgb.quantize(palette=palette, dither=Image.Dither.FLOYDSTEINBERG))
        idx = np.where(idx == 7, panel.inks.index("white"), np.where(idx > 7, panel.inks.index("black"), idx))
    return idx.astype(np.uint8)


def score(indices: np.ndarray, image, palette: Palette, tone: str = "compress", ppd: float = DEFAULT_PPD) -> Score:
    """S-CIELAB dE2000 of ink ``indices`` shown with ``palette`` against the tone-compressed ``image``."""
    shown = srgb_to_linear(np.asarray(palette.shown, np.uint8))[indices]
    return scielab(shown, target_linear(image, palette, tone), ppd)
