"""TAESDXL's decoder as read from a diffusers vae_tiny/config.json (AutoencoderTiny): its
layers in execution order, and the exact tensor names and shapes they read.

DecoderTiny is one nn.Sequential, so its tensors are named by position:
`decoder.layers.<index>.weight`. The layers: a 3x3 conv from the latents to `channels`
and a ReLU; then per stage `blocks` AutoencoderTinyBlocks (conv, ReLU, conv, ReLU, conv,
plus the input, ReLU; their convs are `.conv.0`, `.conv.2`, `.conv.4`), and between
stages a nearest 2x upsampling followed by a 3x3 conv without bias; the last stage
ends in a 3x3 conv (with bias) to RGB. madebyollin/taesdxl: 4 stages of 64 channels
with 3, 3, 3 and 1 blocks, 8 pixels per latent. The encoder's tensors may be in the
file and are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.errors import ModelFileError

CLASS_NAME = "AutoencoderTiny"
PREFIX = "decoder.layers"


@dataclass(frozen=True)
class TinyVAEConfig:
    latent_channels: int
    out_channels: int
    channels: int                # the width of every stage (64 for TAESDXL)
    blocks: tuple[int, ...]      # AutoencoderTinyBlocks per stage, first stage first: (3, 3, 3, 1)
    scaling_factor: float        # the pipeline divides latents by it before decoding: 1.0 for TAESDXL

    @property
    def scale(self) -> int:
        """Pixels per latent along each side."""
        return 2 ** (len(self.blocks) - 1)


@dataclass(frozen=True)
class Layer:
    """One step of the decoder: "conv" (3x3), "block" (AutoencoderTinyBlock) or "upsample"."""

    kind: str
    name: str = ""               # the module's tensor prefix; "" for the upsampling
    relu: bool = False           # a conv followed by ReLU
    bias: bool = True            # a conv with a bias


def layers(cfg: TinyVAEConfig) -> list[Layer]:
    """The decoder's layers in execution order, each conv and block under its tensor name."""
    out = [Layer("conv", f"{PREFIX}.0", relu=True)]
    index = 2                                   # layers.1 is the ReLU
    for stage, count in enumerate(cfg.blocks):
        for _ in range(count):
            out.append(Layer("block", f"{PREFIX}.{index}"))
            index += 1
        last = stage == len(cfg.blocks) - 1
        if not last:
            out.append(Layer("upsample"))
            index += 1
        out.append(Layer("conv", f"{PREFIX}.{index}", bias=last))
        index += 1
    return out


def param_shapes(cfg: TinyVAEConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the decoder reads, with its shape, as the model files name them."""
    shapes: dict[str, tuple[int, ...]] = {}
    c = cfg.channels
    steps = layers(cfg)
    convs = [layer for layer in steps if layer.kind == "conv"]
    for layer in steps:
        if layer.kind == "block":
            for i in (0, 2, 4):
                shapes[f"{layer.name}.conv.{i}.weight"] = (c, c, 3, 3)
                shapes[f"{layer.name}.conv.{i}.bias"] = (c,)
        elif layer.kind == "conv":
            cin = cfg.latent_channels if layer is convs[0] else c
            cout = cfg.out_channels if layer is convs[-1] else c
            shapes[f"{layer.name}.weight"] = (cout, cin, 3, 3)
            if layer.bias:
                shapes[f"{layer.name}.bias"] = (cout,)
    return shapes


_REQUIRED = {"act_fn": "relu", "upsample_fn": "nearest", "upsampling_scaling_factor": 2}


def parse_config(config: dict, where: str | Path = "config.json") -> TinyVAEConfig:
    """Validate an AutoencoderTiny config (TAESD's decoder layout) and read its sizes."""
    where = str(where)
    name = config.get("_class_name")
    if name != CLASS_NAME:
        raise ModelFileError(f"{where}: _class_name is {name!r}; the tiny decoder needs an {CLASS_NAME} "
                             "(the config.json of madebyollin/taesdxl)")
    for key, value in _REQUIRED.items():
        if config.get(key, value) != value:
            raise ModelFileError(f"{where}: {key}={config.get(key)!r} is not supported; TAESDXL has {key}={value!r}")
    if config.get("shift_factor") not in (None, 0, 0.0):
        raise ModelFileError(f"{where}: shift_factor={config['shift_factor']!r}: latents shifted as well as scaled "
                             "belong to an SD3/Flux tiny autoencoder (taesd3, taef1); SDXL needs taesdxl")
    widths = config.get("decoder_block_out_channels", [64, 64, 64, 64])
    blocks = config.get("num_decoder_blocks", [3, 3, 3, 1])
    if not isinstance(widths, list) or not widths or \
            not all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in widths):
        raise ModelFileError(f"{where}: decoder_block_out_channels must be a list of positive integers, got {widths!r}")
    if len(set(widths)) != 1:
        # A stage's closing conv keeps its width, so a stage of another width could not follow
        # (diffusers' DecoderTiny fails on such a config too).
        raise ModelFileError(f"{where}: decoder_block_out_channels {widths} must all be equal (TAESDXL: 64)")
    if not isinstance(blocks, list) or len(blocks) != len(widths) or \
            not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in blocks):
        raise ModelFileError(f"{where}: num_decoder_blocks must list a block count (0 or more) for each of the "
                             f"{len(widths)} decoder_block_out_channels entries, got {blocks!r}")
    ints = {}
    for key, default in (("latent_channels", 4), ("out_channels", 3)):
        value = config.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ModelFileError(f"{where}: '{key}' must be a positive integer, got {value!r}")
        ints[key] = value
    scaling = config.get("scaling_factor", 1.0)   # AutoencoderTiny's default when the key is absent
    if not isinstance(scaling, (int, float)) or isinstance(scaling, bool) or not scaling > 0:
        raise ModelFileError(f"{where}: scaling_factor must be a positive number, got {scaling!r}")
    return TinyVAEConfig(latent_channels=ints["latent_channels"], out_channels=ints["out_channels"],
                         channels=widths[0], blocks=tuple(blocks), scaling_factor=float(scaling))
