"""Generation sizes (SDXL aspect-ratio buckets) and fitting pictures onto panels."""

import math

import numpy as np
import pytest
from PIL import Image

from frame.display import fit_size
from frame.display.errors import DisplayError
from frame.display.fit import SDXL_AREA, bucket_for, buckets, crop_fraction, fit_picture
from frame.display.panels import PANELS

# panel -> landscape bucket; portrait is the same turned
EXPECTED = {
    "acep-4.0": (1280, 768),      # 640x400 = 1.60 -> 1.667
    "acep-5.7": (1152, 896),      # 600x448 = 1.34 -> 1.286
    "acep-7.3": (1280, 768),      # 800x480 = 1.667, exact
    "spectra6-4.0": (1216, 832),  # 600x400 = 1.50 -> 1.46
    "spectra6-7.3": (1280, 768),
    "spectra6-13.3": (1152, 896),  # 1600x1200 = 1.333 -> 1.286
}


def test_buckets_are_64_px_steps_within_one_megapixel():
    for w, h in buckets():
        assert w % 64 == 0 and h % 64 == 0 and w * h <= SDXL_AREA and 512 <= min(w, h)
    assert (1024, 1024) in buckets() and (1344, 768) in buckets() and (832, 1216) in buckets()


@pytest.mark.parametrize("panel_name", list(PANELS))
@pytest.mark.parametrize("orientation", ["landscape", "portrait", "landscape-flipped", "portrait-flipped"])
def test_bucket_choice_for_every_panel_and_orientation(panel_name, orientation):
    panel = PANELS[panel_name]
    expected = EXPECTED[panel_name]
    turned = orientation.startswith("portrait")
    assert fit_size(panel, orientation) == (expected[::-1] if turned else expected)
    size = (panel.height, panel.width) if turned else panel.size
    gen = fit_size(panel, orientation)
    # nearest aspect among all buckets, and almost no cropping
    best = min(abs(math.log(b[0] / b[1]) - math.log(size[0] / size[1])) for b in buckets())
    assert abs(math.log(gen[0] / gen[1]) - math.log(size[0] / size[1])) == pytest.approx(best)
    assert crop_fraction(size, gen) < 0.05


def test_caption_strip_leaves_a_wider_picture_area():
    assert fit_size("spectra6-7.3", caption=True) == (1344, 768)


def test_bucket_for_refuses_empty_sizes():
    with pytest.raises(DisplayError):
        bucket_for(0, 480)


def _marked(w, h, spot):
    image = np.full((h, w, 3), 128, np.uint8)
    x, y = spot
    image[y - 10:y + 10, x - 10:x + 10] = (255, 0, 0)
    image[::7, ::7] = (120, 130, 110)  # faint texture everywhere
    return Image.fromarray(image)


def test_cover_fills_the_panel_and_centre_crop_is_symmetric():
    out = fit_picture(Image.new("RGB", (1280, 960), (10, 200, 30)), (800, 480))
    assert out.size == (800, 480) and out.getpixel((0, 0)) == (10, 200, 30)


def test_saliency_crop_keeps_the_interesting_part():
    picture = _marked(1600, 480, (150, 240))  # a red square near the left edge of a wide picture
    centre = np.asarray(fit_picture(picture, (800, 480), "cover", "centre"))
    salient = np.asarray(fit_picture(picture, (800, 480), "cover", "saliency"))
    red = lambda a: int(((a[..., 0] > 200) & (a[..., 1] < 60)).sum())  # noqa: E731
    assert red(centre) == 0 and red(salient) > 300


def test_contain_letterboxes_with_white_and_none_keeps_pixels():
    out = fit_picture(Image.new("RGB", (400, 400), (0, 0, 0)), (800, 480), "contain")
    assert out.getpixel((0, 240)) == (255, 255, 255) and out.getpixel((400, 240)) == (0, 0, 0)
    small = fit_picture(Image.new("RGB", (100, 100), (0, 0, 0)), (200, 200), "none")
    assert small.getpixel((100, 100)) == (0, 0, 0) and small.getpixel((10, 10)) == (255, 255, 255)


def test_bad_fit_modes_name_the_choices():
    with pytest.raises(DisplayError, match="cover, contain, none"):
        fit_picture(Image.new("RGB", (10, 10)), (5, 5), "stretch")
