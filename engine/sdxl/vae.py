"""The SDXL VAE decoder (diffusers AutoencoderKL: post_quant_conv + decoder), streamed from disk.

Read top to bottom: decode -> forward (post_quant_conv, conv_in, mid block, the up
blocks' resnets and upsamplers, GroupNorm, SiLU, conv_out); each block a method;
every weight named as in the model files. Compute is fp32 whatever the weights are
stored in (the decoder overflows fp16 arithmetic).

Tiled decoding (engine/sdxl/tiles.py) decodes one tile of one picture at a time and
adds it, weighted, into the output image, so only one tile's activations exist at
once: ~134 MB of them at SDXL's 256x256-pixel tiles instead of 4.4 GB untiled.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from engine.errors import InputError, ModelFileError
from engine.model import StreamedModel
from engine.options import Options, resolve
from engine.sdxl.tiles import Tiling
from engine.sdxl.vae_config import ATTENTION, VAEConfig, attention_names, param_shapes, parse_config
from engine.bands import Dense, Upsampled
from engine.weights import TensorStore, read_config

NORM_EPS = 1e-6   # every GroupNorm of the VAE


class VAEDecoder(StreamedModel):
    """x = vae.decode(latents / vae.scaling_factor): (B, 4, h, w) -> (B, 3, 8h, 8w), numpy float32."""

    def __init__(self, store: TensorStore, config: VAEConfig, options: Options, tiling: Tiling = Tiling()):
        super().__init__(store, options)
        self.config = config
        self.tiling = tiling
        self.attention_names = attention_names(store.__contains__)
        self.scale = 2 ** (len(config.channels) - 1)   # pixels per latent along each side
        probe = np.zeros((1, config.latent_channels, 1, 1), dtype=np.float32)
        self.plan = self.record_plan(lambda: self.forward(probe))

    @classmethod
    def load(cls, path: str | Path, preset: str = "default", tile_size: int = 32, tile_overlap: int = 8,
             **overrides: object) -> "VAEDecoder":
        """Open a diffusers vae/ folder without reading its weights. `tile_size` and
        `tile_overlap` (in latents) shape tiled decoding; `overrides` are engine options."""
        folder = Path(path)
        options = resolve(preset, **overrides)
        tiling = Tiling(tile_size, tile_overlap)
        if not (folder / "config.json").is_file() and (folder / "vae" / "config.json").is_file():
            raise ModelFileError(f"{folder}: this is a whole model folder; pass its VAE: {folder / 'vae'}")
        config = parse_config(read_config(folder), folder / "config.json")
        tensors = TensorStore.open(folder, drop_pages=options.drop_pages)
        tensors.check(param_shapes(config, attention_names(tensors.__contains__)))
        return cls(tensors, config, options, tiling)

    @property
    def scaling_factor(self) -> float:
        """Divide the sampler's latents by this before decoding (config.json's scaling_factor)."""
        return self.config.scaling_factor

    # -- decoding --------------------------------------------------------------

    def decode(self, z: np.ndarray, tiled: bool = True) -> np.ndarray:
        """Decode z = latents / scaling_factor, (B, C, h, w) -> (B, 3, scale*h, scale*w) float32.

        tiled=True decodes overlapping tiles one at a time and blends them (bounded
        memory, the way to decode on a Pi); tiled=False decodes the whole batch at once,
        as diffusers does (the reference; GroupNorm and attention then see the whole picture)."""
        z = self._check_latents(z)
        if not tiled:
            return self._run(z)
        B, _, h, w = z.shape
        s = self.scale
        out = np.zeros((B, self.config.out_channels, h * s, w * s), dtype=np.float32)
        rows, cols = self.tiling.axis(h, s), self.tiling.axis(w, s)
        for b in range(B):
            for ty in rows:
                for tx in cols:
                    tile = self._run(z[b:b + 1, :, ty.latents, tx.latents])[0]
                    tile *= ty.weights[None, :, None]
                    tile *= tx.weights[None, None, :]
                    out[b, :, ty.pixels, tx.pixels] += tile
        return out

    def _run(self, z: np.ndarray) -> np.ndarray:
        return self.run_planned(self.plan, lambda: self.forward(z))

    def to_image(self, x: np.ndarray) -> Image.Image:
        """A decoded picture as an RGB image (see to_image below)."""
        return to_image(x)

    # -- the forward pass ------------------------------------------------------

    def forward(self, z: np.ndarray) -> np.ndarray:
        """post_quant_conv -> conv_in -> mid block -> up blocks -> GroupNorm, SiLU, conv_out.

        The up blocks are unrolled here rather than a method each so that no caller's
        frame keeps a block's input alive once its first resnet has used it (at a
        256x256-pixel tile the last block's input alone is 67 MB)."""
        cfg = self.config
        h = self.conv("post_quant_conv", Dense(z)) if cfg.post_quant_conv else z
        h = self.conv("decoder.conv_in", Dense(h))
        h = self.mid_block(h)
        for i in range(len(cfg.up_channels)):
            for j in range(cfg.layers + 1):
                h = self.resnet(f"decoder.up_blocks.{i}.resnets.{j}", h)
            if i < len(cfg.up_channels) - 1:
                h = self.upsample(f"decoder.up_blocks.{i}.upsamplers.0.conv", h)
        out = self.group_norm("decoder.conv_norm_out", Dense(h), cfg.groups, NORM_EPS, silu=True)
        del h
        return self.conv("decoder.conv_out", out)

    def mid_block(self, h: np.ndarray) -> np.ndarray:
        """UNetMidBlock2D: resnet, attention, resnet."""
        h = self.resnet("decoder.mid_block.resnets.0", h)
        if self.config.mid_attention:
            h = self.attention_block(h)
        return self.resnet("decoder.mid_block.resnets.1", h)

    def resnet(self, p: str, x: np.ndarray) -> np.ndarray:
        """ResnetBlock2D without a time embedding: conv2(silu(GN2(conv1(silu(GN1(x)))))) + shortcut(x)."""
        cfg = self.config
        image = Dense(x)
        h = self.conv(f"{p}.conv1", self.group_norm(f"{p}.norm1", image, cfg.groups, NORM_EPS, silu=True))
        out = self.conv(f"{p}.conv2", self.group_norm(f"{p}.norm2", Dense(h), cfg.groups, NORM_EPS, silu=True))
        del h
        if x.shape[1] != out.shape[1]:
            return self.conv(f"{p}.conv_shortcut", image, out=out)
        out += x
        return out

    def attention_block(self, x: np.ndarray) -> np.ndarray:
        """The mid block's Attention: one head over all pixels, q/k/v/out with bias, own
        GroupNorm, residual: x + out(softmax(q k^T / sqrt(C)) v)."""
        B, C, H, W = x.shape
        names = self.attention_names
        normed = self.group_norm(f"{ATTENTION}.group_norm", Dense(x), self.config.groups, NORM_EPS).dense()
        tokens = np.ascontiguousarray(normed.reshape(B, C, H * W).transpose(0, 2, 1))
        del normed
        q = self.linear(names["q"], tokens)
        k = self.linear(names["k"], tokens)
        v = self.linear(names["v"], tokens)
        del tokens
        attended = self.linear(names["out"], self.attention(ATTENTION, q, k, v, heads=1))
        out = np.empty_like(x)
        np.add(attended.reshape(B, H, W, C).transpose(0, 3, 1, 2), x, out=out)
        return out

    def upsample(self, name: str, h: np.ndarray) -> np.ndarray:
        """Upsample2D: nearest x2 (never materialised: the conv reads it per band), 3x3 conv."""
        _, _, H, W = h.shape
        return self.conv(name, Upsampled(Dense(h), (2 * H, 2 * W)))

    def _check_latents(self, z: object) -> np.ndarray:
        return check_latents(z, self.config.latent_channels)


