"""What an SDXL model folder holds: its components, their weight files, and every tensor
each component's config.json implies (names as diffusers and transformers write them).

The importer writes exactly these tensors and `models verify` checks them; the UNet's
tensors are listed in the order one evaluation reads them, so a Pi reads the file
front to back.
"""

from __future__ import annotations

from collections.abc import Container
from pathlib import Path

from engine.errors import ModelFileError
from engine.sdxl import text_encoder, unet_config, vae_config

COMPONENTS = ("text_encoder", "text_encoder_2", "unet", "vae")
WEIGHT_FILES = {
    "unet": "diffusion_pytorch_model.safetensors",
    "vae": "diffusion_pytorch_model.safetensors",
    "text_encoder": "model.safetensors",
    "text_encoder_2": "model.safetensors",
}
TEXT_PREFIX = "text_model."


def weight_file(component: str) -> str:
    """Path of a component's weights inside a model folder."""
    return f"{component}/{WEIGHT_FILES[component]}"


VAE_ENCODER = ("encoder.", "quant_conv.")   # what only encoding reads; the engine decodes only


def expected_shapes(component: str, config: dict, where: str | Path,
                    present: Container[str] | None = None) -> dict[str, tuple[int, ...]]:
    """Every tensor of a component, with its shape; the UNet in execution order.

    `present` is what a file holds: a VAE without any of its encoder's tensors (slowframe's
    demo model, decoder-only exports) is then expected without the encoder. Part of an
    encoder is still a damaged file."""
    where = str(where)
    if component == "vae" and present is not None:
        shapes = vae_shapes(config, where)
        if any(name in present for name in shapes if name.startswith(VAE_ENCODER)):
            return shapes
        return {name: shape for name, shape in shapes.items() if not name.startswith(VAE_ENCODER)}
    if component == "unet":
        cfg = unet_config.parse_config(config, where)
        return _in_execution_order(unet_config.param_shapes(cfg), cfg)
    if component in ("text_encoder", "text_encoder_2"):
        cfg = text_encoder.parse_config(config, where)
        if component == "text_encoder_2" and not cfg.projection:
            raise ModelFileError(f"{where}: text_encoder_2 must be a CLIPTextModelWithProjection (SDXL's pooled "
                                 "text embedding comes from its text_projection)")
        return text_encoder.param_shapes(cfg, TEXT_PREFIX)
    if component == "vae":
        return vae_shapes(config, where)
    raise ValueError(component)


def vae_shapes(config: dict, where: str) -> dict[str, tuple[int, ...]]:
    """The whole AutoencoderKL: the decoder the engine runs, then the encoder (kept so the
    folder is a complete diffusers model)."""
    cfg = vae_config.parse_config(config, where)
    shapes = vae_config.param_shapes(cfg, vae_config.attention_names(lambda name: False))
    in_channels = config.get("in_channels", 3)
    if not isinstance(in_channels, int) or isinstance(in_channels, bool) or in_channels < 1:
        raise ModelFileError(f"{where}: in_channels must be a positive integer, got {in_channels!r}")

    def add(name: str, *shape: int) -> None:
        vae_config.add_param(shapes, name, *shape)

    def resnet(p: str, cin: int, cout: int) -> None:
        vae_config.add_resnet(shapes, p, cin, cout)

    channels, z = cfg.channels, cfg.latent_channels
    add("encoder.conv_in", channels[0], in_channels, 3, 3)
    prev = channels[0]
    for i, c in enumerate(channels):
        for j in range(cfg.layers):
            resnet(f"encoder.down_blocks.{i}.resnets.{j}", prev if j == 0 else c, c)
        if i < len(channels) - 1:
            add(f"encoder.down_blocks.{i}.downsamplers.0.conv", c, c, 3, 3)
        prev = c
    top = channels[-1]
    resnet("encoder.mid_block.resnets.0", top, top)
    if cfg.mid_attention:
        add("encoder.mid_block.attentions.0.group_norm", top)
        for proj in ("to_q", "to_k", "to_v", "to_out.0"):
            add(f"encoder.mid_block.attentions.0.{proj}", top, top)
    resnet("encoder.mid_block.resnets.1", top, top)
    add("encoder.conv_norm_out", top)
    add("encoder.conv_out", 2 * z, top, 3, 3)
    if config.get("use_quant_conv", True):
        add("quant_conv", 2 * z, 2 * z, 1, 1)
    return shapes


def _in_execution_order(shapes: dict[str, tuple[int, ...]], cfg: unet_config.UNetConfig) -> dict:
    """The UNet's tensors in the order a UNet evaluation asks for them (planned without
    any file: the model's dry run only needs names and shapes)."""
    from engine.options import Options
    from engine.sdxl.unet import UNet

    unet = UNet(_ShapesOnly(shapes), cfg, Options(weights="nocache"))
    order: dict[str, tuple[int, ...]] = {}
    for group in unet.plans[False]:
        for name in group:
            order.setdefault(name, shapes[name])
    for name, shape in shapes.items():
        order.setdefault(name, shape)
    return order


class _ShapesOnly:
    """Stands in for a TensorStore while a model plans its reads: names and shapes, no file."""

    def __init__(self, shapes: dict[str, tuple[int, ...]]):
        self.shapes = shapes

    def __contains__(self, name: str) -> bool:
        return name in self.shapes

    def shape(self, name: str) -> tuple[int, ...]:
        return self.shapes[name]

    def close(self) -> None:
        pass
