"""A tiny SDXL-architecture model with random weights, made with numpy alone.

It is the built-in model of `slowframe demo` (no SDXL download, no torch): a whole
model folder in diffusers layout - UNet with every block type, GroupNorm(32),
transformer depth > 1, cross-attention and the text_time conditioning; both CLIP
text encoders (quick_gelu and gelu, the second with its projection); the VAE
decoder; SDXL's scheduler config - small enough to make a picture in seconds. The
tokenizers are the standard CLIP vocabulary bundled with slowframe. Its pictures are
abstract noise; real ones need real SDXL weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from engine.atomic import atomic_folder
from engine.safetensors import SafetensorsWriter
from engine.sdxl import text_encoder, vae_config
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


TINY_TEXT_ENCODER_CONFIGS = {   # widths 32 + 64 = the UNet's cross_attention_dim; 64 = its pooled width
    "text_encoder": {"architectures": ["CLIPTextModel"], "model_type": "clip_text_model", "hidden_size": 32,
                     "num_attention_heads": 4, "num_hidden_layers": 3, "intermediate_size": 64,
                     "hidden_act": "quick_gelu", "vocab_size": 49408, "max_position_embeddings": 77,
                     "layer_norm_eps": 1e-5, "bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 1},
    "text_encoder_2": {"architectures": ["CLIPTextModelWithProjection"], "model_type": "clip_text_model",
                       "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 3, "intermediate_size": 128,
                       "hidden_act": "gelu", "projection_dim": 64, "vocab_size": 49408,
                       "max_position_embeddings": 77, "layer_norm_eps": 1e-5, "bos_token_id": 0, "eos_token_id": 2,
                       "pad_token_id": 1},
}

TINY_VAE_CONFIG = {
    "_class_name": "AutoencoderKL", "in_channels": 3, "out_channels": 3, "latent_channels": 4,
    "block_out_channels": [32, 32, 64, 64], "layers_per_block": 1, "norm_num_groups": 32, "act_fn": "silu",
    "down_block_types": ["DownEncoderBlock2D"] * 4, "up_block_types": ["UpDecoderBlock2D"] * 4,
    "scaling_factor": 0.13025, "sample_size": 64,
}

SDXL_SCHEDULER_CONFIG = {
    "_class_name": "EulerDiscreteScheduler", "num_train_timesteps": 1000, "beta_start": 0.00085, "beta_end": 0.012,
    "beta_schedule": "scaled_linear", "timestep_spacing": "leading", "steps_offset": 1,
    "prediction_type": "epsilon", "interpolation_type": "linear", "use_karras_sigmas": False,
}


def write_random_model(root: str | Path, seed: int = 0) -> Path:
    """Write the whole tiny model folder under `root` (atomically: a finished folder or none)."""
    root = Path(root)
    if (root / "model_index.json").is_file():
        return root
    try:
        with atomic_folder(root) as tmp:
            write_random_unet(tmp / "unet", seed=seed)
            vae = vae_config.parse_config(TINY_VAE_CONFIG)
            _write(tmp / "vae", "diffusion_pytorch_model.fp16.safetensors", TINY_VAE_CONFIG,
                   vae_config.param_shapes(vae, vae_config.attention_names(lambda name: False)), seed + 1)
            for i, (name, config) in enumerate(TINY_TEXT_ENCODER_CONFIGS.items()):
                shapes = text_encoder.param_shapes(text_encoder.parse_config(config), "text_model.")
                _write(tmp / name, "model.fp16.safetensors", config, shapes, seed + 2 + i)
            (tmp / "scheduler").mkdir()
            (tmp / "scheduler" / "scheduler_config.json").write_text(json.dumps(SDXL_SCHEDULER_CONFIG, indent=2) + "\n")
            (tmp / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionXLPipeline",
                                                              "slowframe": "tiny random demo model"}, indent=2) + "\n")
    except FileExistsError:
        pass                         # made meanwhile by another process: keep theirs
    return root


def write_random_unet(folder: str | Path, config: dict = TINY_UNET_CONFIG, seed: int = 0) -> Path:
    """Write config.json and fp16 random weights (scaled like a trained net's: fan-in
    normalised) to `folder`, atomically; returns the folder."""
    folder = Path(folder)
    try:
        with atomic_folder(folder) as tmp:
            _write(tmp, "diffusion_pytorch_model.fp16.safetensors", config, param_shapes(parse_config(config)), seed)
    except FileExistsError:
        pass                         # made meanwhile by another process: keep theirs
    return folder


def _write(folder: Path, filename: str, config: dict, shapes: dict[str, tuple[int, ...]], seed: int) -> None:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / filename, "wb") as f:
        writer = SafetensorsWriter(f, [(n, "F16", s) for n, s in shapes.items()], {"format": "pt"})
        for name, shape in shapes.items():
            writer.write(name, _init(name, shape, rng).astype(np.float16))
        writer.close()
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def _init(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if "embedding" in name:
        return 0.02 * rng.standard_normal(shape)
    if "norm" in name:
        base = 1.0 if name.endswith(".weight") else 0.0
        return base + 0.1 * rng.standard_normal(shape)
    if len(shape) == 1:
        return 0.02 * rng.standard_normal(shape)
    fan_in = int(np.prod(shape[1:]))
    return rng.standard_normal(shape) / np.sqrt(fan_in)
