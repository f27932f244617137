"""The tiny SDXL decoder (TAESDXL: diffusers AutoencoderTiny's decoder), decoded in bands of rows.

    from engine.sdxl.tiny_vae import TinyVAEDecoder
    with TinyVAEDecoder.load("models/sdxl-base/vae_tiny", preset="rpi-lowmem") as tiny:
        image = tiny.to_image(tiny.decode(latents / tiny.scaling_factor))

What it takes: the sampler's final latents, before any VAE scaling, divided by the
tiny decoder's own scaling_factor (1.0 for TAESDXL, whose decoder was trained on the
latents as the UNet sees them: diffusers' pipelines call `vae.decode(latents /
vae.config.scaling_factor)` whichever autoencoder they hold). `decode` gives what
`AutoencoderTiny.decode` gives: tanh(z / 3) * 3 in, the decoder's [0, 1] output
mapped to [-1, 1] out, not clipped; `to_image` clips it.

Why bands: the last stage works on 64 channels at full resolution, 268 MB as one fp32
tensor at 1024x1024. Here every layer's output is made top to bottom, a band of rows
at a time, and only the rows some later band still needs are kept: a 3x3 conv needs
one row of its input beyond each side of the rows it makes, a block (three convs)
three, and the nearest 2x upsampling halves row numbers. Those halos are the receptive
field taken layer by layer, so no row is computed twice (beyond a row or two per conv
and band), and a banded decode is the one-band decode up to rounding: every conv reads
a slice that starts at an even row, so its Winograd 2x2 tiles pair the rows as a
whole-image conv does, and what remains is OpenBLAS's sgemm, whose rounding of a
column depends on the width of the matrix (a few ulp; tests/engine/sdxl/test_tiny_vae.py).
A 1024x1024 decode holds about 90 MB of arrays (bench/RESULTS.md#tiny-decoder).

The decoder's weights (about 5 MB as fp32) are kept in RAM for the whole decode,
whatever the preset's provider: every band uses every weight, and reading them again
per band would cost more than keeping them. The other engine options apply.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from engine.bands import BandedImage, Dense
from engine.errors import InputError, ModelFileError
from engine.model import StreamedModel
from engine.options import Options, resolve
from engine.sdxl.tiny_vae_config import TinyVAEConfig, layers, param_shapes, parse_config
from engine.sdxl.vae import check_latents, to_image
from engine.weights import TensorStore, read_config

TINY_VAE = "vae_tiny"
"""The tiny decoder's folder inside a model folder."""
BAND_BYTES = 16 << 20
"""A band holds this many bytes of one full-resolution activation (64 channels x 64 rows
x 1024 columns of fp32 at 1024x1024: 8 latent rows). Chosen by measurement
(bench/RESULTS.md#tiny-decoder): the decode's peak RSS grows with it, its time falls."""


