"""Dithering speed (C vs the Python twin) and quality (S-CIELAB vs inky's own pipeline).

    python3 bench/dither.py            # everything (about a minute on 2 cores)
    python3 bench/dither.py --speed    # only the timings
    python3 bench/dither.py --quality  # only the error table

Speed: seconds per panel-size picture (800x480, 1600x1200) for the whole ``dither`` call
with a warm nearest-ink table, the C loop alone, and the Python twin's loop (timed on a
band of rows and scaled). The first call for a palette also builds its table; that is
printed separately.

Quality: the corpus in tests/data/photos fitted to each panel, mean S-CIELAB dE2000
(50 pixels/degree) against the tone-compressed picture, rendered with the measured
palette; for each method of ours, and for inky's set_image (Pillow Floyd-Steinberg in
sRGB) at saturation 0.5 (its default) and 1.0.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from frame.display import dither as D  # noqa: E402
from frame.display.colour import srgb_to_linear  # noqa: E402
from frame.display.fit import fit_picture  # noqa: E402
from frame.display.palette import Palette  # noqa: E402
from frame.display.panels import get_panel  # noqa: E402
from frame.display.quality import inky_indices, score  # noqa: E402

PHOTOS = sorted((Path(__file__).resolve().parent.parent / "tests" / "data" / "photos").glob("*.jpg"))


def _best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def speed() -> None:
    print(f"dithering speed (backend in use: {D.BACKEND}; method {D.DEFAULT_METHOD})")
    for panel_name in ("spectra6-7.3", "spectra6-13.3"):
        panel = get_panel(panel_name)
        palette = Palette.for_panel(panel)
        picture = np.asarray(fit_picture(Image.open(PHOTOS[0]), panel.size))
        D._colour_table.cache_clear()
        first = _best(lambda: D.dither(picture, palette), repeat=1)
        whole = _best(lambda: D.dither(picture, palette))
        aimed = srgb_to_linear(palette.aimed(1.0))
        img = D.tone_compress(srgb_to_linear(picture), aimed[0], aimed[1]).astype(np.float32)
        table = D.colour_table(aimed)
        method = D.METHODS[D.DEFAULT_METHOD]
        line = f"  {panel.width}x{panel.height}: dither() {whole:.3f} s (first call, building the table: {first:.3f} s)"
        if D._cdither is not None:
            c_loop = _best(lambda: D.c_diffuse(img, aimed, table, method))
            line += f"; C loop {c_loop:.4f} s"
        band = img[:60]
        py_loop = _best(lambda: D.py_diffuse(band, aimed, table, method), repeat=1) * panel.height / len(band)
        line += f"; Python twin's loop {py_loop:.2f} s"
        if D._cdither is not None:
            same = np.array_equal(D.c_diffuse(band, aimed, table, method), D.py_diffuse(band, aimed, table, method))
            line += f"; identical indices: {same}"
        print(line)


def quality(panels: list[str]) -> None:
    print(f"mean S-CIELAB dE2000 over {len(PHOTOS)} photographs (lower is better; ratio = ours / inky at 0.5)")
    for panel_name in panels:
        panel = get_panel(panel_name)
        palette = Palette.for_panel(panel)
        pictures = [fit_picture(Image.open(p), panel.size, "cover", "centre") for p in PHOTOS]
        rows = {}
        for sat in (0.5, 1.0):
            rows[f"inky set_image, saturation {sat}"] = [
                score(inky_indices(pic, panel, sat), pic, palette).mean for pic in pictures]
        for name in D.METHODS:
            rows[f"slowframe {name}"] = [score(D.dither(pic, palette, D.DitherSettings(method=name)), pic,
                                               palette).mean for pic in pictures]
        base = np.mean(rows["inky set_image, saturation 0.5"])
        print(f"{panel.name} ({panel.title}); photos: {', '.join(p.stem for p in PHOTOS)}")
        for label, errors in rows.items():
            print(f"  {label:34s} {np.mean(errors):6.2f}  ratio {np.mean(errors) / base:5.3f}   "
                  + " ".join(f"{e:5.2f}" for e in errors))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speed", action="store_true", help="only the timings")
    parser.add_argument("--quality", action="store_true", help="only the quality table")
    parser.add_argument("--panels", nargs="+", default=["spectra6-4.0", "spectra6-7.3", "acep-4.0", "acep-5.7", "acep-7.3"])
    args = parser.parse_args()
    if not args.quality:
        speed()
    if not args.speed:
        quality(args.panels)


if __name__ == "__main__":
    main()
