"""Pictures that fit the panel: the SDXL size to generate, and resizing/cropping onto the panel.

``bucket_for`` picks the generation size the way NovelAI's aspect-ratio bucketing does,
adapted to SDXL: sizes in 64-pixel steps with at most one megapixel (SDXL's training
area), and of those the one whose aspect ratio is nearest the panel's, so the picture
needs almost no cropping. ``fit_picture`` then resizes with Lanczos and crops (centre,
or the most interesting window) or letterboxes it onto the panel.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

from frame.display.errors import DisplayError

SDXL_AREA = 1024 * 1024
STEP = 64
MIN_SIDE = 512
MAX_SIDE = 2048
FIT_MODES = ("cover", "contain", "none")
CROP_MODES = ("centre", "saliency")


def buckets(max_area: int = SDXL_AREA, step: int = STEP, min_side: int = MIN_SIDE,
            max_side: int = MAX_SIDE) -> list[tuple[int, int]]:
    """Every (width, height) bucket: for each width in ``step`` steps, the tallest height
    in ``step`` steps with width * height <= max_area, and the same with the sides swapped."""
    found = set()
    for w in range(min_side, max_side + 1, step):
        h = min(max_side, (max_area // w) // step * step)
        if h >= min_side:
            found.add((w, h))
            found.add((h, w))
    return sorted(found)


def bucket_for(width: int, height: int, max_area: int = SDXL_AREA) -> tuple[int, int]:
    """The bucket whose aspect ratio is nearest width:height (ties: the larger area)."""
    if width <= 0 or height <= 0:
        raise DisplayError(f"size {width}x{height}: both sides must be positive")
    target = math.log(width / height)
    return min(buckets(max_area), key=lambda b: (round(abs(math.log(b[0] / b[1]) - target), 9), -b[0] * b[1]))


def crop_fraction(size: tuple[int, int], bucket: tuple[int, int]) -> float:
    """The share of a ``bucket`` picture that covering ``size`` crops away (0 = none)."""
    scale = max(size[0] / bucket[0], size[1] / bucket[1])
    return 1.0 - (size[0] * size[1]) / (bucket[0] * bucket[1] * scale * scale)


def _saliency(image: Image.Image) -> np.ndarray:
    """A rough "where is the subject" map: local contrast plus colourfulness, on a small copy."""
    small = image.convert("RGB")
    small.thumbnail((160, 160), Image.Resampling.BILINEAR)
    rgb = np.asarray(small, dtype=np.float64) / 255.0
    lum = rgb @ np.array([0.299, 0.587, 0.114])
    contrast = np.zeros_like(lum)
    contrast[1:-1, 1:-1] = np.abs(4 * lum[1:-1, 1:-1] - lum[:-2, 1:-1] - lum[2:, 1:-1]
                                  - lum[1:-1, :-2] - lum[1:-1, 2:])
    colourful = rgb.max(axis=2) - rgb.min(axis=2)
    return contrast + 0.25 * colourful


def _crop_offset(image: Image.Image, box: tuple[int, int], crop: str) -> tuple[int, int]:
    """Top-left corner of the ``box``-sized window to keep."""
    free_x, free_y = image.width - box[0], image.height - box[1]
    if crop == "centre" or (free_x <= 0 and free_y <= 0):
        return free_x // 2, free_y // 2
    sal = _saliency(image)
    axis_len = sal.shape[1] if free_x > 0 else sal.shape[0]
    profile = sal.sum(axis=0 if free_x > 0 else 1)
    full = image.width if free_x > 0 else image.height
    window = max(1, round(axis_len * (box[0] if free_x > 0 else box[1]) / full))
    sums = np.convolve(profile, np.ones(window), mode="valid")
    # prefer the centre among near-equal windows, so flat pictures stay centred
    centre_bias = 1.0 - 0.1 * np.abs(np.linspace(-1.0, 1.0, len(sums)))
    best = int(np.argmax(sums * centre_bias))
    offset = round(best * full / axis_len)
    offset = min(max(offset, 0), (free_x if free_x > 0 else free_y))
    return (offset, free_y // 2) if free_x > 0 else (free_x // 2, offset)


def fit_picture(image: Image.Image, size: tuple[int, int], fit: str = "cover", crop: str = "centre",
                background: tuple[int, int, int] = (255, 255, 255)) -> Image.Image:
    """Resize (Lanczos) and crop or pad an image to exactly ``size`` (width, height), in RGB.

    fit "cover" fills the panel and crops what sticks out (the window by ``crop``:
    "centre", or "saliency" = the most detailed, colourful part); "contain" shows the whole
    picture with ``background`` bars; "none" keeps the pixels 1:1, centred, cropped or padded.
    """
    if fit not in FIT_MODES:
        raise DisplayError(f"fit {fit!r}: use one of {', '.join(FIT_MODES)}")
    if crop not in CROP_MODES:
        raise DisplayError(f"crop {crop!r}: use one of {', '.join(CROP_MODES)}")
    width, height = size
    image = image.convert("RGB")
    if image.size == (width, height):
        return image
    if fit != "none":
        scale = (max if fit == "cover" else min)(width / image.width, height / image.height)
        new = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
        if fit == "cover":
            new = (max(new[0], width), max(new[1], height))
        image = image.resize(new, Image.Resampling.LANCZOS)
    left, top = _crop_offset(image, (width, height), crop)
    canvas = Image.new("RGB", (width, height), background)
    canvas.paste(image, (-left, -top))
    return canvas
