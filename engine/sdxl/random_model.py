"""A tiny SDXL-architecture UNet with random weights, made with numpy alone.

It is the built-in model of `slowframe demo` (no SDXL download, no torch): every
block type, GroupNorm(32), transformer depth > 1, cross-attention and the text_time
conditioning, at a size that runs in a second. Its pictures are noise; real ones
need real SDXL weights.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

from engine.safetensors import SafetensorsWriter
from engine.sdxl.unet_config import param_shapes, parse_config

TINY_UNET_CONFIG = {
    "_class_name": "UNet2DConditionModel",
    "sample_size": 16,
    "in_channels": 4,
    "out_channels": 4,
    "block_out_channels": [32, 64, 128],
    "layers_per_block": 2,
    "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
    "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
    "mid_block_type": "UNetMidBlock2DCrossAttn",
    "attention_head_dim": [2, 4, 8],
    "transformer_layers_per_block": [1, 2, 3],
    "cross_attention_dim": 96,
    "use_linear_projection": True,
    "addition_embed_type": "text_time",
    "addition_time_embed_dim": 8,
    "projection_class_embeddings_input_dim": 6 * 8 + 64,
    "norm_num_groups": 32,
    "norm_eps": 1e-5,
    "flip_sin_to_cos": True,
    "freq_shift": 0,
    "act_fn": "silu",
}


def write_random_unet(folder: str | Path, config: dict = TINY_UNET_CONFIG, seed: int = 0) -> Path:
    """Write config.json and fp16 random weights (scaled like a trained net's: fan-in
    normalised) to `folder`, atomically; returns the folder."""
    folder = Path(folder)
    cfg = parse_config(config)
    shapes = param_shapes(cfg)
    rng = np.random.default_rng(seed)
    tmp = folder.with_name(folder.name + ".partial")
    tmp.mkdir(parents=True, exist_ok=True)
    with open(tmp / "diffusion_pytorch_model.fp16.safetensors", "wb") as f:
        writer = SafetensorsWriter(f, [(n, "F16", s) for n, s in shapes.items()], {"format": "pt"})
        for name, shape in shapes.items():
            writer.write(name, _init(name, shape, rng).astype(np.float16))
        writer.close()
    (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if folder.exists():            # made meanwhile by another process: keep theirs
        shutil.rmtree(tmp)
    else:
        os.replace(tmp, folder)
    return folder


def _init(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if "norm" in name:
        base = 1.0 if name.endswith(".weight") else 0.0
        return base + 0.1 * rng.standard_normal(shape)
    if len(shape) == 1:
        return 0.02 * rng.standard_normal(shape)
    fan_in = int(np.prod(shape[1:]))
    return rng.standard_normal(shape) / np.sqrt(fan_in)
