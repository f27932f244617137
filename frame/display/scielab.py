"""S-CIELAB: how different two pictures look from a viewing distance, in dE2000 units.

Zhang & Wandell's spatial extension of CIELAB: both pictures go to an opponent colour
space, each channel is blurred the way the eye blurs it at the given pixels per degree
of visual angle, and the blurred pictures are compared pixel by pixel with CIEDE2000.
A dithered picture that the eye averages back into the original scores near 0; flat
areas reduce to plain dE2000. Used to judge dithering (tests/frame/display/test_quality.py,
bench/dither.py).

Pixels per degree for a panel of width W metres and N pixels seen from d metres:
ppd = d * N / W * pi / 180 (Inky Impression 7.3", 800 px over 0.163 m, at 0.6 m: ~51).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from frame.display.colour import RGB_TO_XYZ, delta_e_2000, xyz_to_lab

# XYZ -> opponent channels (luminance, red-green, blue-yellow)
XYZ_TO_OPPONENT = np.array([[0.2787, 0.7218, -0.1066],
                            [-0.4488, 0.2898, 0.0772],
                            [0.0860, -0.5900, 0.5011]])
OPPONENT_TO_XYZ = np.linalg.inv(XYZ_TO_OPPONENT)

# per opponent channel: (weight, spread in degrees) of Gaussians exp(-r^2 / spread^2)
SPATIAL_FILTERS = (
    ((1.00327, 0.05), (0.11442, 0.225), (-0.11769, 7.0)),
    ((0.61673, 0.0685), (0.38328, 0.826)),
    ((0.56789, 0.0920), (0.43212, 0.6451)),
)

DEFAULT_PPD = 50.0


@dataclass(frozen=True)
class Score:
    """Mean and 95th percentile of the per-pixel S-CIELAB dE2000."""

    mean: float
    p95: float


def gaussian_1d(spread_px: float, width: int) -> np.ndarray:
    """exp(-x^2 / spread^2) sampled on width (odd) taps, normalised to sum 1."""
    x = np.arange(width) - width // 2
    g = np.exp(-(x / max(spread_px, 1e-6)) ** 2)
    return g / g.sum()


def kernel_width(ppd: float) -> int:
    """Support of the filters: about one degree, odd, as Zhang & Wandell's reference code."""
    return max(3, int(math.ceil(ppd / 2)) * 2 - 1)


def _convolve_axis(x: np.ndarray, kernel: np.ndarray, axis: int) -> np.ndarray:
    """Same-size convolution along one axis, edges mirrored, through the FFT."""
    r = len(kernel) // 2
    pad = [(0, 0)] * x.ndim
    pad[axis] = (r, r)
    padded = np.pad(x, pad, mode="symmetric" if r <= x.shape[axis] else "edge")
    n = padded.shape[axis] + len(kernel) - 1
    spectrum = np.fft.rfft(padded, n=n, axis=axis)
    shape = [1] * x.ndim
    shape[axis] = -1
    spectrum *= np.fft.rfft(kernel, n=n).reshape(shape)
    full = np.fft.irfft(spectrum, n=n, axis=axis)
    return np.take(full, np.arange(2 * r, 2 * r + x.shape[axis]), axis=axis)


def _filter_channel(channel: np.ndarray, filters, ppd: float) -> np.ndarray:
    width = kernel_width(ppd)
    out = np.zeros_like(channel)
    for weight, spread in filters:
        g = gaussian_1d(spread * ppd, width)
        out += weight * _convolve_axis(_convolve_axis(channel, g, 0), g, 1)
    return out


def spatial_lab(linear_rgb: np.ndarray, ppd: float = DEFAULT_PPD) -> np.ndarray:
    """CIELAB of a linear-light RGB picture (h, w, 3) as the eye sees it at ppd pixels per degree."""
    xyz = np.asarray(linear_rgb, dtype=np.float64) @ RGB_TO_XYZ.T
    opp = xyz @ XYZ_TO_OPPONENT.T
    filtered = np.stack([_filter_channel(opp[..., c], SPATIAL_FILTERS[c], ppd) for c in range(3)], axis=-1)
    return xyz_to_lab(filtered @ OPPONENT_TO_XYZ.T)


def scielab_map(shown: np.ndarray, target: np.ndarray, ppd: float = DEFAULT_PPD) -> np.ndarray:
    """Per-pixel S-CIELAB dE2000 between two linear-light RGB pictures of the same shape."""
    if shown.shape != target.shape or shown.ndim != 3 or shown.shape[2] != 3:
        raise ValueError(f"need two (h, w, 3) pictures of one shape, got {shown.shape} and {target.shape}")
    return delta_e_2000(spatial_lab(shown, ppd), spatial_lab(target, ppd))


def scielab(shown: np.ndarray, target: np.ndarray, ppd: float = DEFAULT_PPD) -> Score:
    """Mean and 95th percentile S-CIELAB dE2000 between two linear-light RGB pictures."""
    de = scielab_map(shown, target, ppd)
    return Score(mean=float(de.mean()), p95=float(np.percentile(de, 95)))
