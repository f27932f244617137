"""Perceptual error-diffusion dithering onto a panel's few inks.

The pipeline, each step chosen by measurement (see bench/dither.py):

1. tone compression: the picture's luminance range is mapped into the range the panel
   can show, between its measured black and white, greys onto the panel's own grey
   axis (``tone_compress``);
2. error diffusion in linear light (the eye averages light, not sRGB codes), serpentine
   (alternate rows run right to left, so errors do not crawl in one direction), the
   error kept whole unless a pixel strays far outside 0..1 (``ERROR_BOUNDS``: clipping
   every pixel to 0..1, as Pillow does, biases mixed colours by up to 4 dE2000);
3. each pixel takes the ink nearest in CIELAB with lightness differences weighted up
   (``LIGHTNESS_WEIGHT``), through a precomputed table (``ColourTable``) so the inner loop
   stays a few array reads.

The inner loop is C (dither.c, built by cffi as frame.display._cdither) with a pure-Python twin giving the
same indices; ``BACKEND`` says which runs. ``SLOWFRAME_KERNELS=numpy`` forces the
Python one (it is ~100x slower); ``SLOWFRAME_KERNELS=c`` makes a missing C module an
ImportError instead of a silent fallback.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from engine.kernels.backend import backend_of, load
from frame.display.colour import LUMINANCE, linear_to_lab, linear_to_srgb, srgb8_to_linear_f32, srgb_to_linear
from frame.display.errors import DisplayError
from frame.display.palette import Palette

_cdither = load("frame.display._cdither")
BACKEND = backend_of(_cdither)


@dataclass(frozen=True)
class Method:
    """An error-diffusion kernel: (dx, dy, weight) taps ahead of the pixel, weights / divisor."""

    name: str
    taps: tuple[tuple[int, int, int], ...]
    divisor: int
    note: str


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("floyd-steinberg", ((1, 0, 7), (-1, 1, 3), (0, 1, 5), (1, 1, 1)), 16,
           "4 taps, the default: the sharpest, and the lowest S-CIELAB error measured"),
    Method("jarvis", ((1, 0, 7), (2, 0, 5),
                      (-2, 1, 3), (-1, 1, 5), (0, 1, 7), (1, 1, 5), (2, 1, 3),
                      (-2, 2, 1), (-1, 2, 3), (0, 2, 5), (1, 2, 3), (2, 2, 1)), 48,
           "Jarvis-Judice-Ninke, 12 taps; smooth"),
    Method("stucki", ((1, 0, 8), (2, 0, 4),
                      (-2, 1, 2), (-1, 1, 4), (0, 1, 8), (1, 1, 4), (2, 1, 2),
                      (-2, 2, 1), (-1, 2, 2), (0, 2, 4), (1, 2, 2), (2, 2, 1)), 42,
           "12 taps; smooth, a little sharper than jarvis"),
    Method("sierra3", ((1, 0, 5), (2, 0, 3),
                       (-2, 1, 2), (-1, 1, 4), (0, 1, 5), (1, 1, 4), (2, 1, 2),
                       (-1, 2, 2), (0, 2, 3), (1, 2, 2)), 32,
           "Sierra (three rows), 10 taps; smooth"),
    Method("atkinson", ((1, 0, 1), (2, 0, 1), (-1, 1, 1), (0, 1, 1), (1, 1, 1), (0, 2, 1)), 8,
           "passes on only 3/4 of the error: crisp, loses shadow and highlight detail"),
    Method("none", (), 1, "nearest ink only, no diffusion (posterised)"),
)}
DEFAULT_METHOD = "floyd-steinberg"

TONE_MODES = ("compress", "stretch", "off")
CUBE = 64          # cells per axis of the nearest-colour table (in sRGB-encoded steps)
ENCODE_LEN = 4096  # linear-light steps of the table's first, per-channel stage
# how far pixel + error may stray outside 0..1 before the excess is dropped: a little
# room keeps mixes unbiased, a bound stops out-of-gamut colours smearing error far away
ERROR_BOUNDS = (-0.25, 1.25)
# the nearest ink weighs a lightness difference this much more than the same chroma
# difference: the eye (and S-CIELAB) blurs chroma over a wider area than lightness, so a
# wrong lightness shows as grain while a wrong hue averages out with its neighbours. 1.5
# took 5-25% off the corpus error on every panel (bench/dither.py); from about 3, chroma
# error left uncorrected piles up until the ERROR_BOUNDS clip and the picture breaks up.
LIGHTNESS_WEIGHT = 1.5


def get_method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise DisplayError(f"unknown dithering method {name!r}: use one of {', '.join(METHODS)}") from None


# ---------------------------------------------------------------- tone compression


def tone_compress(linear: np.ndarray, black: np.ndarray, white: np.ndarray, mode: str = "compress") -> np.ndarray:
    """Map a linear-light picture into the range between the panel's black and white.

    ``black`` and ``white`` are the panel's inks in linear RGB. In "compress" mode (the
    default) each channel goes from 0..1 onto black..white, so neutral greys land on the
    panel's own grey axis and nothing asks for more light than its white reflects.
    "stretch" first rescales luminance (chromaticity kept) so the picture's 1st-99th
    percentiles span the whole range, like an auto-levels; it brightens dull pictures
    but measures worse on photographs (more of them ends up beyond what the inks can
    mix). "off" skips the step: the ditherer then aims at colours the panel cannot show.
    """
    if mode not in TONE_MODES:
        raise DisplayError(f"tone {mode!r}: use one of {', '.join(TONE_MODES)}")
    linear = np.asarray(linear)
    if linear.dtype not in (np.float32, np.float64):
        linear = linear.astype(np.float64)
    if mode == "off":
        return linear
    if mode == "stretch":
        lum = linear @ LUMINANCE
        lo, hi = (float(v) for v in np.percentile(lum, (1.0, 99.0)))
        if hi - lo > 0.02:  # else a flat picture: nothing to stretch
            stretched = np.clip((lum - lo) / (hi - lo), 0.0, 1.0)
            dark = lum <= 1e-9
            scale = np.divide(stretched, lum, out=np.zeros_like(lum), where=~dark)
            linear = np.clip(linear * scale[..., None], 0.0, 1.0)
            linear[dark] = stretched[dark, None]
    black, white = np.asarray(black, linear.dtype), np.asarray(white, linear.dtype)
    out = np.clip(linear, 0.0, 1.0)
    out *= white - black
    out += black
    return out


# ---------------------------------------------------------------- nearest ink table


@dataclass(frozen=True)
class ColourTable:
    """Nearest ink for any linear-light colour in two table reads.

    ``encode`` takes a channel's linear value v (index round(v * 4095)) to one of 64 cells
    spaced evenly in sRGB; ``cube[r, g, b]`` is the ink nearest to that cell in CIELAB
    with L* scaled by ``LIGHTNESS_WEIGHT``.
    """

    encode: np.ndarray  # (ENCODE_LEN,) uint8
    cube: np.ndarray    # (CUBE, CUBE, CUBE) uint8


@functools.lru_cache(maxsize=1)
def _cells() -> tuple[np.ndarray, np.ndarray]:
    """The per-channel encoding and the weighted CIELAB of every cell centre (the same for all palettes)."""
    encode = np.round(linear_to_srgb(np.arange(ENCODE_LEN) / (ENCODE_LEN - 1)) * (CUBE - 1)).astype(np.uint8)
    levels = srgb_to_linear(np.arange(CUBE) * (255.0 / (CUBE - 1)))
    cells = np.stack(np.meshgrid(levels, levels, levels, indexing="ij"), axis=-1).reshape(-1, 3)
    encode.flags.writeable = False
    return encode, _weighted_lab(cells)


def _weighted_lab(linear: np.ndarray) -> np.ndarray:
    lab = linear_to_lab(linear)
    lab[..., 0] *= LIGHTNESS_WEIGHT
    return lab.astype(np.float32)


@functools.lru_cache(maxsize=16)
def _colour_table(palette_key: tuple[tuple[float, float, float], ...]) -> ColourTable:
    encode, cell_lab = _cells()
    ink_lab = _weighted_lab(np.asarray(palette_key))
    best = np.zeros(len(cell_lab), dtype=np.uint8)
    best_dist = np.full(len(cell_lab), np.inf, dtype=np.float32)
    for i, ink in enumerate(ink_lab):  # first ink wins ties, as argmin would
        dist = ((cell_lab - ink) ** 2).sum(axis=1)
        closer = dist < best_dist
        best[closer] = i
        best_dist[closer] = dist[closer]
    cube = best.reshape(CUBE, CUBE, CUBE)
    cube.flags.writeable = False
    return ColourTable(encode, cube)


def colour_table(palette_linear: np.ndarray) -> ColourTable:
    """The nearest-ink table for inks given in linear RGB (n, 3); cached per palette."""
    return _colour_table(tuple(tuple(float(c) for c in ink) for ink in np.asarray(palette_linear)))


# ---------------------------------------------------------------- error diffusion


def _taps(method: Method) -> tuple[list[int], list[int], list[float]]:
    dx = [t[0] for t in method.taps]
    dy = [t[1] for t in method.taps]
    w = [t[2] / method.divisor for t in method.taps]
    return dx, dy, w


def c_diffuse(img: np.ndarray, palette_linear: np.ndarray, table: ColourTable, method: Method,
              serpentine: bool = True, bounds: tuple[float, float] = ERROR_BOUNDS) -> np.ndarray:
    """The C error-diffusion loop; see ``py_diffuse`` for what it computes."""
    if _cdither is None:
        raise RuntimeError("the C dithering kernel (frame.display._cdither) is not built")
    img = np.ascontiguousarray(img, dtype=np.float32)
    h, w, _ = img.shape
    pal = np.ascontiguousarray(palette_linear, dtype=np.float64)
    dx, dy, wt = _taps(method)
    dx_a = np.array(dx or [0], dtype=np.intc)
    dy_a = np.array(dy or [0], dtype=np.intc)
    wt_a = np.array(wt or [0.0], dtype=np.float64)
    err_rows = np.empty(3 * (w + 4) * 3, dtype=np.float64)
    out = np.empty((h, w), dtype=np.uint8)
    ffi, lib = _cdither.ffi, _cdither.lib

    def ptr(ctype, a):
        return ffi.cast(ctype, a.ctypes.data)

    rc = lib.sf_diffuse(ptr("float *", img), h, w, ptr("double *", pal), len(pal),
                        ptr("uint8_t *", table.cube), ptr("uint8_t *", table.encode), len(table.encode),
                        ptr("int *", dx_a), ptr("int *", dy_a), ptr("double *", wt_a), len(dx),
                        int(serpentine), float(bounds[0]), float(bounds[1]),
                        ptr("double *", err_rows), ptr("uint8_t *", out))
    if rc != 0:
        raise ValueError(f"method {method.name}: taps must stay within 2 columns and 2 rows")
    return out


def py_diffuse(img: np.ndarray, palette_linear: np.ndarray, table: ColourTable, method: Method,
               serpentine: bool = True, bounds: tuple[float, float] = ERROR_BOUNDS) -> np.ndarray:
    """Error diffusion of a linear-light (h, w, 3) picture onto inks; returns (h, w) ink indices.

    For each pixel in scan order: value = clamp(pixel + diffused error, *bounds) per
    channel; the ink is the table's nearest to value clamped to 0..1; value - ink is
    passed on to the method's taps (mirrored on right-to-left rows); taps outside the
    picture are dropped. Plain Python floats (doubles), operation for operation as
    frame/display/dither.c.
    """
    lo, hi = float(bounds[0]), float(bounds[1])
    h, w, _ = img.shape
    pixels = np.asarray(img, dtype=np.float32).astype(np.float64).reshape(-1).tolist()
    pal = [tuple(float(c) for c in ink) for ink in np.asarray(palette_linear, dtype=np.float64)]
    cube = table.cube.reshape(-1).tolist()
    encode = table.encode.tolist()
    scale = float(len(encode) - 1)
    dxs, dys, wts = _taps(method)
    width = w + 4
    rows = [[0.0] * (width * 3) for _ in range(3)]
    out = bytearray(h * w)
    for y in range(h):
        row = rows[y % 3]
        reverse = serpentine and (y & 1)
        taps = [((-dx if reverse else dx), rows[(y + dy) % 3], wt) for dx, dy, wt in zip(dxs, dys, wts)]
        for i in range(w):
            x = w - 1 - i if reverse else i
            p = (y * w + x) * 3
            e = (x + 2) * 3
            v0 = pixels[p] + row[e]
            v1 = pixels[p + 1] + row[e + 1]
            v2 = pixels[p + 2] + row[e + 2]
            v0 = lo if v0 < lo else (hi if v0 > hi else v0)
            v1 = lo if v1 < lo else (hi if v1 > hi else v1)
            v2 = lo if v2 < lo else (hi if v2 > hi else v2)
            c0 = 0.0 if v0 < 0.0 else (1.0 if v0 > 1.0 else v0)
            c1 = 0.0 if v1 < 0.0 else (1.0 if v1 > 1.0 else v1)
            c2 = 0.0 if v2 < 0.0 else (1.0 if v2 > 1.0 else v2)
            idx = cube[(encode[int(c0 * scale + 0.5)] * CUBE + encode[int(c1 * scale + 0.5)]) * CUBE
                       + encode[int(c2 * scale + 0.5)]]
            out[y * w + x] = idx
            ink = pal[idx]
            d0, d1, d2 = v0 - ink[0], v1 - ink[1], v2 - ink[2]
            for dx, target, wt in taps:
                t = (x + 2 + dx) * 3
                target[t] += d0 * wt
                target[t + 1] += d1 * wt
                target[t + 2] += d2 * wt
        row[:] = [0.0] * (width * 3)
    return np.frombuffer(bytes(out), dtype=np.uint8).reshape(h, w)


diffuse = c_diffuse if BACKEND == "c" else py_diffuse


# ---------------------------------------------------------------- the whole pipeline


@dataclass(frozen=True)
class DitherSettings:
    """How to dither: ``method`` (see METHODS), inky-style ``saturation``, ``tone`` mode, ``serpentine``."""

    method: str = DEFAULT_METHOD
    saturation: float = 1.0
    tone: str = "compress"
    serpentine: bool = True

    def __post_init__(self):
        get_method(self.method)
        if self.tone not in TONE_MODES:
            raise DisplayError(f"tone {self.tone!r}: use one of {', '.join(TONE_MODES)}")
        if not 0.0 <= self.saturation <= 1.0:
            raise DisplayError(f"saturation {self.saturation}: use a number from 0 to 1 (1 = the measured palette)")


def _rgb_array(image) -> np.ndarray:
    """A PIL image or an (h, w, 3) uint8 array -> (h, w, 3) uint8 array (alpha composited on white)."""
    if isinstance(image, np.ndarray):
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise DisplayError(f"picture: need an (h, w, 3) uint8 array, got {image.shape} {image.dtype}")
        return image
    from PIL import Image

    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        image = Image.alpha_composite(background, rgba)
    return np.asarray(image.convert("RGB"))


def target_linear(image, palette: Palette, tone: str = "compress") -> np.ndarray:
    """The picture as the panel should ideally show it: tone-compressed, linear light (h, w, 3)."""
    shown = srgb_to_linear(np.asarray(palette.shown, np.float64))
    return tone_compress(srgb_to_linear(_rgb_array(image)), shown[0], shown[1], tone)


def dither(image, palette: Palette, settings: DitherSettings = DitherSettings()) -> np.ndarray:
    """Dither a picture (PIL image or (h, w, 3) uint8 sRGB array) onto a panel's inks.

    Returns (h, w) uint8 ink indices in the panel's native order, every one < len(palette).
    The picture must already have the panel's size (see frame.display.fit).
    """
    method = get_method(settings.method)
    aimed = srgb_to_linear(palette.aimed(settings.saturation))
    img = tone_compress(srgb8_to_linear_f32(_rgb_array(image)), aimed[0], aimed[1], settings.tone)
    return diffuse(img, aimed, colour_table(aimed), method, settings.serpentine)