class TinyVAEDecoder(StreamedModel):
    """x = tiny.decode(latents / tiny.scaling_factor): (B, 4, h, w) -> (B, 3, 8h, 8w), numpy float32."""

    def __init__(self, store: TensorStore, config: TinyVAEConfig, options: Options, band_latents: int = 0):
        super().__init__(store, options.replace(weights="ram"))
        self.config = config
        self.scale = config.scale
        self.band_latents = band_latents

    @classmethod
    def load(cls, path: str | Path, preset: str = "default", band_latents: int = 0,
             **overrides: object) -> "TinyVAEDecoder":
        """Open a diffusers AutoencoderTiny folder (config.json and
        diffusion_pytorch_model[.fp16].safetensors, e.g. a model's vae_tiny/) without
        reading its weights. `band_latents`: latent rows per band (0: as many as keep one
        full-resolution activation of a band within BAND_BYTES); `overrides` are engine options."""
        folder = Path(path)
        options = resolve(preset, **overrides)
        if not isinstance(band_latents, int) or isinstance(band_latents, bool) or band_latents < 0:
            raise InputError(f"band_latents must be a whole number of latent rows (0: automatic), got {band_latents!r}")
        if not folder.is_dir():
            raise ModelFileError(f"{folder}: no such folder; expected a tiny decoder folder (config.json and "
                                 "diffusion_pytorch_model.safetensors of madebyollin/taesdxl)")
        config = parse_config(read_config(folder), folder / "config.json")
        tensors = TensorStore.open(folder, drop_pages=options.drop_pages)
        try:
            tensors.check(param_shapes(config))
        except ModelFileError:
            tensors.close()
            raise
        return cls(tensors, config, options, band_latents)

    @property
    def scaling_factor(self) -> float:
        """Divide the sampler's latents by this before decoding (config.json's scaling_factor)."""
        return self.config.scaling_factor

    def rows_per_band(self, width: int) -> int:
        """Latent rows per band for latents `width` wide."""
        if self.band_latents:
            return self.band_latents
        s = self.scale
        return max(1, BAND_BYTES // (4 * self.config.channels * width * s * s))

    def decode(self, z: np.ndarray, band_latents: int | None = None) -> np.ndarray:
        """Decode z = latents / scaling_factor, (B, C, h, w) -> (B, 3, scale*h, scale*w) float32.

        A band of `band_latents` latent rows (default: rows_per_band) at a time; a band of
        h rows or more decodes the picture in one piece. Every band's rows come out as in
        one piece up to the last bits of rounding (see the module's notes)."""
        z = check_latents(z, self.config.latent_channels)
        B, _, h, w = z.shape
        rows = band_latents if band_latents is not None else self.rows_per_band(w)
        if not isinstance(rows, int) or isinstance(rows, bool) or rows < 1:
            raise InputError(f"band_latents must be a whole number of latent rows, at least 1, got {rows!r}")
        s = self.scale
        out = np.empty((B, self.config.out_channels, h * s, w * s), dtype=np.float32)
        # RamProvider: the weights stay for every band; there is no read order to announce.
        return self.run_planned([], lambda: self._decode_all(z, rows * s, out))

    def _decode_all(self, z: np.ndarray, band: int, out: np.ndarray) -> np.ndarray:
        for b in range(z.shape[0]):
            clamped = np.tanh(z[b] / np.float32(3)) * np.float32(3)   # DecoderTiny's soft clamp of its input
            last = self._chain(clamped)
            H = out.shape[2]
            for y0 in range(0, H, band):
                y1 = min(H, y0 + band)
                rows = out[b, :, y0:y1]
                np.multiply(last.compute(y0, y1), np.float32(2), out=rows)   # [0, 1] -> [-1, 1], as diffusers
                rows -= np.float32(1)
        return out

    def _chain(self, latents: np.ndarray) -> "_Conv":
        """The decoder's layers over one picture's latents, each pulling rows from the one before."""
        made: _Source = _Latents(latents)
        for layer in layers(self.config):
            if layer.kind == "upsample":
                made = _Doubling(made)
            elif layer.kind == "block":
                made = _Block(self, layer.name, made)
            else:
                made = _Conv(self, layer.name, made, layer.relu)
        return made

    def to_image(self, x: np.ndarray) -> Image.Image:
        """A decoded picture as an RGB image (engine.sdxl.vae.to_image)."""
        return to_image(x)


def tiny_vae_problem(folder: str | Path, latent_channels: int = 4) -> str | None:
    """Why `folder` cannot decode SDXL's latents (`latent_channels` of them) as a tiny
    decoder, in words for a log line (what was expected, where it looked); None if it can.
    Reads the config and the weights' header only."""
    try:
        with TinyVAEDecoder.load(folder) as tiny:
            channels = tiny.config.latent_channels
    except ModelFileError as e:
        return str(e)
    if channels != latent_channels:
        return (f"{folder}: a tiny decoder of {channels}-channel latents (taesd3 or taef1?); SDXL's latents have "
                f"{latent_channels}: use madebyollin/taesdxl")
    return None


# -- the layers as row producers ------------------------------------------------
#
# A layer's output for one picture is (channels, height, width). The last layer is asked
# for its rows band after band, top to bottom; each layer asks the one before it for the
# rows it needs (requests only ever move down the picture) and then says from which row
# on it may still ask (`release`), so a layer keeps just the rows some reader still needs.


class _Source:
    """What a layer reads: the rows of the layer before it."""

    channels: int
    height: int
    width: int

    def image(self, lo: int, hi: int) -> BandedImage:
        """Rows lo:hi as a (1, channels, hi - lo, width) banded image."""
        raise NotImplementedError

    def attach(self, reader: object) -> None:
        """`reader` will ask for rows and release them."""

    def release(self, reader: object, row: int) -> None:
        """`reader` will not ask for rows above `row` again."""


class _Latents(_Source):
    def __init__(self, x: np.ndarray):
        self.x = x
        self.channels, self.height, self.width = x.shape

    def image(self, lo: int, hi: int) -> BandedImage:
        return Dense(self.x[None, :, lo:hi])


class _Doubling(_Source):
    """Nearest 2x upsampling: never made, its rows are read from the layer before when a conv reads them."""

    def __init__(self, below: "_Kept"):
        self.below = below
        self.channels, self.height, self.width = below.channels, 2 * below.height, 2 * below.width
        below.attach(self)

    def image(self, lo: int, hi: int) -> BandedImage:
        return _DoubledRows(self.below.image(lo // 2, (hi + 1) // 2), lo, hi)

    def release(self, reader: object, row: int) -> None:
        self.below.release(self, row // 2)


class _DoubledRows(BandedImage):
    """Rows lo:hi of the nearest 2x upsampling of `half`, rows lo // 2 on of the image upsampled."""

    def __init__(self, half: BandedImage, lo: int, hi: int):
        self.half, self.lo = half, lo
        self.shape = (1, half.shape[1], hi - lo, 2 * half.shape[3])

    def fill(self, b: int, y0: int, y1: int, out: np.ndarray, c0: int = 0) -> None:
        first = (self.lo + y0) // 2            # the first source row, as a row of `half`
        base = self.lo // 2
        rows = self.half.rows(0, first - base, (self.lo + y1 - 1) // 2 + 1 - base, c0, c0 + out.shape[0])
        for i in range(y1 - y0):
            row = rows[:, (self.lo + y0 + i) // 2 - first]
            out[:, i, 0::2] = row
            out[:, i, 1::2] = row


class _Kept(_Source):
    """A layer whose rows are made on request, in pieces, each kept while a reader may still ask for it."""

    def __init__(self, below: _Source, channels: int):
        self.below = below
        self.channels, self.height, self.width = channels, below.height, below.width
        self.end = 0                                    # rows 0:end have been made
        self.pieces: list[tuple[int, np.ndarray]] = []  # (first row, (channels, rows, width)), in order
        self.readers: dict[int, int] = {}               # id(reader) -> the first row it may still ask for
        below.attach(self)

    def image(self, lo: int, hi: int) -> "_KeptRows":
        if hi > self.end:
            self.pieces.append((self.end, self.compute(self.end, hi)))
            self.end = hi
        return _KeptRows(self, lo, hi)

    def attach(self, reader: object) -> None:
        self.readers[id(reader)] = 0

    def release(self, reader: object, row: int) -> None:
        self.readers[id(reader)] = row
        first = min(self.readers.values())
        kept = []
        for start, rows in self.pieces:
            if start + rows.shape[1] <= first:
                continue
            if start < first:   # a few rows of a piece still needed: copied, so the piece's memory goes
                rows, start = rows[:, first - start:].copy(), first
            kept.append((start, rows))
        self.pieces = kept

    def compute(self, m: int, b: int) -> np.ndarray:
        """Rows m:b, made from the layer below."""
        raise NotImplementedError


class _KeptRows(BandedImage):
    """Rows lo:hi of a _Kept layer, read from its pieces."""

    def __init__(self, layer: _Kept, lo: int, hi: int):
        self.layer, self.lo = layer, lo
        self.shape = (1, layer.channels, hi - lo, layer.width)

    def _parts(self, y0: int, y1: int):
        """(rows of the piece, where they go in y0:y1) covering rows y0:y1."""
        top, z = self.lo + y0, self.lo + y1
        a = top                                 # the first row not yet yielded
        for start, rows in self.layer.pieces:
            p1 = min(z, start + rows.shape[1])
            if a < p1:
                if start > a:
                    break
                yield rows[:, a - start:p1 - start], slice(a - top, p1 - top)
                a = p1
        if a < z:
            raise RuntimeError(f"rows {a}:{z} of a layer were released before they were read")

    def fill(self, b: int, y0: int, y1: int, out: np.ndarray, c0: int = 0) -> None:
        for rows, where in self._parts(y0, y1):
            np.copyto(out[:, where], rows[c0:c0 + out.shape[0]])

    def add_to(self, y: np.ndarray) -> None:
        """y += these rows."""
        for rows, where in self._parts(0, self.shape[2]):
            y[:, where] += rows


class _Conv(_Kept):
    """A 3x3 conv (padding 1), then ReLU if asked."""

    def __init__(self, model: TinyVAEDecoder, name: str, below: _Source, relu: bool):
        super().__init__(below, model.store.shape(name + ".weight")[0])
        self.model, self.name, self.relu = model, name, relu

    def compute(self, m: int, b: int) -> np.ndarray:
        # Rows m:b need input rows m-1 : b+1. The slice starts one more row up where m-1 is
        # odd: Winograd then tiles it in the same row pairs as the whole image. Its top
        # row (zero padding above it instead of the row above) and bottom row are dropped.
        lo, hi = max(0, (m - 1) & ~1), min(self.height, b + 1)
        y = self.model.conv(self.name, self.below.image(lo, hi))[0]
        self.below.release(self, (b - 1) & ~1)           # where the next rows' slice starts
        if self.relu:
            np.maximum(y, np.float32(0), out=y)
        return y[:, m - lo:b - lo]


class _Block(_Kept):
    """AutoencoderTinyBlock: relu(conv.4(relu(conv.2(relu(conv.0(x))))) + x)."""

    def __init__(self, model: TinyVAEDecoder, name: str, below: _Kept):
        super().__init__(below, below.channels)
        first = _Conv(model, f"{name}.conv.0", below, relu=True)
        self.last = _Conv(model, f"{name}.conv.4", _Conv(model, f"{name}.conv.2", first, relu=True), relu=False)

    def compute(self, m: int, b: int) -> np.ndarray:
        # The input's rows conv.0 will ask for (three convs reach three rows further down)
        # made first in one piece, so the rows for the sum are among them.
        self.below.image(m, min(self.height, b + 3))
        y = self.last.compute(m, b)
        self.below.image(m, b).add_to(y)
        self.below.release(self, b)
        return np.maximum(y, np.float32(0), out=y)
