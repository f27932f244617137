"""Tiny SDXL-shaped random models, written in diffusers layout, for reference tests.

Each is built with diffusers from a seed, stored as fp16 safetensors (like real SDXL
files) and loaded back into an fp32 diffusers model, so the engine and the
reference use exactly the same weights.
"""

from __future__ import annotations

from pathlib import Path

import torch
from diffusers import UNet2DConditionModel

SDXL_BLOCKS = dict(
    down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
    up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
)

# Three tiny configs: each has three levels, GroupNorm(32), transformer depth > 1.
UNET_CONFIGS = {
    "tiny": dict(block_out_channels=(32, 64, 128), attention_head_dim=(2, 4, 8), transformer_layers_per_block=(1, 2, 3),
                 cross_attention_dim=96, addition_time_embed_dim=8, projection_class_embeddings_input_dim=6 * 8 + 64),
    "wide-heads": dict(block_out_channels=(64, 96, 128), attention_head_dim=(1, 3, 2),
                       transformer_layers_per_block=(1, 2, 2), cross_attention_dim=64, addition_time_embed_dim=16,
                       projection_class_embeddings_input_dim=6 * 16 + 32),
    "deep": dict(block_out_channels=(32, 64, 64), attention_head_dim=(1, 2, 4), transformer_layers_per_block=(1, 3, 2),
                 layers_per_block=1, cross_attention_dim=128, addition_time_embed_dim=4,
                 projection_class_embeddings_input_dim=6 * 4 + 40),
}


def unet_kwargs(name: str) -> dict:
    kw = dict(sample_size=16, in_channels=4, out_channels=4, layers_per_block=2, use_linear_projection=True,
              addition_embed_type="text_time", norm_num_groups=32, flip_sin_to_cos=True, freq_shift=0, **SDXL_BLOCKS)
    kw.update(UNET_CONFIGS[name])
    return kw


def pooled_dim(model: UNet2DConditionModel) -> int:
    c = model.config
    return c.projection_class_embeddings_input_dim - 6 * c.addition_time_embed_dim


def make_unet(name: str, folder: Path, seed: int = 0) -> UNet2DConditionModel:
    """Write tiny UNet `name` to `folder` (fp16 variant) and return its fp32 reference model."""
    folder = Path(folder)
    if not (folder / "config.json").exists():
        torch.manual_seed(seed)
        model = UNet2DConditionModel(**unet_kwargs(name))
        perturb_parameters(model, seed + 1)
        model.half().save_pretrained(folder, variant="fp16")
    model = UNet2DConditionModel.from_pretrained(folder, variant="fp16", torch_dtype=torch.float16).float()
    return model.eval()


def perturb_parameters(model: torch.nn.Module, generator_seed: int, embeddings: bool = False) -> None:
    """Default init leaves norms at weight 1, bias 0 and some outputs at zero; random
    values make every parameter matter so a wrong one changes the output. With
    `embeddings`, embedding tables get unit-variance values too (they keep text encoders'
    states far from trivial). Matrices keep the libraries' own init."""
    g = torch.Generator().manual_seed(generator_seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            elif embeddings and "embedding" in name and p.ndim == 2:
                p.copy_(torch.randn(p.shape, generator=g))
