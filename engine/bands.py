"""Banded images: what a convolution reads, a band of rows at a time, so big inputs are never copied whole.

A BandedImage is a (B, C, H, W) float32 image that can produce any band of rows of one
batch item. Besides plain arrays, banded images can be compact (fp16 or uint8 storage,
expanded per band), a channel concatenation (the UNet's skip joins), a nearest
upsampling, or a GroupNorm(+SiLU) of another banded image: the normalised, upsampled or
concatenated image then exists only one band at a time, inside the next conv.
"""

from __future__ import annotations

import numpy as np

from engine import kernels
from engine.parallel import in_parallel


class BandedImage:
    """A (B, C, H, W) float32 image read a band of rows at a time."""

    shape: tuple[int, int, int, int]

    def fill(self, b: int, y0: int, y1: int, out: np.ndarray, c0: int = 0) -> None:
        """Write rows y0:y1 of batch item b, channels c0 : c0 + len(out), into out, a float32
        (channels, y1-y0, W) array or view (a padded buffer's interior, say): no band-sized
        temporaries on the way, since on a Pi each would be fresh pages the kernel must
        fault in and zero."""
        raise NotImplementedError

    def rows(self, b: int, y0: int, y1: int, c0: int = 0, c1: int | None = None) -> np.ndarray:
        """Rows y0:y1 of batch item b, channels c0:c1 (all by default), as float32
        (channels, y1-y0, W); treat as read-only."""
        c1 = self.shape[1] if c1 is None else c1
        out = np.empty((c1 - c0, y1 - y0, self.shape[3]), dtype=np.float32)
        self.fill(b, y0, y1, out, c0)
        return out

    def band(self, b: int, y0: int, y1: int, scratch: np.ndarray) -> np.ndarray:
        """Rows y0:y1 of batch item b, written into the front of scratch (C, >= y1-y0, W)
        unless they already exist as an array; treat as read-only."""
        out = scratch[:, :y1 - y0]
        self.fill(b, y0, y1, out)
        return out

    def dense(self) -> np.ndarray:
        """The whole image as a new (or shared, read-only) float32 array."""
        B, C, H, W = self.shape
        out = np.empty(self.shape, dtype=np.float32)
        for b in range(B):
            self.fill(b, 0, H, out[b])
        return out


class Dense(BandedImage):
    """A plain float32 array."""

    def __init__(self, x: np.ndarray):
        self.x = x
        self.shape = x.shape

    def fill(self, b: int, y0: int, y1: int, out: np.ndarray, c0: int = 0) -> None:
        np.copyto(out, self.x[b, c0:c0 + out.shape[0], y0:y1])

    def rows(self, b: int, y0: int, y1: int, c0: int = 0, c1: int | None = None) -> np.ndarray:
        return self.x[b, c0:c1, y0:y1]

    def band(self, b: int, y0: int, y1: int, scratch: np.ndarray) -> np.ndarray:
        return self.x[b, :, y0:y1]

    def dense(self) -> np.ndarray:
        return self.x


