"""The SDXL UNet (diffusers UNet2DConditionModel, SDXL architecture), streamed from disk.

Read top to bottom: __call__ -> time embedding -> down blocks -> mid -> up blocks ->
output; each block a method; every weight named as in the model files.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from pathlib import Path

import numpy as np

from engine import kernels, ops
from engine.errors import InputError
from engine.model import StreamedModel
from engine.options import Options, resolve
from engine.sdxl.unet_config import UNetConfig, param_shapes, parse_config
from engine.bands import Concat, Dense, BandedImage, Upsampled, store
from engine.weights import Group, TensorStore, read_config

TRANSFORMER_NORM_EPS = 1e-6


class UNet(StreamedModel):
    """eps = unet(sample, timestep, encoder_hidden_states, text_embeds, time_ids), all numpy."""

    def __init__(self, store: TensorStore, config: UNetConfig, options: Options):
        super().__init__(store, options)
        self.config = config
        self._kv: OrderedDict[bytes, dict[str, tuple[np.ndarray, np.ndarray]]] = OrderedDict()
        self._kv_filling: dict[str, tuple[np.ndarray, np.ndarray]] | None = None
        self._kv_using: dict[str, tuple[np.ndarray, np.ndarray]] | None = None
        self.plans = {cached: self._make_plan(cached) for cached in (False, True)}

    @classmethod
    def load(cls, path: str | Path, preset: str = "default", **overrides: object) -> "UNet":
        """Open a diffusers unet/ folder (or a quantized one) without reading its weights."""
        folder = Path(path)
        options = resolve(preset, **overrides)
        config = parse_config(read_config(folder), folder / "config.json")
        tensors = TensorStore.open(folder, drop_pages=options.drop_pages)
        tensors.check(param_shapes(config))
        return cls(tensors, config, options)

    # -- the forward pass ------------------------------------------------------

    def __call__(self, sample: np.ndarray, timestep: float | np.ndarray, encoder_hidden_states: np.ndarray,
                 text_embeds: np.ndarray, time_ids: np.ndarray) -> np.ndarray:
        x, t, ctx, text_embeds, time_ids = self._check_inputs(sample, timestep, encoder_hidden_states,
                                                              text_embeds, time_ids)
        cached = self._select_kv(ctx)
        try:
            return self.run_planned(self.plans[cached], lambda: self.forward(x, t, ctx, text_embeds, time_ids))
        except BaseException:
            if self._kv_filling is not None:   # a half-filled K/V entry must not be used later
                self._kv = OrderedDict((k, v) for k, v in self._kv.items() if v is not self._kv_filling)
                self._kv_filling = None
            raise

    def forward(self, x: np.ndarray, t: np.ndarray, ctx: np.ndarray, text_embeds: np.ndarray,
                time_ids: np.ndarray) -> np.ndarray:
        cfg = self.config
        emb = ops.silu(self.time_embedding(t, text_embeds, time_ids))   # every resnet uses silu(emb)

        # The hidden state goes from block to block in a one-item list that each block empties
        # (`_take`): this frame then holds no reference to a block's input, which the block
        # frees as soon as it is used (the 128x128 input of the last up block is 42 MB).
        h = [self.conv("conv_in", Dense(x))]
        skips = [self.keep(h[0])]
        for i in range(len(cfg.down)):
            h = [self.down_block(i, h, emb, ctx, skips)]
        h = [self.mid_block(h, emb, ctx)]
        for i in range(len(cfg.up)):
            h = [self.up_block(i, h, emb, ctx, skips)]
        out = self.group_norm("conv_norm_out", Dense(_take(h)), cfg.groups, cfg.norm_eps, silu=True)
        return self.conv("conv_out", out)

    def down_block(self, i: int, h: Hidden, emb: np.ndarray, ctx: np.ndarray, skips: list[BandedImage]) -> np.ndarray:
        """DownBlock2D / CrossAttnDownBlock2D; appends each output to `skips`."""
        h = _take(h)
        self._retain_at(h)
        lv = self.config.down[i]
        for j in range(lv.layers):
            h = self.resnet(f"down_blocks.{i}.resnets.{j}", Dense(h), emb)
            if lv.attention:
                h = self.transformer(f"down_blocks.{i}.attentions.{j}", h, ctx, lv.depth, lv.heads)
            skips.append(self.keep(h))
        if i < len(self.config.down) - 1:
            h = self.conv(f"down_blocks.{i}.downsamplers.0.conv", Dense(h), stride=2)
            skips.append(self.keep(h))
        return h

    def mid_block(self, h: Hidden, emb: np.ndarray, ctx: np.ndarray) -> np.ndarray:
        """UNetMidBlock2DCrossAttn: resnet, transformer, resnet."""
        cfg = self.config
        h = _take(h)
        self._retain_at(h)
        h = self.resnet("mid_block.resnets.0", Dense(h), emb)
        h = self.transformer("mid_block.attentions.0", h, ctx, cfg.mid_depth, cfg.mid_heads)
        return self.resnet("mid_block.resnets.1", Dense(h), emb)

    def up_block(self, i: int, h: Hidden, emb: np.ndarray, ctx: np.ndarray, skips: list[BandedImage]) -> np.ndarray:
        """UpBlock2D / CrossAttnUpBlock2D; pops its skips (hidden state first in each concat)."""
        h = _take(h)
        self._retain_at(h)
        lv = self.config.up[i]
        for j in range(lv.layers + 1):
            h = self.resnet(f"up_blocks.{i}.resnets.{j}", Concat(Dense(h), skips.pop()), emb)
            if lv.attention:
                h = self.transformer(f"up_blocks.{i}.attentions.{j}", h, ctx, lv.depth, lv.heads)
        if i < len(self.config.up) - 1:
            # Upsample to the next skip's size (exactly 2x unless a side was odd).
            h = self.conv(f"up_blocks.{i}.upsamplers.0.conv", Upsampled(Dense(h), skips[-1].shape[2:]))
        return h

    def _retain_at(self, h: np.ndarray) -> None:
        """Keep freed memory for reuse in a block whose input is small (see retain_freed_bytes)."""
        if not self.planning:
            self.retain_freed_memory(10 * h.nbytes <= self.options.retain_freed_bytes)

    def time_embedding(self, t: np.ndarray, text_embeds: np.ndarray, time_ids: np.ndarray) -> np.ndarray:
        cfg = self.config
        B = text_embeds.shape[0]
        temb = ops.timestep_embedding(t, cfg.time_dim, cfg.flip_sin_to_cos, cfg.freq_shift)
        emb = self.linear("time_embedding.linear_2", ops.silu(self.linear("time_embedding.linear_1", temb)))
        ids = ops.timestep_embedding(time_ids.reshape(-1), cfg.add_time_dim, cfg.flip_sin_to_cos, cfg.freq_shift)
        add = np.concatenate([text_embeds, ids.reshape(B, -1)], axis=1)
        emb += self.linear("add_embedding.linear_2", ops.silu(self.linear("add_embedding.linear_1", add)))
        return emb

    def resnet(self, p: str, x: BandedImage, emb: np.ndarray) -> np.ndarray:
        """ResnetBlock2D: conv2(silu(GN2(conv1(silu(GN1(x))) + proj(emb)))) + shortcut(x)."""
        cfg = self.config
        h = self.conv(f"{p}.conv1", self.group_norm(f"{p}.norm1", x, cfg.groups, cfg.norm_eps, silu=True))
        h += self.linear(f"{p}.time_emb_proj", emb)[:, :, None, None]
        out = self.conv(f"{p}.conv2", self.group_norm(f"{p}.norm2", Dense(h), cfg.groups, cfg.norm_eps, silu=True))
        del h
        if f"{p}.conv_shortcut.weight" in self.store:
            return self.conv(f"{p}.conv_shortcut", x, out=out)
        out += x.dense()
        return out

    def transformer(self, p: str, x: np.ndarray, ctx: np.ndarray, depth: int, heads: int) -> np.ndarray:
        """Transformer2DModel with linear projections: x + proj_out(blocks(proj_in(GN(x))))."""
        B, C, H, W = x.shape
        normed = self.group_norm(f"{p}.norm", Dense(x), self.config.groups, TRANSFORMER_NORM_EPS).dense()
        tokens = np.ascontiguousarray(normed.reshape(B, C, H * W).transpose(0, 2, 1))
        del normed
        tokens = self.linear(f"{p}.proj_in", tokens)
        for d in range(depth):
            self.transformer_block(f"{p}.transformer_blocks.{d}", tokens, ctx, heads)
        tokens = self.linear(f"{p}.proj_out", tokens)
        out = np.empty_like(x)
        np.add(tokens.reshape(B, H, W, C).transpose(0, 3, 1, 2), x, out=out)
        return out

    def transformer_block(self, p: str, h: np.ndarray, ctx: np.ndarray, heads: int) -> None:
        """BasicTransformerBlock, updating the (B, L, C) tokens h in place."""
        h += self.self_attention(f"{p}.attn1", self.layer_norm(f"{p}.norm1", h), heads)
        h += self.cross_attention(f"{p}.attn2", self.layer_norm(f"{p}.norm2", h), ctx, heads)
        h += self.feed_forward(f"{p}.ff", self.layer_norm(f"{p}.norm3", h))

    def self_attention(self, p: str, x: np.ndarray, heads: int) -> np.ndarray:
        q = self.linear(f"{p}.to_q", x)
        k = self.linear(f"{p}.to_k", x)
        v = self.linear(f"{p}.to_v", x)
        return self.linear(f"{p}.to_out.0", self.attention(p, q, k, v, heads))

    def cross_attention(self, p: str, x: np.ndarray, ctx: np.ndarray, heads: int) -> np.ndarray:
        q = self.linear(f"{p}.to_q", x)
        k, v = self.cross_kv(p, ctx)
        return self.linear(f"{p}.to_out.0", self.attention(p, q, k, v, heads))

    def keep(self, h: np.ndarray) -> BandedImage:
        """A skip connection, stored as the options say until its up block uses it."""
        return Dense(h) if self.planning else store(h, self.options.skip_dtype)

    # -- cross-attention K/V, computed once per conditioning --------------------

    def cross_kv(self, p: str, ctx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self._kv_using is not None:
            k, v = self._kv_using[p]
            return self._expand(k), self._expand(v)
        k = self.linear(f"{p}.to_k", ctx)
        v = self.linear(f"{p}.to_v", ctx)
        if self.options.kv_dtype == "fp16" and not self.planning:
            k, v = self._compact(k), self._compact(v)
            if self._kv_filling is not None:
                self._kv_filling[p] = (k, v)
            return self._expand(k), self._expand(v)
        if self._kv_filling is not None:
            self._kv_filling[p] = (k, v)
        return k, v

    @staticmethod
    def _compact(x: np.ndarray) -> np.ndarray:
        return kernels.f32_to_f16(np.ascontiguousarray(x), np.empty(x.shape, dtype=np.uint16))

    @staticmethod
    def _expand(x: np.ndarray) -> np.ndarray:
        return kernels.f16_to_f32(x, np.empty(x.shape, dtype=np.float32)) if x.dtype == np.uint16 else x

    def _select_kv(self, ctx: np.ndarray) -> bool:
        """Point cross_kv at the cache for this conditioning; True when it is already filled."""
        self._kv_using = self._kv_filling = None
        if not self.options.cross_kv_cache:
            return False
        key = hashlib.blake2b(ctx.tobytes(), digest_size=16).digest() + repr(ctx.shape).encode()
        if key in self._kv:
            self._kv.move_to_end(key)
            self._kv_using = self._kv[key]
            return True
        while len(self._kv) >= self.options.kv_cache_entries:
            self._kv.popitem(last=False)
        self._kv_filling = self._kv[key] = {}
        return False

    def clear_kv_cache(self) -> None:
        self._kv.clear()

    # -- plans and inputs ------------------------------------------------------

    def _make_plan(self, kv_cached: bool) -> list[Group]:
        """The exact weight requests of one evaluation, found by a dry run on a tiny input."""
        cfg = self.config
        side = 2 ** (len(cfg.down) - 1)
        x = np.zeros((1, cfg.in_channels, side, side), dtype=np.float32)
        ctx = np.zeros((1, 1, cfg.down[0].cross_dim), dtype=np.float32)
        text = np.zeros((1, cfg.add_in_dim - cfg.add_time_dim), dtype=np.float32)
        ids = np.zeros((1, 1), dtype=np.float32)
        saved = self._kv_using, self._kv_filling
        self._kv_filling = None
        self._kv_using = _AnyKV(ctx) if kv_cached else None
        try:
            return self.record_plan(lambda: self.forward(x, np.zeros(1, np.float32), ctx, text, ids))
        finally:
            self._kv_using, self._kv_filling = saved

    def _check_inputs(self, sample, timestep, ctx, text_embeds, time_ids):
        cfg = self.config
        sample = _as_f32("sample", sample, 4)
        B, C, H, W = sample.shape
        if C != cfg.in_channels:
            raise InputError(f"sample has {C} channels, the UNet expects {cfg.in_channels} (shape {list(sample.shape)})")
        if B < 1 or H < 1 or W < 1:
            raise InputError(f"sample shape {list(sample.shape)} is empty")
        ctx = _as_f32("encoder_hidden_states", ctx, 3)
        if ctx.shape[0] != B or ctx.shape[1] < 1 or ctx.shape[2] != cfg.down[0].cross_dim:
            raise InputError(f"encoder_hidden_states has shape {list(ctx.shape)}; expected ({B}, 77*k, "
                             f"{cfg.down[0].cross_dim})")
        text_embeds = _as_f32("text_embeds", text_embeds, 2)
        time_ids = _as_f32("time_ids", time_ids, 2)
        if text_embeds.shape[0] != B or time_ids.shape[0] != B or \
                text_embeds.shape[1] + time_ids.shape[1] * cfg.add_time_dim != cfg.add_in_dim:
            n_ids = 6
            raise InputError(f"text_embeds {list(text_embeds.shape)} and time_ids {list(time_ids.shape)} do not fit "
                             f"this UNet: expected ({B}, {cfg.add_in_dim - n_ids * cfg.add_time_dim}) and ({B}, {n_ids})")
        t = np.asarray(timestep, dtype=np.float32).reshape(-1)
        if t.size == 1:
            t = np.repeat(t, B)
        if t.shape != (B,) or not np.isfinite(t).all():
            raise InputError(f"timestep must be a finite float or {B} of them, got {timestep!r}")
        return sample, t, ctx, text_embeds, time_ids


Hidden = np.ndarray | list[np.ndarray]
"""A block's input: the array, or a one-item list the block empties so that it holds the only reference."""


def _take(h: Hidden) -> np.ndarray:
    return h.pop() if isinstance(h, list) else h


class _AnyKV:
    """Stands in for a filled K/V cache while planning: zeros of the right shape."""

    def __init__(self, ctx: np.ndarray):
        self.ctx = ctx

    def __getitem__(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        return self.ctx, self.ctx


def _as_f32(name: str, x: object, ndim: int) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != ndim:
        raise InputError(f"{name} must have {ndim} dimensions, got shape {list(a.shape)}")
    if not np.issubdtype(a.dtype, np.floating):
        raise InputError(f"{name} must be a float array, got dtype {a.dtype}")
    a = np.ascontiguousarray(a, dtype=np.float32)
    if not np.isfinite(a).all():
        raise InputError(f"{name} contains NaN or infinite values")
    return a
