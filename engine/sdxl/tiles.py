"""Tiled VAE decoding: which latent tiles to decode, and how their pixels are blended.

The grid is OnnxStream's: tiles of `size` latents start every `size - overlap` latents
and the last one along each side is moved back to end exactly at the edge, so a side
of 128 latents gets origins {0, 24, 48, 72, 96} and a 128x128 latent 5x5 = 25 tiles.
A side of at most `size` latents is a single tile spanning it.

The blending improves on OnnxStream's, which ramps only a tile's top and left edges
and lets later tiles overwrite the rest. Here a tile's weight ramps linearly across
every overlap it has with a neighbour (left, right, top and bottom) and the weights
are normalised per axis to sum to one at every pixel. The 2-D weight of a tile is
then wy[:, None] * wx[None, :] and the weights of all tiles still sum to one, so the
image is assembled one tile at a time with no weight-sum image beside it. Ramps
start at half a step, so a tile's outermost pixels, the ones its zero padding
disturbs most, count least.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.errors import InputError


@dataclass(frozen=True)
class AxisTile:
    """One tile's extent along one side of the latent, and its blend weights there."""

    start: int              # first latent
    length: int             # latents
    weights: np.ndarray     # (length * scale,) float32: the weight of each output pixel

    @property
    def latents(self) -> slice:
        return slice(self.start, self.start + self.length)

    @property
    def pixels(self) -> slice:
        scale = self.weights.size // self.length
        return slice(self.start * scale, (self.start + self.length) * scale)


@dataclass(frozen=True)
class Tiling:
    size: int = 32
    """Latents per tile side (32 latents = 256 pixels)."""
    overlap: int = 8
    """Latents shared by neighbouring tiles, before the last tile is moved back to the edge."""

    def __post_init__(self) -> None:
        for key in ("size", "overlap"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool):
                raise InputError(f"tile {key} must be an integer number of latents, got {value!r}")
        if self.size < 1:
            raise InputError(f"tile size must be at least 1 latent, got {self.size}")
        if not 0 <= self.overlap < self.size:
            raise InputError(f"tile overlap must be between 0 and tile size - 1 ({self.size - 1}) latents, "
                             f"got {self.overlap}")

    def origins(self, n: int) -> list[int]:
        """First latent of each tile along a side of n latents."""
        if n <= self.size:
            return [0]
        stride = self.size - self.overlap
        return list(range(0, n - self.size, stride)) + [n - self.size]

    def grid(self, h: int, w: int) -> list[tuple[int, int]]:
        """(row, column) origins of every tile of an h x w latent, in raster order."""
        return [(y, x) for y in self.origins(h) for x in self.origins(w)]

    def axis(self, n: int, scale: int) -> list[AxisTile]:
        """The tiles along a side of n latents with their normalised blend weights, for a
        decoder that turns each latent into scale x scale pixels."""
        starts = self.origins(n)
        length = min(self.size, n)
        ramps = []
        for i, a in enumerate(starts):
            w = np.ones(length * scale, dtype=np.float64)
            if i > 0:
                _ramp(w, (starts[i - 1] + length - a) * scale, rising=True)
            if i < len(starts) - 1:
                _ramp(w, (a + length - starts[i + 1]) * scale, rising=False)
            ramps.append(w)
        total = np.zeros(n * scale)
        for a, w in zip(starts, ramps):
            total[a * scale:a * scale + w.size] += w
        return [AxisTile(a, length, (w / total[a * scale:a * scale + w.size]).astype(np.float32))
                for a, w in zip(starts, ramps)]

    def borders(self, n: int, scale: int) -> np.ndarray:
        """Pixel positions p where a tile starts or ends inside the image: the step from
        pixel p-1 to p crosses a tile border there."""
        edges = set()
        for a in self.origins(n):
            edges.update((a * scale, (a + min(self.size, n)) * scale))
        return np.array(sorted(p for p in edges if 0 < p < n * scale), dtype=np.int64)


def _ramp(w: np.ndarray, pixels: int, rising: bool) -> None:
    """Cap the first (rising) or last (falling) `pixels` weights with a linear ramp."""
    if pixels <= 0:
        return
    ramp = (np.arange(pixels) + 0.5) / pixels
    if rising:
        np.minimum(w[:pixels], ramp, out=w[:pixels])
    else:
        np.minimum(w[-pixels:], ramp[::-1], out=w[-pixels:])


def seam_ratio(image: np.ndarray, tiling: Tiling, scale: int) -> float:
    """How visible tile borders are in a decoded (C, H, W) image: the mean absolute step
    between neighbouring pixels across tile borders, divided by the mean step across
    the other latent-cell boundaries (both axes, all channels). Tile borders fall on
    latent-cell boundaries (multiples of `scale` pixels), where a decoder's nearest
    upsampling makes steps differ from those inside a cell, so only steps at that
    same phase are compared. About 1 means no seam shows."""
    C, H, W = image.shape
    x = image.astype(np.float64)
    dy = np.abs(np.diff(x, axis=1))[:, scale - 1::scale]     # steps from row p-1 to p, p = scale, 2*scale...
    dx = np.abs(np.diff(x, axis=2))[:, :, scale - 1::scale]
    on_y = np.zeros(dy.shape[1], dtype=bool)
    on_x = np.zeros(dx.shape[2], dtype=bool)
    on_y[tiling.borders(H // scale, scale) // scale - 1] = True
    on_x[tiling.borders(W // scale, scale) // scale - 1] = True
    if not on_y.any() and not on_x.any():
        raise ValueError(f"a {H}x{W} image is a single tile of {tiling}: it has no tile borders")
    border = dy[:, on_y].sum() + dx[:, :, on_x].sum()
    n_border = dy[:, on_y].size + dx[:, :, on_x].size
    inside = dy[:, ~on_y].sum() + dx[:, :, ~on_x].sum()
    n_inside = dy[:, ~on_y].size + dx[:, :, ~on_x].size
    return float((border / n_border) / (inside / n_inside))