class Compact(BandedImage):
    """An activation kept as fp16 or dynamically quantised uint8 until it is read back.

    Stored row-major as (B, H, C, W) so a band of rows is one contiguous block.
    uint8 has a scale and zero point per channel of each picture, covering its values and 0
    (per picture, so a picture is stored alike alone or beside others in a batch):
    OnnxStream's one scale per tensor (0.1/99.9 percentiles) left the tiny test UNets at
    PCC 0.9994-0.9997 against diffusers, per channel gives 0.99996; bench/RESULTS.md#skip-connections.
    """

    def __init__(self, x: np.ndarray, dtype: str):
        B, C, H, W = self.shape = x.shape
        self.dtype = dtype
        if dtype == "fp16":
            self.data = np.empty((B, H, C, W), dtype=np.uint16)
        else:
            self.ranges = [uint8_ranges(x[b:b + 1]) for b in range(B)]
            self.data = np.empty((B, H, C, W), dtype=np.uint8)
        step = max(1, (1 << 20) // (4 * C * W))
        band = np.empty((step, C, W), dtype=np.float32)
        for b in range(B):
            for y0 in range(0, H, step):
                n = min(step, H - y0)
                np.copyto(band[:n], x[b, :, y0:y0 + n].transpose(1, 0, 2))
                if dtype == "fp16":
                    kernels.f32_to_f16(band[:n], self.data[b, y0:y0 + n])
                    continue
                scale, zero = self.ranges[b]
                for i in range(n):   # each row of the band is (C, W): a scale per row of it
                    kernels.quant_u8_rows(band[i], scale, zero, self.data[b, y0 + i])

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    def fill(self, b: int, y0: int, y1: int, out: np.ndarray, c0: int = 0) -> None:
        c1 = c0 + out.shape[0]
        row = np.empty((out.shape[0], out.shape[2]), dtype=np.float32)   # one (channels, W) row: cache-sized
        for i, raw in enumerate(self.data[b, y0:y1, c0:c1]):
            if self.dtype == "fp16":
                kernels.f16_to_f32(raw, row)
            else:
                scale, zero = self.ranges[b]
                kernels.dequant_u8_rows(raw, scale[c0:c1], zero[c0:c1], row)
            out[:, i] = row


def uint8_ranges(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Scale and zero point of each channel of a (B, C, H, W) x, covering its values and 0."""
    lo = np.minimum(x.min(axis=(0, 2, 3)), 0).astype(np.float32)
    hi = np.maximum(x.max(axis=(0, 2, 3)), 0).astype(np.float32)
    scale = np.where(hi > lo, (hi - lo) / np.float32(255), np.float32(1)).astype(np.float32)
    zero = np.clip(np.rint(-lo / scale), 0, 255).astype(np.float32)
    return scale, zero


def store(x: np.ndarray, dtype: str) -> BandedImage:
    """Keep an activation in the given storage ("fp32" keeps the array itself)."""
    return Dense(x) if dtype == "fp32" else Compact(x, dtype)


class Concat(BandedImage):
    """Channel concatenation [a, b] (hidden state first, then the skip)."""

    def __init__(self, *parts: BandedImage):
        B, _, H, W = parts[0].shape
        self.parts = parts
        self.shape = (B, sum(p.shape[1] for p in parts), H, W)

    def fill(self, b: int, y0: int, y1: int, out: np.ndarray, c0: int = 0) -> None:
        c1 = c0 + out.shape[0]
        start = 0                                   # the part's first channel in the concatenation
        for p in self.parts:
            a, z = max(c0, start), min(c1, start + p.shape[1])
            if a < z:
                p.fill(b, y0, y1, out[a - c0:z - c0], a - start)
            start += p.shape[1]


class Upsampled(BandedImage):
    """Nearest-neighbour resize to (H, W) as torch's interpolate(mode="nearest") does."""

    def __init__(self, image: BandedImage, size: tuple[int, int]):
        B, C, h, w = image.shape
        self.image = image
        self.shape = (B, C, size[0], size[1])
        self.ymap = nearest_index(h, size[0])
        self.xmap = nearest_index(w, size[1])

    def fill(self, b: int, y0: int, y1: int, out: np.ndarray, c0: int = 0) -> None:
        ys = self.ymap[y0:y1]
        base = int(ys[0])
        block = self.image.rows(b, base, int(ys[-1]) + 1, c0, c0 + out.shape[0])
        for i, y in enumerate(ys):
            np.take(block[:, y - base], self.xmap, axis=1, out=out[:, i], mode="clip")


def nearest_index(n_in: int, n_out: int) -> np.ndarray:
    scale = np.float32(n_in) / np.float32(n_out)
    idx = np.floor(np.arange(n_out, dtype=np.float32) * scale).astype(np.int64)
    return np.minimum(idx, n_in - 1)


class Normalized(BandedImage):
    """GroupNorm of a banded image (statistics over each group's channels and pixels), then
    optionally SiLU. Statistics are gathered band by band at construction; the
    normalised values are produced per band when read."""

    def __init__(self, image: BandedImage, gamma: np.ndarray, beta: np.ndarray, groups: int, eps: float,
                 silu: bool, threads: int = 0):
        self.image = image
        self.shape = image.shape
        self.silu = silu
        mean, rstd = group_stats(image, groups, eps, threads)              # (B, G)
        cpg = self.shape[1] // groups
        mean = np.repeat(mean, cpg, axis=1)
        rstd = np.repeat(rstd, cpg, axis=1)
        self.scale = (rstd * gamma[None, :]).astype(np.float32)         # (B, C)
        self.shift = (beta[None, :] - mean * self.scale).astype(np.float32)

    def fill(self, b: int, y0: int, y1: int, out: np.ndarray, c0: int = 0) -> None:
        self.image.fill(b, y0, y1, out, c0)
        c1 = c0 + out.shape[0]
        scale, shift = self.scale[b, c0:c1, None, None], self.shift[b, c0:c1, None, None]
        for j0, j1 in _channel_blocks(out):
            part = out[j0:j1]
            part *= scale[j0:j1]
            part += shift[j0:j1]
            if self.silu:
                silu_(part)


# Elementwise passes over a band go a few channels at a time: their temporaries stay
# this small (cache-resident, and never fresh pages).
BLOCK_ELEMENTS = 1 << 16


def _channel_blocks(x: np.ndarray) -> list[tuple[int, int]]:
    step = max(1, BLOCK_ELEMENTS // max(1, x[0].size))
    return [(c0, min(x.shape[0], c0 + step)) for c0 in range(0, x.shape[0], step)]


def silu_(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x), in place."""
    for c0, c1 in _channel_blocks(x):
        part = x[c0:c1]
        t = np.negative(part)
        np.exp(t, out=t)
        t += 1.0
        np.divide(part, t, out=part)
    return x


def group_stats(image: BandedImage, groups: int, eps: float, threads: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Per (batch, group) mean and 1/sqrt(var + eps), from per-channel band statistics
    merged with Chan's parallel formula (stable where mean >> std); channels split over
    `threads` workers (0: all cores)."""
    B, C, H, W = image.shape
    step = min(H, max(1, (4 << 20) // (4 * C * W)))
    mean = np.empty((B, groups))
    rstd = np.empty((B, groups))
    scratch = np.empty((C, step, W), dtype=np.float32)
    bm, bm2 = np.empty(C), np.empty(C)
    for b in range(B):
        n = 0
        m = np.zeros(C)
        m2 = np.zeros(C)
        for y0 in range(0, H, step):
            x = image.band(b, y0, min(H, y0 + step), scratch)
            k = x.shape[1] * W
            rows = x.reshape(C, k)   # no copy where a channel's rows of the band are contiguous
            if k > 1 and rows.strides[1] != 4:   # channels-last memory: copy it (the band's size at most)
                rows = np.ascontiguousarray(rows)
            in_parallel(lambda c0, c1: kernels.row_moments(rows[c0:c1], bm[c0:c1], bm2[c0:c1]), 0, C, rows.size,
                        threads)
            delta = bm - m
            m2 += bm2 + delta * delta * (n * k / (n + k))
            m += delta * (k / (n + k))
            n += k
        cm = m.reshape(groups, -1)
        gm = cm.mean(axis=1)
        gm2 = m2.reshape(groups, -1).sum(axis=1) + n * ((cm - gm[:, None]) ** 2).sum(axis=1)
        var = gm2 / (n * (C // groups))
        mean[b] = gm
        rstd[b] = 1.0 / np.sqrt(var + eps)
    return mean, rstd
