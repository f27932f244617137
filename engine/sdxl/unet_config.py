"""The SDXL UNet's architecture as read from a diffusers unet/config.json, and the exact
tensor names and shapes it implies (used to validate files before hours of compute,
and to write random models for tests and the demo)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.errors import ModelFileError


@dataclass(frozen=True)
class Level:
    """One down block (or its mirrored up block)."""

    channels: int
    layers: int            # resnets in the down block (the up block has one more)
    attention: bool        # Cross-attention (Transformer2DModel) after each resnet
    depth: int             # BasicTransformerBlocks per Transformer2DModel
    heads: int
    cross_dim: int


@dataclass(frozen=True)
class UNetConfig:
    in_channels: int
    out_channels: int
    down: tuple[Level, ...]
    up: tuple[Level, ...]  # in up-block order (deepest first)
    groups: int
    norm_eps: float
    flip_sin_to_cos: bool
    freq_shift: float
    time_dim: int           # block_out_channels[0]: the sinusoidal width
    time_embed_dim: int     # 4x that: the embedding every resnet receives
    add_time_dim: int       # width of each time_id's sinusoidal embedding
    add_in_dim: int         # projection_class_embeddings_input_dim
    mid_depth: int
    mid_heads: int

    @property
    def mid_cross_dim(self) -> int:
        return self.down[-1].cross_dim


_REQUIRED = {
    "addition_embed_type": "text_time",
    "mid_block_type": "UNetMidBlock2DCrossAttn",
    "use_linear_projection": True,
    "act_fn": "silu",
    "resnet_time_scale_shift": "default",
    "time_embedding_type": "positional",
    "conv_in_kernel": 3,
    "conv_out_kernel": 3,
}
_ABSENT = ("class_embed_type", "encoder_hid_dim", "time_cond_proj_dim", "time_embedding_dim",
           "timestep_post_act", "time_embedding_act_fn", "num_class_embeds", "reverse_transformer_layers_per_block")


def _per_level(config: dict, key: str, n: int, where: str) -> list:
    value = config.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [int(value)] * n
    if isinstance(value, list) and len(value) == n and all(isinstance(v, int) for v in value):
        return list(value)
    raise ModelFileError(f"{where}: '{key}' must be an integer or a list of {n} integers, got {value!r}")


def parse_config(config: dict, where: str | Path = "config.json") -> UNetConfig:
    """Validate an SDXL-architecture UNet2DConditionModel config and read its sizes."""
    where = str(where)
    name = config.get("_class_name", "UNet2DConditionModel")
    if name != "UNet2DConditionModel":
        raise ModelFileError(f"{where}: _class_name is {name!r}; this is not an SDXL UNet (UNet2DConditionModel)")
    for key, value in _REQUIRED.items():
        if config.get(key, value) != value:
            raise ModelFileError(f"{where}: {key}={config.get(key)!r} is not supported; SDXL-architecture UNets "
                                 f"have {key}={value!r} (is this an SD 1.x/2.x model?)")
    for key in _ABSENT:
        if config.get(key) is not None:
            raise ModelFileError(f"{where}: {key}={config[key]!r} is not supported by the SDXL engine")
    for key in ("dual_cross_attention", "only_cross_attention", "center_input_sample"):
        if config.get(key):
            raise ModelFileError(f"{where}: {key}=true is not supported by the SDXL engine")
    down_types = config.get("down_block_types")
    up_types = config.get("up_block_types")
    if not isinstance(down_types, list) or not isinstance(up_types, list) or len(up_types) != len(down_types):
        raise ModelFileError(f"{where}: down_block_types and up_block_types must be lists of equal length")
    n = len(down_types)
    channels = _per_level(config, "block_out_channels", n, where)
    layers = _per_level(config, "layers_per_block", n, where)
    depth = _per_level(config, "transformer_layers_per_block", n, where) \
        if "transformer_layers_per_block" in config else [1] * n
    heads_key = "num_attention_heads" if config.get("num_attention_heads") is not None else "attention_head_dim"
    heads = _per_level(config, heads_key, n, where)
    cross = _per_level(config, "cross_attention_dim", n, where)
    groups = int(config.get("norm_num_groups", 32))
    attn_down = []
    for t in down_types:
        if t not in ("DownBlock2D", "CrossAttnDownBlock2D"):
            raise ModelFileError(f"{where}: down block type {t!r} is not supported (DownBlock2D, CrossAttnDownBlock2D)")
        attn_down.append(t == "CrossAttnDownBlock2D")
    attn_up = []
    for t in up_types:
        if t not in ("UpBlock2D", "CrossAttnUpBlock2D"):
            raise ModelFileError(f"{where}: up block type {t!r} is not supported (UpBlock2D, CrossAttnUpBlock2D)")
        attn_up.append(t == "CrossAttnUpBlock2D")
    for c, h in zip(channels, heads):
        if c % groups or c % h:
            raise ModelFileError(f"{where}: block_out_channels {c} must divide by norm_num_groups {groups} and "
                                 f"by its head count {h}")
    down = tuple(Level(channels[i], layers[i], attn_down[i], depth[i], heads[i], cross[i]) for i in range(n))
    r = list(reversed(range(n)))
    up = tuple(Level(channels[r[i]], layers[r[i]], attn_up[i], depth[r[i]], heads[r[i]], cross[r[i]])
               for i in range(n))
    add_time_dim = int(config.get("addition_time_embed_dim") or 0)
    add_in_dim = int(config.get("projection_class_embeddings_input_dim") or 0)
    if add_time_dim <= 0 or add_in_dim <= add_time_dim:
        raise ModelFileError(f"{where}: addition_time_embed_dim and projection_class_embeddings_input_dim are "
                             "required for SDXL's text_time conditioning")
    return UNetConfig(
        in_channels=int(config.get("in_channels", 4)), out_channels=int(config.get("out_channels", 4)),
        down=down, up=up, groups=groups, norm_eps=float(config.get("norm_eps", 1e-5)),
        flip_sin_to_cos=bool(config.get("flip_sin_to_cos", True)), freq_shift=float(config.get("freq_shift", 0)),
        time_dim=channels[0], time_embed_dim=channels[0] * 4, add_time_dim=add_time_dim, add_in_dim=add_in_dim,
        mid_depth=depth[-1], mid_heads=heads[-1])


def param_shapes(cfg: UNetConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of the UNet, with its shape, as diffusers names them."""
    shapes: dict[str, tuple[int, ...]] = {}
    temb = cfg.time_embed_dim

    def add(name: str, *shape: int, bias: bool = True) -> None:
        shapes[name + ".weight"] = shape
        if bias:
            shapes[name + ".bias"] = (shape[0],)

    def resnet(p: str, cin: int, cout: int) -> None:
        add(p + "norm1", cin)
        add(p + "conv1", cout, cin, 3, 3)
        add(p + "time_emb_proj", cout, temb)
        add(p + "norm2", cout)
        add(p + "conv2", cout, cout, 3, 3)
        if cin != cout:
            add(p + "conv_shortcut", cout, cin, 1, 1)

    def transformer(p: str, c: int, depth: int, cross_dim: int) -> None:
        add(p + "norm", c)
        add(p + "proj_in", c, c)
        for d in range(depth):
            b = f"{p}transformer_blocks.{d}."
            for i in (1, 2, 3):
                add(f"{b}norm{i}", c)
            for a, kv_dim in (("attn1", c), ("attn2", cross_dim)):
                add(f"{b}{a}.to_q", c, c, bias=False)
                add(f"{b}{a}.to_k", c, kv_dim, bias=False)
                add(f"{b}{a}.to_v", c, kv_dim, bias=False)
                add(f"{b}{a}.to_out.0", c, c)
            add(b + "ff.net.0.proj", 8 * c, c)
            add(b + "ff.net.2", c, 4 * c)
        add(p + "proj_out", c, c)

    c0 = cfg.down[0].channels
    add("conv_in", c0, cfg.in_channels, 3, 3)
    add("time_embedding.linear_1", temb, cfg.time_dim)
    add("time_embedding.linear_2", temb, temb)
    add("add_embedding.linear_1", temb, cfg.add_in_dim)
    add("add_embedding.linear_2", temb, temb)
    cin = c0
    for i, lv in enumerate(cfg.down):
        for j in range(lv.layers):
            resnet(f"down_blocks.{i}.resnets.{j}.", cin if j == 0 else lv.channels, lv.channels)
            if lv.attention:
                transformer(f"down_blocks.{i}.attentions.{j}.", lv.channels, lv.depth, lv.cross_dim)
        if i < len(cfg.down) - 1:
            add(f"down_blocks.{i}.downsamplers.0.conv", lv.channels, lv.channels, 3, 3)
        cin = lv.channels
    cm = cfg.down[-1].channels
    resnet("mid_block.resnets.0.", cm, cm)
    transformer("mid_block.attentions.0.", cm, cfg.mid_depth, cfg.mid_cross_dim)
    resnet("mid_block.resnets.1.", cm, cm)
    n = len(cfg.up)
    prev = cm
    for i, lv in enumerate(cfg.up):
        skip_in = cfg.up[min(i + 1, n - 1)].channels
        for j in range(lv.layers + 1):
            skip = skip_in if j == lv.layers else lv.channels
            resnet(f"up_blocks.{i}.resnets.{j}.", (prev if j == 0 else lv.channels) + skip, lv.channels)
            if lv.attention:
                transformer(f"up_blocks.{i}.attentions.{j}.", lv.channels, lv.depth, lv.cross_dim)
        if i < n - 1:
            add(f"up_blocks.{i}.upsamplers.0.conv", lv.channels, lv.channels, 3, 3)
        prev = lv.channels
    add("conv_norm_out", c0)
    add("conv_out", cfg.out_channels, c0, 3, 3)
    return shapes
