"""Dithering: valid indices, flat patches, in-gamut means, C kernel == Python twin."""

import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from frame.display import dither as D
from frame.display.colour import delta_e_2000, linear_to_lab, linear_to_srgb8, srgb_to_linear
from frame.display.errors import DisplayError
from frame.display.palette import Palette
from frame.display.panels import PANELS, get_panel

PHOTO = "tests/data/photos/cat.jpg"


def _photo(size):
    return np.asarray(Image.open(PHOTO).convert("RGB").resize(size, Image.Resampling.LANCZOS))


@pytest.mark.parametrize("panel_name", list(PANELS))
@pytest.mark.parametrize("method", list(D.METHODS))
def test_indices_are_always_valid_inks(panel_name, method):
    palette = Palette.for_panel(get_panel(panel_name))
    rng = np.random.default_rng(1)
    noise = rng.integers(0, 256, (24, 40, 3), dtype=np.uint8)
    for picture in (noise, _photo((40, 24))):
        for saturation in (0.0, 0.5, 1.0):
            out = D.dither(picture, palette, D.DitherSettings(method=method, saturation=saturation))
            assert out.shape == (24, 40) and out.dtype == np.uint8
            assert out.max() < len(palette)


@pytest.mark.parametrize("panel_name", list(PANELS))
def test_flat_patch_of_an_ink_gives_that_one_index(panel_name):
    palette = Palette.for_panel(get_panel(panel_name))
    for i, rgb in enumerate(palette.shown):
        patch = np.full((16, 16, 3), rgb, dtype=np.uint8)
        for method in D.METHODS:
            out = D.dither(patch, palette, D.DitherSettings(method=method, tone="off"))
            assert set(np.unique(out)) == {i}, (palette.inks[i], method)
    # with tone compression (the default) pure black and white land on the panel's black and white
    for rgb, ink in (((0, 0, 0), "black"), ((255, 255, 255), "white")):
        out = D.dither(np.full((16, 16, 3), rgb, dtype=np.uint8), palette)
        assert set(np.unique(out)) == {palette.inks.index(ink)}


@pytest.mark.parametrize("panel_name", ["spectra6-7.3", "acep-7.3", "acep-5.7"])
@pytest.mark.parametrize("method", ["sierra3", "floyd-steinberg", "jarvis", "stucki"])
def test_mean_of_an_in_gamut_flat_patch_lands_within_3_de2000(panel_name, method):
    palette = Palette.for_panel(get_panel(panel_name))
    inks = srgb_to_linear(np.asarray(palette.shown, np.uint8))
    rng = np.random.default_rng(7)
    for _ in range(4):
        weights = rng.dirichlet(np.ones(len(inks)) * 0.7)  # a mix of the inks: inside the gamut
        target = linear_to_srgb8(weights @ inks)
        patch = np.full((64, 64, 3), target, dtype=np.uint8)
        out = D.dither(patch, palette, D.DitherSettings(method=method, tone="off"))
        mean = inks[out[8:-8, 8:-8]].reshape(-1, 3).mean(axis=0)  # the eye's blur of the inner patch
        de = float(delta_e_2000(linear_to_lab(mean), linear_to_lab(srgb_to_linear(target))))
        assert de < 3.0, (target, de)


@pytest.mark.skipif(D._cdither is None, reason="the C kernel is not built (no compiler); nothing to compare")
@pytest.mark.parametrize("method", list(D.METHODS))
@pytest.mark.parametrize("serpentine", [True, False])
def test_c_kernel_equals_the_python_twin_exactly(method, serpentine):
    rng = np.random.default_rng(3)
    pictures = [_photo((53, 37)), rng.integers(0, 256, (29, 31, 3), dtype=np.uint8)]
    for panel_name in ("spectra6-7.3", "acep-5.7"):
        palette = Palette.for_panel(get_panel(panel_name))
        for saturation in (1.0, 0.3):
            aimed = srgb_to_linear(palette.aimed(saturation))
            table = D.colour_table(aimed)
            for picture in pictures:
                img = D.tone_compress(srgb_to_linear(picture), aimed[0], aimed[1]).astype(np.float32)
                c = D.c_diffuse(img, aimed, table, D.METHODS[method], serpentine)
                py = D.py_diffuse(img, aimed, table, D.METHODS[method], serpentine)
                np.testing.assert_array_equal(c, py)


def test_serpentine_changes_the_scan_and_both_stay_valid():
    palette = Palette.for_panel(get_panel("spectra6-7.3"))
    picture = _photo((64, 48))
    a = D.dither(picture, palette, D.DitherSettings(serpentine=True))
    b = D.dither(picture, palette, D.DitherSettings(serpentine=False))
    assert not np.array_equal(a, b)


def test_tone_compression_maps_white_and_black_onto_the_panels_inks():
    palette = Palette.for_panel(get_panel("spectra6-7.3"))
    black, white = srgb_to_linear(np.asarray(palette.shown[:2], np.uint8))
    lin = srgb_to_linear(np.array([[[0, 0, 0], [255, 255, 255], [128, 128, 128]]], np.uint8))
    out = D.tone_compress(lin, black, white)
    np.testing.assert_allclose(out[0, 0], black)
    np.testing.assert_allclose(out[0, 1], white)
    assert np.all(out[0, 2] > black) and np.all(out[0, 2] < white)
    stretched = D.tone_compress(lin * 0.5, black, white, "stretch")  # a dim picture is brightened
    np.testing.assert_allclose(stretched[0, 1], white, rtol=1e-6)


def test_saturation_blends_like_inky():
    palette = Palette.for_panel(get_panel("spectra6-7.3"))
    np.testing.assert_allclose(palette.aimed(1.0), palette.shown)
    np.testing.assert_allclose(palette.aimed(0.0), palette.nominal)
    np.testing.assert_allclose(palette.aimed(0.5), (np.add(palette.shown, palette.nominal)) / 2)


def test_bad_settings_are_refused_with_the_choices():
    with pytest.raises(DisplayError, match="floyd-steinberg"):
        D.DitherSettings(method="bayer")
    with pytest.raises(DisplayError, match="between 0 and 1|from 0 to 1"):
        D.DitherSettings(saturation=1.5)
    with pytest.raises(DisplayError, match="compress"):
        D.DitherSettings(tone="loud")
    with pytest.raises(DisplayError, match="inks are black, white, yellow"):
        Palette.for_panel(get_panel("spectra6-7.3"), {"orange": (1, 2, 3)})
    with pytest.raises(DisplayError, match="three integers"):
        Palette.for_panel(get_panel("spectra6-7.3"), {"white": (1, 2)})


def test_a_units_measured_palette_replaces_the_default():
    panel = get_panel("spectra6-7.3")
    palette = Palette.for_panel(panel, {"white": [185, 202, 205]})
    assert palette.shown[1] == (185, 202, 205) and palette.shown[0] == panel.measured[0]


def test_kernels_env_var_forces_the_python_twin():
    code = "import frame.display.dither as d; print(d.BACKEND, d.diffuse is d.py_diffuse)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"SLOWFRAME_KERNELS": "numpy", "PATH": "/usr/bin:/bin"}).stdout.split()
    assert out == ["numpy", "True"]
    bad = subprocess.run([sys.executable, "-c", "import frame.display.dither"], capture_output=True, text=True,
                         env={"SLOWFRAME_KERNELS": "fast", "PATH": "/usr/bin:/bin"})
    assert bad.returncode != 0 and "use 'c', 'numpy'" in bad.stderr