def to_image(x: np.ndarray) -> Image.Image:
    """A decoded picture, (3, H, W) or (1, 3, H, W) in about [-1, 1], as an RGB image:
    (x/2 + 0.5) clipped to [0, 1], times 255, rounded."""
    a = np.asarray(x)
    if a.ndim == 4 and a.shape[0] == 1:
        a = a[0]
    if a.ndim != 3 or a.shape[0] != 3:
        hint = "; pass one picture at a time, e.g. x[0]" if a.ndim == 4 and a.shape[1:2] == (3,) else ""
        raise InputError(f"to_image expects a decoded picture of shape (3, H, W) or (1, 3, H, W), "
                         f"got {list(a.shape)}{hint}")
    if not np.issubdtype(a.dtype, np.floating) or not np.isfinite(a).all():
        raise InputError(f"to_image expects finite float values (dtype {a.dtype})")
    pixels = np.clip(a.astype(np.float32) / 2 + 0.5, 0, 1) * 255
    return Image.fromarray(np.rint(pixels).astype(np.uint8).transpose(1, 2, 0), mode="RGB")


def check_latents(z: object, channels: int) -> np.ndarray:
    """z as a contiguous float32 (batch, channels, height, width) array of finite values,
    or an InputError saying what is wrong with it."""
    a = np.asarray(z)
    c = channels
    if a.ndim != 4:
        raise InputError(f"latents must have shape (batch, {c}, height, width), got {list(a.shape)}")
    if a.shape[1] != c:
        raise InputError(f"latents have {a.shape[1]} channels (shape {list(a.shape)}); this decoder decodes {c}. "
                         "Pass the sampler's latents (divided by the decoder's scaling_factor), not an image")
    if 0 in a.shape:
        raise InputError(f"latents shape {list(a.shape)} is empty")
    if not np.issubdtype(a.dtype, np.floating):
        raise InputError(f"latents must be a float array (float32), got dtype {a.dtype}")
    a = np.ascontiguousarray(a, dtype=np.float32)
    if not np.isfinite(a).all():
        bad = np.argwhere(~np.isfinite(a))[0]
        raise InputError(f"latents contain NaN or infinite values (first at index {tuple(int(i) for i in bad)}); "
                         "the sampler diverged or the latents file is damaged")
    return a
