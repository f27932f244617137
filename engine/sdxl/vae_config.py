"""The SDXL VAE decoder's architecture as read from a diffusers vae/config.json
(AutoencoderKL), and the exact tensor names and shapes it implies.

Only the decoder half is used: post_quant_conv and decoder.*; the encoder's tensors
may be in the file and are ignored. The mid-block attention's projections have two
spellings in the wild: diffusers' current to_q/to_k/to_v/to_out.0 and the older
query/key/value/proj_attn; `attention_names` picks the one a file uses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.errors import ModelFileError

ATTENTION = "decoder.mid_block.attentions.0"
ATTENTION_SPELLINGS = (
    {"q": "to_q", "k": "to_k", "v": "to_v", "out": "to_out.0"},
    {"q": "query", "k": "key", "v": "value", "out": "proj_attn"},
)


@dataclass(frozen=True)
class VAEConfig:
    latent_channels: int
    out_channels: int
    channels: tuple[int, ...]      # block_out_channels, shallowest first: (128, 256, 512, 512) for SDXL
    layers: int                    # layers_per_block; every up block has one more resnet
    groups: int
    post_quant_conv: bool
    mid_attention: bool
    scaling_factor: float

    @property
    def up_channels(self) -> tuple[int, ...]:
        """Output channels of each up block, in execution order (deepest first)."""
        return tuple(reversed(self.channels))


_REQUIRED = {"act_fn": "silu"}
_UNSUPPORTED = {
    "shift_factor": "latents are shifted as well as scaled (an SD3/Flux VAE, not SDXL's)",
}


def parse_config(config: dict, where: str | Path = "config.json") -> VAEConfig:
    """Validate an AutoencoderKL config with SDXL's decoder layout and read its sizes."""
    where = str(where)
    name = config.get("_class_name", "AutoencoderKL")
    if name != "AutoencoderKL":
        raise ModelFileError(f"{where}: _class_name is {name!r}; the VAE decoder needs an AutoencoderKL "
                             "(is this the model's vae/ folder?)")
    for key, value in _REQUIRED.items():
        if config.get(key, value) != value:
            raise ModelFileError(f"{where}: {key}={config.get(key)!r} is not supported; SDXL's VAE has {key}={value!r}")
    for key, why in _UNSUPPORTED.items():
        if config.get(key) not in (None, 0, 0.0):
            raise ModelFileError(f"{where}: {key}={config[key]!r} is not supported: {why}")
    channels = config.get("block_out_channels", [64])
    if not isinstance(channels, list) or not channels or not all(isinstance(c, int) and c > 0 for c in channels):
        raise ModelFileError(f"{where}: block_out_channels must be a list of positive integers, got {channels!r}")
    up_types = config.get("up_block_types", ["UpDecoderBlock2D"])
    if not isinstance(up_types, list) or len(up_types) != len(channels):
        raise ModelFileError(f"{where}: up_block_types must list one block per block_out_channels entry "
                             f"({len(channels)}), got {up_types!r}")
    for t in up_types:
        if t != "UpDecoderBlock2D":
            raise ModelFileError(f"{where}: up block type {t!r} is not supported (UpDecoderBlock2D)")
    ints = {}
    for key, default in (("layers_per_block", 1), ("norm_num_groups", 32), ("latent_channels", 4),
                         ("out_channels", 3)):
        value = config.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ModelFileError(f"{where}: '{key}' must be a positive integer, got {value!r}")
        ints[key] = value
    groups = ints["norm_num_groups"]
    for c in channels:
        if c % groups:
            raise ModelFileError(f"{where}: block_out_channels {c} must divide by norm_num_groups {groups}")
    scaling = config.get("scaling_factor", 0.18215)   # AutoencoderKL's default when the key is absent
    if not isinstance(scaling, (int, float)) or isinstance(scaling, bool) or not scaling > 0:
        raise ModelFileError(f"{where}: scaling_factor must be a positive number, got {scaling!r}")
    return VAEConfig(latent_channels=ints["latent_channels"], out_channels=ints["out_channels"],
                     channels=tuple(channels), layers=ints["layers_per_block"], groups=groups,
                     post_quant_conv=bool(config.get("use_post_quant_conv", True)),
                     mid_attention=bool(config.get("mid_block_add_attention", True)),
                     scaling_factor=float(scaling))


def attention_names(has: Callable[[str], bool]) -> dict[str, str]:
    """Tensor names of the mid attention's q/k/v/out projections, in whichever spelling
    the file uses (`has(name)` says whether a tensor exists); the current one if neither."""
    for spelling in ATTENTION_SPELLINGS:
        if has(f"{ATTENTION}.{spelling['q']}.weight"):
            return {role: f"{ATTENTION}.{name}" for role, name in spelling.items()}
    return {role: f"{ATTENTION}.{name}" for role, name in ATTENTION_SPELLINGS[0].items()}


def add_param(shapes: dict[str, tuple[int, ...]], name: str, *shape: int) -> None:
    """A module's weight (shape) and bias (its first dimension)."""
    shapes[name + ".weight"] = shape
    shapes[name + ".bias"] = (shape[0],)


def add_resnet(shapes: dict[str, tuple[int, ...]], p: str, cin: int, cout: int) -> None:
    """A ResnetBlock2D without time embedding (the VAE's, encoder and decoder alike)."""
    add_param(shapes, p + ".norm1", cin)
    add_param(shapes, p + ".conv1", cout, cin, 3, 3)
    add_param(shapes, p + ".norm2", cout)
    add_param(shapes, p + ".conv2", cout, cout, 3, 3)
    if cin != cout:
        add_param(shapes, p + ".conv_shortcut", cout, cin, 1, 1)


def param_shapes(cfg: VAEConfig, attention: dict[str, str]) -> dict[str, tuple[int, ...]]:
    """Every tensor the decoder reads, with its shape, as the model files name them."""
    shapes: dict[str, tuple[int, ...]] = {}

    def add(name: str, *shape: int) -> None:
        add_param(shapes, name, *shape)

    def resnet(p: str, cin: int, cout: int) -> None:
        add_resnet(shapes, p, cin, cout)

    z, top = cfg.latent_channels, cfg.channels[-1]
    if cfg.post_quant_conv:
        add("post_quant_conv", z, z, 1, 1)
    add("decoder.conv_in", top, z, 3, 3)
    resnet("decoder.mid_block.resnets.0", top, top)
    if cfg.mid_attention:
        add(f"{ATTENTION}.group_norm", top)
        for role in ("q", "k", "v", "out"):
            add(attention[role], top, top)
    resnet("decoder.mid_block.resnets.1", top, top)
    prev = top
    n = len(cfg.channels)
    for i, c in enumerate(cfg.up_channels):
        for j in range(cfg.layers + 1):
            resnet(f"decoder.up_blocks.{i}.resnets.{j}", prev if j == 0 else c, c)
        if i < n - 1:
            add(f"decoder.up_blocks.{i}.upsamplers.0.conv", c, c, 3, 3)
        prev = c
    add("decoder.conv_norm_out", cfg.channels[0])
    add("decoder.conv_out", cfg.out_channels, cfg.channels[0], 3, 3)
    return shapes
