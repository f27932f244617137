"""Where each diffusers tensor of SDXL lives in an original (SGM) single-file model.

SGM files (sd_xl_base_1.0.safetensors and most community fine-tunes) hold four models
under four prefixes; the tables below name, for every diffusers tensor, the SGM key it
comes from. They follow diffusers' loaders/single_file_utils.py, written as plain
module-to-module correspondences so the same rules map both ways (the importer reads
SGM -> diffusers; kohya LoRA names and the test/bench writers go diffusers -> SGM).

UNet (model.diffusion_model.*): the SGM UNet numbers its blocks flat.
    conv_in                                  input_blocks.0.0
    down_blocks.i.resnets.j                  input_blocks.n.0     n = 1 + (blocks of earlier levels) + j
    down_blocks.i.attentions.j               input_blocks.n.1
    down_blocks.i.downsamplers.0.conv        input_blocks.n.0.op  (n just after the level's resnets)
    mid_block.resnets.0 / attentions.0 / resnets.1   middle_block.0 / 1 / 2
    up_blocks.i.resnets.j                    output_blocks.n.0    n = (blocks of earlier levels) + j
    up_blocks.i.attentions.j                 output_blocks.n.1
    up_blocks.i.upsamplers.0.conv            output_blocks.n.2.conv (n.1.conv in levels without attention)
    time_embedding.linear_1/2, add_embedding.linear_1/2   time_embed.0/2, label_emb.0.0/0.2
    conv_norm_out, conv_out                  out.0, out.2
  Inside a resnet: norm1 in_layers.0, conv1 in_layers.2, time_emb_proj emb_layers.1,
  norm2 out_layers.0, conv2 out_layers.3, conv_shortcut skip_connection. Inside an
  attention (transformer) block every name is the same in both layouts.

VAE (first_stage_model.*): down_blocks.i.resnets.j -> down.i.block.j; the decoder's up
  blocks are numbered in reverse (up_blocks.i -> up.{levels-1-i}); samplers are
  downsample.conv / upsample.conv; mid_block.resnets.k -> mid.block_{k+1};
  mid_block.attentions.0 -> mid.attn_1 with group_norm, to_q, to_k, to_v, to_out.0 named
  norm, q, k, v, proj_out and stored as 1x1 convolution kernels; conv_shortcut ->
  nin_shortcut; conv_norm_out -> norm_out.

CLIP ViT-L (conditioner.embedders.0.transformer.*): transformers' own names.

OpenCLIP ViT-bigG (conditioner.embedders.1.model.*): token_embedding.weight,
  positional_embedding, ln_final, text_projection (stored transposed), and per layer
  transformer.resblocks.k with ln_1, ln_2, attn.out_proj, mlp.c_fc, mlp.c_proj and one
  fused attn.in_proj_weight/bias whose rows are q, k, v in that order.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.sdxl.unet_config import UNetConfig

UNET_PREFIX = "model.diffusion_model."
VAE_PREFIX = "first_stage_model."
CLIP_L_PREFIX = "conditioner.embedders.0.transformer."
OPEN_CLIP_PREFIX = "conditioner.embedders.1.model."

COMPONENT_PREFIXES = {
    "unet": UNET_PREFIX,
    "vae": VAE_PREFIX,
    "text_encoder": CLIP_L_PREFIX,
    "text_encoder_2": OPEN_CLIP_PREFIX,
}


@dataclass(frozen=True)
class SgmTensor:
    """The SGM key holding one diffusers tensor, and how it is stored there."""

    key: str
    rows: tuple[int, int] | None = None
    """Only these rows of the SGM tensor (OpenCLIP's fused q/k/v projection)."""
    transposed: bool = False
    """Stored transposed (OpenCLIP's text_projection)."""
    conv1x1: bool = False
    """A linear weight stored as a 1x1 convolution kernel, (out, in, 1, 1) (VAE attention)."""


def split_param(name: str) -> tuple[str, str]:
    """'a.b.weight' -> ('a.b', 'weight')."""
    module, _, param = name.rpartition(".")
    return module, param


# -- UNet ---------------------------------------------------------------------------

UNET_FIXED = {
    "conv_in": "input_blocks.0.0",
    "time_embedding.linear_1": "time_embed.0",
    "time_embedding.linear_2": "time_embed.2",
    "add_embedding.linear_1": "label_emb.0.0",
    "add_embedding.linear_2": "label_emb.0.2",
    "conv_norm_out": "out.0",
    "conv_out": "out.2",
}
RESNET_PARTS = {
    "norm1": "in_layers.0",
    "conv1": "in_layers.2",
    "time_emb_proj": "emb_layers.1",
    "norm2": "out_layers.0",
    "conv2": "out_layers.3",
    "conv_shortcut": "skip_connection",
}
MID_BLOCKS = {"resnets.0": "middle_block.0", "attentions.0": "middle_block.1", "resnets.1": "middle_block.2"}


def unet_module(module: str, cfg: UNetConfig) -> str:
    """The SGM module path (without UNET_PREFIX) of a diffusers UNet module path."""
    if module in UNET_FIXED:
        return UNET_FIXED[module]
    parts = module.split(".")
    if parts[0] == "mid_block":
        block = MID_BLOCKS.get(".".join(parts[1:3]))
        if block is None:
            raise KeyError(module)
        return _inside(block, parts[1], parts[3:])
    if parts[0] not in ("down_blocks", "up_blocks") or len(parts) < 5:
        raise KeyError(module)
    i, kind, j, rest = int(parts[1]), parts[2], int(parts[3]), parts[4:]
    if parts[0] == "down_blocks":
        first = 1 + sum(lv.layers + 1 for lv in cfg.down[:i])
        if kind == "downsamplers" and rest[0] == "conv":
            return ".".join([f"input_blocks.{first + cfg.down[i].layers}.0.op", *rest[1:]])
        if kind in ("resnets", "attentions") and j < cfg.down[i].layers:
            return _inside(f"input_blocks.{first + j}.{0 if kind == 'resnets' else 1}", kind, rest)
    else:
        first = sum(lv.layers + 1 for lv in cfg.up[:i])
        last = first + cfg.up[i].layers
        if kind == "upsamplers" and rest[0] == "conv":
            return ".".join([f"output_blocks.{last}.{2 if cfg.up[i].attention else 1}.conv", *rest[1:]])
        if kind in ("resnets", "attentions") and j <= cfg.up[i].layers:
            return _inside(f"output_blocks.{first + j}.{0 if kind == 'resnets' else 1}", kind, rest)
    raise KeyError(module)


def _inside(block: str, kind: str, rest: list[str]) -> str:
    if kind == "resnets":
        if not rest or rest[0] not in RESNET_PARTS:
            raise KeyError(".".join(rest))
        rest = [RESNET_PARTS[rest[0]], *rest[1:]]
    return ".".join([block, *rest])


def unet_key(name: str, cfg: UNetConfig) -> SgmTensor:
    module, param = split_param(name)
    return SgmTensor(f"{UNET_PREFIX}{unet_module(module, cfg)}.{param}")


# -- VAE ----------------------------------------------------------------------------

VAE_ATTENTION_PARTS = {"group_norm": "norm", "to_q": "q", "to_k": "k", "to_v": "v", "to_out.0": "proj_out"}


def vae_module(module: str, levels: int) -> str:
    """The SGM module path (without VAE_PREFIX) of a diffusers AutoencoderKL module path."""
    half, _, rest = module.partition(".")
    if half not in ("encoder", "decoder"):
        if module in ("quant_conv", "post_quant_conv"):
            return module
        raise KeyError(module)
    if rest in ("conv_in", "conv_out"):
        return module
    if rest == "conv_norm_out":
        return f"{half}.norm_out"
    parts = rest.split(".")
    if parts[0] == "mid_block" and parts[1] == "resnets":
        return ".".join([f"{half}.mid.block_{int(parts[2]) + 1}", *_vae_resnet(parts[3:])])
    if parts[0] == "mid_block" and parts[1:3] == ["attentions", "0"]:
        inner = ".".join(parts[3:])
        if inner not in VAE_ATTENTION_PARTS:
            raise KeyError(module)
        return f"{half}.mid.attn_1.{VAE_ATTENTION_PARTS[inner]}"
    blocks = {"encoder": "down_blocks", "decoder": "up_blocks"}[half]
    if parts[0] != blocks or len(parts) < 4:
        raise KeyError(module)
    i = int(parts[1])
    level = i if half == "encoder" else levels - 1 - i
    stage = f"{half}.{'down' if half == 'encoder' else 'up'}.{level}"
    if parts[2] == "resnets":
        return ".".join([f"{stage}.block.{parts[3]}", *_vae_resnet(parts[4:])])
    if parts[2] in ("downsamplers", "upsamplers") and parts[3:] == ["0", "conv"]:
        return f"{stage}.{'downsample' if half == 'encoder' else 'upsample'}.conv"
    raise KeyError(module)


def _vae_resnet(rest: list[str]) -> list[str]:
    return ["nin_shortcut" if rest[0] == "conv_shortcut" else rest[0], *rest[1:]]


def vae_key(name: str, levels: int) -> SgmTensor:
    module, param = split_param(name)
    sgm = vae_module(module, levels)
    projection = ".mid.attn_1." in sgm and not sgm.endswith(".norm")
    return SgmTensor(f"{VAE_PREFIX}{sgm}.{param}", conv1x1=projection and param == "weight")


# -- text encoders -------------------------------------------------------------------

def clip_l_key(name: str) -> SgmTensor:
    """CLIP ViT-L keeps transformers' names (with the text_model. prefix)."""
    return SgmTensor(CLIP_L_PREFIX + (name if name.startswith("text_model.") else "text_model." + name))


OPEN_CLIP_FIXED = {
    "text_model.embeddings.token_embedding.weight": "token_embedding.weight",
    "text_model.embeddings.position_embedding.weight": "positional_embedding",
    "text_model.final_layer_norm.weight": "ln_final.weight",
    "text_model.final_layer_norm.bias": "ln_final.bias",
}
OPEN_CLIP_LAYER_PARTS = {
    "layer_norm1": "ln_1",
    "layer_norm2": "ln_2",
    "self_attn.out_proj": "attn.out_proj",
    "mlp.fc1": "mlp.c_fc",
    "mlp.fc2": "mlp.c_proj",
}
QKV = ("q_proj", "k_proj", "v_proj")


def open_clip_key(name: str, width: int) -> SgmTensor:
    """OpenCLIP ViT-bigG: `width` is the hidden size (the q/k/v bands of in_proj)."""
    if name == "text_projection.weight":
        return SgmTensor(OPEN_CLIP_PREFIX + "text_projection", transposed=True)
    if not name.startswith("text_model."):
        name = "text_model." + name
    if name in OPEN_CLIP_FIXED:
        return SgmTensor(OPEN_CLIP_PREFIX + OPEN_CLIP_FIXED[name])
    parts = name.split(".")
    if parts[1:3] != ["encoder", "layers"] or len(parts) < 6:
        raise KeyError(name)
    layer = f"{OPEN_CLIP_PREFIX}transformer.resblocks.{int(parts[3])}"
    module, param = ".".join(parts[4:-1]), parts[-1]
    if module.startswith("self_attn.") and module.split(".")[1] in QKV:
        band = QKV.index(module.split(".")[1])
        return SgmTensor(f"{layer}.attn.in_proj_{param}", rows=(band * width, (band + 1) * width))
    if module not in OPEN_CLIP_LAYER_PARTS:
        raise KeyError(name)
    return SgmTensor(f"{layer}.{OPEN_CLIP_LAYER_PARTS[module]}.{param}")
